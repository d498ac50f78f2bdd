"""Wiring shared by ``chat`` and ``compact``: one way to build the engine and its context policy."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from harness9.errors import UsageError

if TYPE_CHECKING:
    from harness9.config import ContextOptions, ProviderOptions, Settings
    from harness9.engine.engine import AgentEngine
    from harness9.engine.events import Event
    from harness9.provider import LLMProvider
    from harness9.schema import Usage
    from harness9.store.blobs import BlobStore
    from harness9.store.session import CheckpointedSession
    from harness9.tools.base import Approval, ApprovalAnswer

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
    confirm: Callable[[Approval], ApprovalAnswer] | None = None,
    assume_yes: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    auto_approve: tuple[str, ...] = (),
    blobs: BlobStore | None = None,
    provider_opts: ProviderOptions | None = None,
) -> AgentEngine:
    """The one engine ``chat`` and ``compact`` share, built from settings and context options.

    The reply's budget (``max_tokens``) comes from the model's output limit capped by
    ``provider_opts``; the compaction threshold keeps that much of the window free.
    """
    from harness9.context.policy import ContextPolicy
    from harness9.engine.engine import AgentEngine, EngineOptions
    from harness9.engine.prompt import PromptBuilder
    from harness9.provider import make_token_counter
    from harness9.tools import HistorySearchTool, OffloadRecallTool, default_registry

    def provider_for(model: str) -> LLMProvider:
        return _provider(model, settings, context_window, provider_opts, timeout, sleep)

    provider = provider_for(settings.model)
    opts = replace(opts, output_reserve=provider.max_tokens or 0)
    summarizer = provider
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
            stream=stream,
            assume_yes=assume_yes,
            confirm=confirm,
            auto_approve=auto_approve,
            api_base=settings.api_base or "",
        ),
    )

    _report_to(provider, report, summary=False)
    if summarizer is not provider:
        _report_to(summarizer, report, summary=True)
    return engine


def _provider(
    model: str,
    settings: Settings,
    context_window: int,
    popts: ProviderOptions | None,
    timeout: float,
    sleep: Callable[[float], None],
) -> LLMProvider:
    """The adapter for ``model``, its reply budget from the model's limit and the options."""
    from harness9.config import ProviderOptions
    from harness9.provider import LLMProvider
    from harness9.provider.limits import get_model_limits, output_budget

    popts = popts or ProviderOptions()
    limits = get_model_limits(model, override=context_window)
    return LLMProvider(
        model,
        settings.api_base,
        timeout=timeout,
        sleep=sleep,
        context_window=context_window,  # a local server (Ollama) is told to use it
        backoff_max=settings.retry_max_wait,
        max_tokens=output_budget(limits, popts.max_output_tokens),
        cache_ttl=popts.cache_ttl,
    )


def _report_to(provider: LLMProvider, report: Callable[[Event], None], *, summary: bool) -> None:
    """Send ``provider``'s retries and the usage of its cut-off calls to ``report``."""
    from harness9.engine import events as ev

    def on_retry(attempt: int, delay: float, reason: str) -> None:
        report(ev.Retrying(attempt, delay, reason))

    def on_cut_off(usage: Usage) -> None:
        report(ev.ModelUsage(provider.model, usage, summary=summary))

    provider.on_retry = on_retry
    provider.on_cut_off_usage = on_cut_off
