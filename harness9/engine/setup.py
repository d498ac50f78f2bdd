"""Wiring shared by ``chat`` and ``compact``: one way to build the engine and its context policy."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from harness9.errors import UsageError

if TYPE_CHECKING:
    from harness9.config import ContextOptions, Settings
    from harness9.engine.engine import AgentEngine
    from harness9.store.blobs import BlobStore
    from harness9.store.session import CheckpointedSession
    from harness9.tools.base import Approval

__all__ = ["build_engine", "resolve_workdir"]


def resolve_workdir(path: Path | None) -> Path:
    workdir = (path or Path.cwd()).expanduser()
    if not workdir.is_dir():
        raise UsageError(f"--workdir {workdir} is not a directory")
    return workdir.resolve()


def build_engine(
    settings: Settings,
    opts: ContextOptions,
    session: CheckpointedSession,
    workdir: Path,
    context_window: int,
    *,
    timeout: float = 120.0,
    stream: bool = True,
    confirm: Callable[[Approval], bool] | None = None,
    assume_yes: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    auto_approve: tuple[str, ...] = (),
    blobs: BlobStore | None = None,
) -> AgentEngine:
    """The one engine ``chat`` and ``compact`` share, built from settings and context options."""
    from harness9.context.policy import ContextPolicy
    from harness9.engine.engine import AgentEngine, EngineOptions
    from harness9.engine.prompt import PromptBuilder
    from harness9.provider import LLMProvider, make_token_counter
    from harness9.tools import HistorySearchTool, OffloadRecallTool, default_registry

    def provider_for(model: str) -> LLMProvider:
        return LLMProvider(
            model,
            settings.api_base,
            timeout=timeout,
            sleep=sleep,
            context_window=context_window,  # a local server (Ollama) is told to use it
            backoff_max=settings.retry_max_wait,
        )

    provider = summarizer = provider_for(settings.model)
    if opts.summary_model and opts.summary_model != settings.model:
        summarizer = provider_for(opts.summary_model)
    from harness9.engine import events as ev
    from harness9.engine.metering import MeteredSummarizer

    def report(event: ev.Event) -> None:
        # Looked up at call time: the chat loop installs its renderer after this.
        engine.on_event(event)

    policy = ContextPolicy.from_options(
        opts,
        MeteredSummarizer(summarizer, report),
        context_window,
        token_counter=make_token_counter(settings.model),
        blobs=blobs,
    )
    registry = default_registry()
    if policy.offload is not None or opts.recall:
        registry.register(OffloadRecallTool(policy.offload, handles=opts.recall))
    if opts.recall:
        registry.register(HistorySearchTool(policy.offload))
    engine = AgentEngine(
        provider,
        registry,
        workdir,
        session=session,
        policy=policy,
        prompt_builder=PromptBuilder(workdir),
        options=EngineOptions(
            stream=stream, assume_yes=assume_yes, confirm=confirm, auto_approve=auto_approve
        ),
    )

    def on_retry(attempt: int, delay: float, reason: str) -> None:
        report(ev.Retrying(attempt, delay, reason))

    provider.on_retry = on_retry
    if summarizer is not provider:
        summarizer.on_retry = on_retry
    return engine
