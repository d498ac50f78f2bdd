"""Wiring shared by ``chat`` and ``compact``: one way to build the engine and its context policy."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from harness9.errors import UsageError

if TYPE_CHECKING:
    from harness9.config import ContextOptions, ProviderOptions, Settings, SubAgentOptions
    from harness9.context.pipeline import CompactorFactory
    from harness9.context.policy import ContextPolicy
    from harness9.engine.background import BackgroundSummaries
    from harness9.engine.engine import AgentEngine, ModelProvider
    from harness9.engine.events import Event, EventSink
    from harness9.engine.prepared import AheadOfThreshold
    from harness9.engine.subagents import ChildSessions
    from harness9.provider import LLMProvider
    from harness9.schema import Usage
    from harness9.store.blobs import BlobStore
    from harness9.store.session import ChatSession, CheckpointedSession
    from harness9.tools.base import Approval, ApprovalAnswer
    from harness9.tools.mcp.toolset import McpTools
    from harness9.tools.offload import OffloadStore
    from harness9.tools.registry import ToolRegistry
    from harness9.tools.task import TaskTool

__all__ = ["build_engine", "resolve_workdir"]


def resolve_workdir(path: Path | None) -> Path:
    workdir = (path or Path.cwd()).expanduser()
    if not workdir.is_dir():
        raise UsageError(f"--workdir {workdir} is not a directory")
    return workdir.resolve()


def build_engine(
    settings: Settings,
    opts: ContextOptions,
    session: ChatSession,
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
    subagents: SubAgentOptions | None = None,
    children: ChildSessions | None = None,
    provider_opts: ProviderOptions | None = None,
    compactor_factory: CompactorFactory | None = None,
    mcp: McpTools | None = None,
) -> AgentEngine:
    """The one engine ``chat`` and ``compact`` share, built from settings and context options.

    The reply's budget (``max_tokens``) comes from the model's output limit capped by
    ``provider_opts``; the compaction threshold keeps that much of the window free.

    With ``subagents`` (enabled) and ``children`` (where their sessions go), the agent
    also has the `task` tool; its sub-agents are built here the same way.
    ``compactor_factory(summarizer, window, threshold_tokens)`` replaces the strategy's
    compactor (a benchmark comparing its own policies); the command line never sets it."""
    from harness9.engine.engine import AgentEngine, EngineOptions
    from harness9.engine.prompt import PromptBuilder

    parts = _Parts(
        settings,
        opts,
        workdir,
        context_window,
        timeout,
        sleep,
        blobs,
        provider_opts,
        confirm=confirm,
        assume_yes=assume_yes,
        auto_approve=auto_approve,
        compactor_factory=compactor_factory,
        mcp=mcp,
    )
    provider = parts.provider()
    parts.opts = replace(opts, output_reserve=provider.max_tokens or 0)
    if opts.prepare_ahead and opts.auto:
        from harness9.engine.background import BackgroundSummaries

        parts.background = BackgroundSummaries()  # threads start when a summary does
    policy, preparations = parts.policy(lambda event: engine.on_event(event))
    policy.window_listeners.append(provider.fit_window)
    offload = parts.offload(policy)
    sub = subagents if subagents is not None and subagents.enabled else None
    registry = parts.registry(offload, children if sub is not None else None)
    if sub is not None and children is not None:
        registry.register(parts.task_tool(sub, children, lambda event: engine.on_event(event)))
    engine = AgentEngine(
        provider,
        registry,
        workdir,
        session=session,
        policy=policy,
        offload=offload,
        prompt_builder=PromptBuilder(workdir),
        options=EngineOptions(
            stream=stream,
            assume_yes=assume_yes,
            confirm=confirm,
            auto_approve=auto_approve,
            api_base=settings.api_base or "",
            parallel_tasks=sub.parallel if sub is not None else 4,
        ),
    )
    _report_to(provider, lambda event: engine.on_event(event), summary=False)
    engine.background, engine.preparations = parts.background, preparations
    return engine


@dataclass(slots=True)
class _Parts:
    """The pieces of an engine, made the same way for the agent and its sub-agents."""

    settings: Settings
    opts: ContextOptions
    workdir: Path
    context_window: int
    timeout: float
    sleep: Callable[[float], None]
    blobs: BlobStore | None
    provider_opts: ProviderOptions | None
    # How tool calls are approved: the user's agent's, and every sub-agent's below it.
    confirm: Callable[[Approval], ApprovalAnswer] | None = None
    assume_yes: bool = False
    auto_approve: tuple[str, ...] = ()
    # A program's own compactor (``build_engine``'s ``compactor_factory``), if any.
    compactor_factory: CompactorFactory | None = None
    # The chat's MCP servers: every agent's registry offers their tools.
    mcp: McpTools | None = None
    # Where summaries are prepared ahead of the threshold (None: they are not).
    background: BackgroundSummaries | None = None

    def provider(self, model: str | None = None) -> LLMProvider:
        return _provider(
            model or self.settings.model,
            self.settings,
            self.context_window,
            self.provider_opts,
            self.timeout,
            self.sleep,
        )

    def policy(self, report: EventSink) -> tuple[ContextPolicy, AheadOfThreshold | None]:
        """A context policy of its own and the summaries it prepares ahead (None: none);
        its summaries' usage goes to ``report``."""
        from harness9.context.policy import ContextPolicy
        from harness9.engine.metering import MeteredSummarizer
        from harness9.engine.prepared import prepared_ahead
        from harness9.engine.views import LiveViews
        from harness9.provider import make_token_counter

        opts = self.opts
        summarizer = self.provider(opts.summary_model)
        _report_to(summarizer, report, summary=True)
        preparer = None
        if self.background is not None:
            from harness9.engine.background import BackgroundPreparer

            preparer = BackgroundPreparer(self.background, summarizer, report)
        answers, ahead = prepared_ahead(opts, MeteredSummarizer(summarizer, report), preparer)
        policy = ContextPolicy(
            opts,
            answers,
            self.context_window,
            token_counter=make_token_counter(self.settings.model),
            compactor_factory=self.compactor_factory,
            ahead=ahead,
            views=LiveViews(),  # each session's view between calls: reads only new rows
        )
        policy.window_listeners.append(summarizer.fit_window)
        return policy, ahead

    def offload(self, policy: ContextPolicy) -> OffloadStore | None:
        """Where big tool results go (None: ``offload`` is off); its inline limit follows
        the window the policy works with (``adopt_window``)."""
        from harness9.tools.offload import offload_limit, offload_store

        opts = self.opts
        if not opts.offload:
            return None
        store = offload_store(opts, self.context_window, self.blobs)

        def follow(window: int) -> None:
            store.config.max_result_tokens = offload_limit(opts.offload_max_result_tokens, window)

        policy.window_listeners.append(follow)
        return store

    def registry(
        self, offload: OffloadStore | None, children: ChildSessions | None
    ) -> ToolRegistry:
        from harness9.tokens import BYTES_PER_TOKEN
        from harness9.tools import HistorySearchTool, OffloadRecallTool, default_registry
        from harness9.tools.offload import offload_limit

        registry = default_registry()
        if offload is not None or self.opts.recall:
            # A page fits as a result does.
            inline = offload_limit(self.opts.offload_max_result_tokens, self.context_window)
            page = inline * BYTES_PER_TOKEN
            registry.register(OffloadRecallTool(offload, handles=self.opts.recall, max_chars=page))
        if self.opts.recall:
            subagents = None
            if children is not None:
                store = children

                def subagents(sid: str) -> list[tuple[str, CheckpointedSession]]:
                    return [
                        (k.description, store.open_session(k.session_id))
                        for k, _ in store.children(sid)
                    ]

            registry.register(HistorySearchTool(offload, subagents=subagents))
        if self.mcp is not None:
            placement = self.mcp.placement or mcp_placement(self.settings.model)
            registry.add_source(self.mcp.toolset(self.context_window, placement))
        return registry

    def task_tool(
        self,
        sub: SubAgentOptions,
        children: ChildSessions,
        report: EventSink,
        depth: int = 1,
    ) -> TaskTool:
        """The `task` tool of an agent at ``depth`` (1: the user's agent); its sub-agents
        have the same tools minus `task`, unless ``sub.nested`` allows one more level."""
        from harness9.engine.engine import AgentEngine, EngineOptions
        from harness9.engine.prompt import PromptBuilder
        from harness9.engine.subagents import Bounds, SubAgentRunner, subagent_prompt
        from harness9.tools.task import TaskTool

        bounds = Bounds(sub.max_model_calls, sub.max_tokens, sub.max_seconds)
        asking = _serialized(self.confirm, report)

        def spawn(session: ChatSession, model: ModelProvider, level: int) -> AgentEngine:
            def child_report(event: Event) -> None:
                child.on_event(event)  # the runner installs its forwarder after this

            policy, preparations = self.policy(child_report)
            offload = self.offload(policy)
            registry = self.registry(offload, children)
            if sub.nested and level < 2:
                registry.register(self.task_tool(sub, children, child_report, level + 1))
            child = AgentEngine(
                model,
                registry,
                self.workdir,
                session=session,
                policy=policy,
                offload=offload,
                prompt_builder=PromptBuilder(self.workdir, base_prompt=subagent_prompt()),
                options=EngineOptions(
                    # The bound on model calls is the runner's (it says so); this is a backstop.
                    max_iterations=bounds.max_model_calls + 1,
                    stream=False,
                    assume_yes=self.assume_yes,
                    confirm=asking,
                    auto_approve=self.auto_approve,
                    parallel_tasks=sub.parallel,
                    api_base=self.settings.api_base or "",
                ),
            )
            child.preparations = preparations
            return child

        def make_provider() -> LLMProvider:
            model = self.provider()
            _report_to(model, report, summary=False)
            return model

        runner = SubAgentRunner(
            spawn, children, make_provider, bounds, depth=depth, on_event=report
        )
        return TaskTool(runner)


def mcp_placement(model: str) -> str:
    """Where the definitions tool_search loads go (docs/mcp.md, "Where loaded definitions go").

    Providers that cache the request's prefix (every hosted one: OpenAI, Anthropic, Gemini,
    DeepSeek ...) put the tools list before the conversation, so a tool added to it makes
    every later request miss the cache from the start; delivered in the search's result, the
    definition leaves the prefix as it was (scripts/bench_mcp.py bills both ways). A local
    Ollama server bills nothing and its models call listed tools most reliably: the list."""
    from harness9.provider.ollama import is_ollama

    return "tools" if is_ollama(model) else "conversation"


def _serialized(
    confirm: Callable[[Approval], ApprovalAnswer] | None, report: EventSink
) -> Callable[[Approval], ApprovalAnswer] | None:
    """Sub-agents running side by side ask the user one at a time, live lines paused."""
    if confirm is None:
        return None
    import threading

    from harness9.engine import events as ev

    lock = threading.Lock()

    def ask(approval: Approval) -> ApprovalAnswer:
        with lock:
            report(ev.SubAgentAsking(True))
            try:
                return confirm(approval)
            finally:
                report(ev.SubAgentAsking(False))

    return ask


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
