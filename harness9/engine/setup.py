"""Wiring shared by ``chat`` and ``compact``: one way to build compactors, triggers and offload."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness9.config import EXTRA_STRATEGIES, STRATEGIES, STRATEGY_ALIASES, ContextOptions
from harness9.context.compaction import SlidingWindowCompactor, TokenBudgetCompactor
from harness9.context.eviction import EvictionCompactor
from harness9.context.hybrid import DEFAULT_TARGET, RECALL_SHARE, HybridCompactor
from harness9.context.offload import OffloadConfig, OffloadStore
from harness9.context.summarize import SummarizationCompactor
from harness9.context.topics import SelectiveCompressor, TopicDetector
from harness9.context.triggers import (
    CompressCooldown,
    SmartTrigger,
    TriggerInfo,
    TriggerRegistry,
    classify_pattern,
)
from harness9.errors import UsageError

__all__ = [
    "STRATEGIES",
    "SmartCompactionTrigger",
    "build_compactor",
    "build_offload_store",
    "build_topic_compressor",
    "recall_budget",
    "register_strategy",
    "resolve_workdir",
]


# A strategy a program adds (benchmarks compare peers' policies through the real chat):
# factory(summarizer, context_window, options) -> a compactor.
StrategyFactory = Callable[[Any, int, ContextOptions], Any]
_EXTRA_FACTORIES: dict[str, StrategyFactory] = {}


def register_strategy(name: str, factory: StrategyFactory) -> None:
    """Make ``--strategy name`` (and ``compaction.strategy``) build ``factory``'s compactor.

    For programs embedding harness9 (``scripts/bench_session.py`` registers the peers'
    policies this way); the built-in names cannot be replaced.
    """
    if name in STRATEGIES:
        raise ValueError(f"{name!r} is a built-in strategy")
    _EXTRA_FACTORIES[name] = factory
    if name not in EXTRA_STRATEGIES:
        EXTRA_STRATEGIES.append(name)


def build_compactor(
    strategy: str,
    summarizer: Any,
    context_window: int,
    *,
    threshold: float = 0.8,
    target: float = DEFAULT_TARGET,
    opts: ContextOptions | None = None,
) -> Any:
    """The compactor for a strategy name. Summarising ones fall back to ``budget`` on errors."""
    budget = int(context_window * threshold)
    strategy = STRATEGY_ALIASES.get(strategy, strategy)
    if strategy == "hybrid":
        return HybridCompactor(
            summarizer,
            context_window,
            threshold=threshold,
            target=target,
            summarizer_window=context_window,
        )
    if strategy == "summarize":
        return SummarizationCompactor(summarizer, budget, summarizer_window=context_window)
    if strategy == "budget":
        return TokenBudgetCompactor(budget)
    if strategy == "window":
        return SlidingWindowCompactor()
    if strategy == "evict":
        return EvictionCompactor(budget)
    if strategy in _EXTRA_FACTORIES:
        return _EXTRA_FACTORIES[strategy](summarizer, context_window, opts or ContextOptions())
    names = (*STRATEGIES, *EXTRA_STRATEGIES)
    raise UsageError(f"unknown compaction strategy {strategy!r}; choose one of: {', '.join(names)}")


def recall_budget(opts: ContextOptions, context_window: int) -> int:
    """Tokens a checkpoint's recall index may take (0 when recall is off)."""
    return max(1, int(context_window * RECALL_SHARE)) if opts.recall else 0


def build_offload_store(opts: ContextOptions) -> OffloadStore | None:
    if not opts.offload:
        return None
    return OffloadStore(
        OffloadConfig(
            max_result_tokens=opts.offload_max_result_tokens,
            max_result_bytes=opts.offload_max_result_bytes,
            cleanup_age_days=opts.offload_cleanup_age_days,
        )
    )


def build_topic_compressor(
    opts: ContextOptions, summarizer: Any, context_window: int
) -> SelectiveCompressor | None:
    if not opts.enable_topic_isolation:
        return None
    detector = TopicDetector(
        cosine_threshold=opts.topic_similarity_threshold,
        min_segment_size=opts.topic_min_segment_size,
    )
    return SelectiveCompressor(detector, summarizer, summarizer_window=context_window)


class SmartCompactionTrigger:
    """The engine's trigger seam backed by the phase-2 rule (memory/triggers.py).

    Keeps per-session growth and cooldown state; iterations count up for the
    whole life of a session in this process, as the cooldown rule expects.
    """

    def __init__(
        self,
        context_window: int,
        *,
        threshold: float = 0.8,
        cooldown_iterations: int = 3,
        lookahead_iterations: int = 2,
    ) -> None:
        self.context_window = context_window
        self.rule = SmartTrigger(threshold=threshold, lookahead_iterations=lookahead_iterations)
        self.cooldown_iterations = cooldown_iterations
        self.registry = TriggerRegistry()
        self._iterations: dict[str, int] = {}

    def should_compact(
        self, session_id: str, iteration: int, tokens: int, tools_used: list[str]
    ) -> bool:
        i = self._iterations.get(session_id, 0) + 1
        self._iterations[session_id] = i
        state = self.registry.get(session_id)
        if state.cooldown.cooldown_iterations != self.cooldown_iterations:
            state.cooldown = CompressCooldown(self.cooldown_iterations)
        info = TriggerInfo(
            max_tokens=self.context_window,
            current_tokens=tokens,
            iteration_count=i,
            tool_call_count=len(tools_used),
            token_history=state.growth_tracker.history(),
            growth_rate=state.growth_tracker.growth_rate(),
            recent_tools=tools_used[-5:],
            tool_pattern=classify_pattern(tools_used[-5:]),
            in_cooldown=state.cooldown.in_cooldown(i),
        )
        decision = self.rule.should_compress_dynamic(info)
        state.growth_tracker.record(i, tokens)
        return decision

    def compacted(self, session_id: str, iteration: int) -> None:
        # (The growth tracker restarts by itself when it sees the compaction's drop.)
        self.registry.get(session_id).cooldown.record_compress(self._iterations.get(session_id, 0))

    def reset(self, session_id: str) -> None:
        """/new and /resume start fresh trigger state for the session."""
        self.registry.drop(session_id)
        self._iterations.pop(session_id, None)


def resolve_workdir(path: Path | None) -> Path:
    workdir = (path or Path.cwd()).expanduser()
    if not workdir.is_dir():
        raise UsageError(f"--workdir {workdir} is not a directory")
    return workdir.resolve()


def build_engine(
    settings: Any,
    opts: ContextOptions,
    session: Any,
    workdir: Path,
    context_window: int,
    *,
    timeout: float = 120.0,
    **engine_kwargs: Any,
) -> Any:
    """The one engine ``chat`` and ``compact`` share, built from settings and context options."""
    from harness9.engine.engine import AgentEngine
    from harness9.engine.prompt import PromptBuilder
    from harness9.provider import LLMProvider, make_token_counter
    from harness9.tools import HistorySearchTool, OffloadRecallTool, default_registry

    provider = LLMProvider(settings.model, settings.api_base, timeout=timeout)
    summarizer = provider
    if opts.summary_model and opts.summary_model != settings.model:
        summarizer = LLMProvider(opts.summary_model, settings.api_base, timeout=timeout)
    registry = default_registry()
    offload = build_offload_store(opts)
    if offload is not None or opts.recall:
        registry.register(OffloadRecallTool(offload, handles=opts.recall))
    if opts.recall:
        registry.register(HistorySearchTool(offload))
    trigger = None
    if opts.smart_triggers:
        trigger = SmartCompactionTrigger(
            context_window,
            threshold=opts.threshold,
            cooldown_iterations=opts.cooldown_iterations,
            lookahead_iterations=opts.lookahead_iterations,
        )
    return AgentEngine(
        provider,
        registry,
        workdir,
        session=session,
        compactor=build_compactor(
            opts.strategy,
            summarizer,
            context_window,
            threshold=opts.threshold,
            target=opts.target,
            opts=opts,
        ),
        recall_budget=recall_budget(opts, context_window),
        context_window=context_window,
        prompt_builder=PromptBuilder(workdir),
        offload=offload,
        trigger=trigger,
        auto_compact=opts.auto,
        topic_compressor=build_topic_compressor(opts, summarizer, context_window),
        token_counter=make_token_counter(settings.model),
        **engine_kwargs,
    )
