"""ContextPolicy: what the model is shown, decided before every model call.

A policy owns
- the compactor (the strategy; its ``threshold_tokens`` is the one threshold that
  ``/context``, the trigger and ``compact --dry-run`` all show), and the optional
  topic-isolation compactor;
- the smart trigger (compact early when growth predicts the threshold) and the
  per-session state it and the compaction guard keep (``SessionContextState``);
- the offload store (large tool results go to files, recallable by id);
- token counting for display, and its calibration by the API's real input tokens.

How the engine uses it, per turn (``emit`` is the engine's event sink)::

    policy.begin_turn(session, system, emit)          # topic isolation, when enabled
    each model call:
        request = policy.prepare(session, system, tools, recent_tools, emit)
        reply, usage = model(request.messages, tools)  # request.shown_tokens for the UI
        policy.observe_usage(request, usage.input_tokens)
    the model said the context is too long: policy.compact(session, system, emit=emit), once
    each tool result: content = policy.offload_result(session_id, name, args, content)

``/compact`` and ``harness9 compact`` call ``compact``; ``--dry-run`` calls ``plan``;
``/context`` calls ``breakdown``; ``/new`` and ``/resume`` call ``forget``.
Build one from the resolved options with ``ContextPolicy.from_options``: the
threshold share lives only in those options.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from harness9.context.compaction import (
    CompactionPlan,
    CompactionResult,
    Compactor,
    SlidingWindowCompactor,
    TokenBudgetCompactor,
)
from harness9.context.events import (
    Compaction,
    CompactionProgress,
    CompactionStarted,
    ContextEventSink,
    Notice,
    discard,
)
from harness9.context.eviction import EVICTED_PREFIX, EvictionCompactor
from harness9.context.offload import OffloadConfig, OffloadStore, OffloadWriter
from harness9.context.phase2 import Phase2Compactor
from harness9.context.repair import repair_orphaned_tool_pairs
from harness9.context.summarize import SummarizationCompactor, Summarizer
from harness9.context.tokens import estimate_tokens, estimate_tool_tokens, format_token_count
from harness9.context.topics import SelectiveCompressor, TopicDetector
from harness9.context.triggers import CompressCooldown, SessionTriggerState, SmartTrigger
from harness9.context.view import ModelView, checkpoint_for, load_view
from harness9.errors import UsageError
from harness9.schema import Message, ToolDefinition
from harness9.store.blobs import BlobStore
from harness9.store.session import CheckpointedSession

if TYPE_CHECKING:
    from harness9.config import ContextOptions

__all__ = [
    "MIN_COMPACTION_GAIN",
    "ContextBreakdown",
    "ContextPolicy",
    "Request",
    "SessionContextState",
    "TokenCounter",
    "build_compactor",
]

# A compaction is announced (and stored) only when it cuts more than this share.
MIN_COMPACTION_GAIN = 0.05


class TokenCounter(Protocol):
    """Counts a request's tokens for display (the provider's tokenizer when it has one)."""

    def count(self, msgs: list[Message]) -> int: ...

    def calibrate(self, estimated: int, actual_input_tokens: int) -> None: ...


@dataclass(slots=True)
class Request:
    """What one model call sends, measured."""

    messages: list[Message]  # repaired: a valid tool sequence
    counted: int  # the token counter's count of ``messages`` (calibration input)
    shown_tokens: int  # what the token line shows before the call


@dataclass(slots=True)
class ContextBreakdown:
    """What one request would carry, by part (for /context)."""

    system: int
    tools: int
    summary: int
    messages: int
    message_count: int
    context_window: int
    threshold: int

    @property
    def total(self) -> int:
        return self.system + self.tools + self.summary + self.messages


@dataclass(slots=True)
class SessionContextState:
    """Per session: the trigger's state, and what the last compaction left behind."""

    trigger: SessionTriggerState = field(default_factory=SessionTriggerState)
    last_compaction_tokens: int | None = None  # estimate right after the last compaction
    evicted_announced: int = 0  # eviction stubs already announced (in-place results)
    warned_over_threshold: bool = False  # the "automatic compaction is off" notice was shown


def build_compactor(
    strategy: str, summarizer: Summarizer, context_window: int, *, threshold_tokens: int
) -> Compactor:
    """The compactor for a strategy name; every one compacts at ``threshold_tokens``.

    Summarising ones fall back to ``budget`` on errors.
    """
    if strategy == "summarize":
        return SummarizationCompactor(
            summarizer, threshold_tokens, summarizer_window=context_window
        )
    if strategy == "budget":
        return TokenBudgetCompactor(threshold_tokens)
    if strategy == "window":
        return SlidingWindowCompactor(max_tokens=threshold_tokens)
    if strategy == "evict":
        return EvictionCompactor(threshold_tokens)
    if strategy == "phase2":
        return Phase2Compactor(summarizer, threshold_tokens, context_window=context_window)
    from harness9.config import STRATEGIES

    raise UsageError(
        f"unknown compaction strategy {strategy!r}; choose one of: {', '.join(STRATEGIES)}"
    )


class ContextPolicy:
    """See the module docstring. Thread-safe for one turn at a time per session."""

    def __init__(
        self,
        compactor: Compactor | None,
        context_window: int,
        *,
        auto: bool = True,
        trigger: SmartTrigger | None = None,
        cooldown_iterations: int = 3,
        topics: Compactor | None = None,
        offload: OffloadStore | None = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        """``compactor`` None: nothing is ever compacted. ``auto`` False: never compact
        behind the user's back (a notice says to run /compact)."""
        self.compactor = compactor
        self.context_window = context_window
        self.auto = auto
        self.trigger = trigger
        self.cooldown_iterations = cooldown_iterations
        self.topics = topics
        self.offload = offload
        # Displayed estimates: the model's tokenizer when known, calibrated by the real
        # input tokens of each call. Compaction decisions keep the byte estimate, whose
        # head-room the threshold was chosen for.
        self.token_counter = token_counter
        self._calibrated = False
        self._lock = threading.Lock()
        self._states: dict[str, SessionContextState] = {}

    @classmethod
    def from_options(
        cls,
        opts: ContextOptions,
        summarizer: Summarizer,
        context_window: int,
        *,
        token_counter: TokenCounter | None = None,
        blobs: BlobStore | None = None,
    ) -> ContextPolicy:
        """The policy ``chat`` and ``compact`` use, from the resolved options.

        ``blobs`` is where offloaded outputs go: the session store's own (a database
        store keeps them with the sessions), or None for files in $HARNESS9_HOME.
        """
        threshold = int(context_window * opts.threshold)
        offload = None
        if opts.offload:
            offload = OffloadStore(
                OffloadConfig(
                    max_result_tokens=opts.offload_max_result_tokens,
                    max_result_bytes=opts.offload_max_result_bytes,
                    cleanup_age_days=opts.offload_cleanup_age_days,
                ),
                blobs,
            )
        topics = None
        if opts.enable_topic_isolation:
            detector = TopicDetector(
                cosine_threshold=opts.topic_similarity_threshold,
                min_segment_size=opts.topic_min_segment_size,
            )
            topics = SelectiveCompressor(detector, summarizer, summarizer_window=context_window)
        return cls(
            build_compactor(opts.strategy, summarizer, context_window, threshold_tokens=threshold),
            context_window,
            auto=opts.auto,
            trigger=(
                SmartTrigger(lookahead_iterations=opts.lookahead_iterations)
                if opts.smart_triggers
                else None
            ),
            cooldown_iterations=opts.cooldown_iterations,
            topics=topics,
            offload=offload,
            token_counter=token_counter,
        )

    # -- what users see ----------------------------------------------------------

    @property
    def threshold_tokens(self) -> int:
        """Where compaction starts (without a compactor: the window, nothing compacts)."""
        return self.compactor.threshold_tokens if self.compactor else self.context_window

    def breakdown(
        self, session: CheckpointedSession, system: Message, tools: list[ToolDefinition]
    ) -> ContextBreakdown:
        msgs = repair_orphaned_tool_pairs(load_view(session, system).messages)
        system_tokens = estimate_tokens(msgs[:1])
        summary = sum(estimate_tokens([m]) for m in msgs[1:] if m.is_summary)
        rest = estimate_tokens(msgs) - system_tokens - summary
        return ContextBreakdown(
            system=system_tokens,
            tools=estimate_tool_tokens(tools),
            summary=summary,
            messages=max(rest, 0),
            message_count=len(msgs) - 1,
            context_window=self.context_window,
            threshold=self.threshold_tokens,
        )

    def plan(
        self, session: CheckpointedSession, system: Message, *, force: bool = False
    ) -> tuple[ModelView, CompactionPlan | None]:
        """What a compaction would fold right now, without calling any model (--dry-run)."""
        view = load_view(session, system)
        comp = self.compactor
        return view, (comp.plan(view.messages, force=force) if comp is not None else None)

    def compact(
        self,
        session: CheckpointedSession,
        system: Message,
        *,
        force: bool = True,
        instructions: str | None = None,
        tools: list[ToolDefinition] | None = None,
        emit: ContextEventSink = discard,
    ) -> Compaction | None:
        """Compact now (/compact, ``harness9 compact``, a context-window error).

        Returns the notice, or None when nothing was folded (under the threshold
        without ``force``, or nothing left to fold).
        """
        comp = self.compactor
        if comp is None:
            return None
        view = load_view(session, system)
        if not force and not comp.plan(view.messages).would_compact:
            return None
        notice, _, _ = self._compact(
            session, system, view, comp, tools or [], emit, force=force, instructions=instructions
        )
        return notice

    # -- the engine's calls ------------------------------------------------------------

    def state(self, session_id: str) -> SessionContextState:
        """The session's state, created on first use."""
        with self._lock:
            st = self._states.get(session_id)
            if st is None:
                cooldown = CompressCooldown(self.cooldown_iterations)
                st = self._states[session_id] = SessionContextState(
                    SessionTriggerState(cooldown=cooldown)
                )
            return st

    def forget(self, session_id: str) -> None:
        """/new and /resume start the session with fresh state."""
        with self._lock:
            self._states.pop(session_id, None)

    def begin_turn(
        self, session: CheckpointedSession, system: Message, emit: ContextEventSink = discard
    ) -> None:
        """Experimental topic isolation: when the new message starts a new topic, fold the
        finished ones."""
        topics = self.topics
        if topics is None or not self.auto:
            return
        view = load_view(session, system)
        if topics.plan(view.messages).would_compact:
            self._compact(session, system, view, topics, [], emit, force=False)

    def prepare(
        self,
        session: CheckpointedSession,
        system: Message,
        tools: list[ToolDefinition],
        recent_tools: Sequence[str],
        emit: ContextEventSink = discard,
    ) -> Request:
        """The messages of the next model call: the view, compacted when it is time."""
        view = load_view(session, system)
        outgoing = view.messages
        comp = self.compactor
        st = self.state(session.session_id)
        decision = self._decide(comp, st, view, recent_tools, emit)
        if comp is not None and decision is not None:
            notice, view, outgoing = self._compact(
                session, system, view, comp, tools, emit, force=decision == "early"
            )
            if notice is not None and self.trigger is not None:
                st.trigger.compacted()
        messages = repair_orphaned_tool_pairs(outgoing)
        counted = self._count(messages)
        # Until the first calibration the tool definitions are added explicitly;
        # afterwards the calibration ratio accounts for them.
        shown = counted if self._calibrated else counted + estimate_tool_tokens(tools)
        return Request(messages, counted, shown)

    def observe_usage(self, request: Request, input_tokens: int) -> None:
        """Calibrates the displayed count with the API's real input tokens."""
        if input_tokens > 0 and self.token_counter is not None:
            self.token_counter.calibrate(request.counted, input_tokens)
            self._calibrated = True

    def output_opener(self, session_id: str) -> Callable[[str, str], OffloadWriter] | None:
        """Where a tool with huge output streams it (None: no offload store)."""
        store = self.offload
        if store is None:
            return None
        return lambda tool, args: store.open_stream(session_id, tool, args)

    def offload_result(
        self,
        session_id: str,
        tool_name: str,
        args_json: str,
        content: str,
        *,
        metadata: dict | None = None,
    ) -> str:
        """What the log keeps of a tool result: its offload summary when it was too big."""
        if self.offload is None:
            return content
        offloaded = self.offload.maybe_offload(
            session_id, tool_name, args_json, content, metadata=metadata
        )
        return offloaded.summary if offloaded is not None else content

    # -- internals -----------------------------------------------------------------

    def _count(self, msgs: list[Message]) -> int:
        if self.token_counter is None:
            return estimate_tokens(msgs)
        return self.token_counter.count(msgs)

    def _decide(
        self,
        comp: Compactor | None,
        st: SessionContextState,
        view: ModelView,
        recent_tools: Sequence[str],
        emit: ContextEventSink,
    ) -> str | None:
        """None, "threshold" (over the compactor's threshold) or "early" (the smart trigger).

        The fixed threshold always compacts. The smart trigger may compact early,
        when growth predicts the threshold will be crossed within a few model calls,
        and its cooldown limits only those early compactions. A compaction that could
        not get under the threshold (the protected tail alone is too big) is not
        repeated until the context has grown by another 5 %.
        """
        if comp is None:
            return None
        plan = comp.plan(view.messages)
        tokens = estimate_tokens(view.messages)
        if not self.auto:
            if plan.would_compact and not st.warned_over_threshold:
                st.warned_over_threshold = True
                emit(
                    Notice(
                        f"the context ({format_token_count(tokens)} tokens) is over the "
                        f"compaction threshold ({_threshold_text(comp, plan)}); "
                        "automatic compaction is off: run /compact"
                    )
                )
            return None
        early = False
        if self.trigger is not None and comp.threshold_tokens > 0:  # 0: blind to tokens
            info = st.trigger.info(
                tokens,
                recent_tools,
                max_tokens=self.context_window,
                threshold_tokens=comp.threshold_tokens,
            )
            early = self.trigger.should_compress_dynamic(info)
        last = st.last_compaction_tokens
        if (
            last is not None
            and tokens <= last * (1 + MIN_COMPACTION_GAIN)
            and tokens >= plan.threshold
        ):
            return None  # compacting again now would fold nothing new
        if plan.would_compact:
            return "threshold"
        return "early" if early else None

    def _compact(
        self,
        session: CheckpointedSession,
        system: Message,
        view: ModelView,
        comp: Compactor,
        tools: list[ToolDefinition],
        emit: ContextEventSink,
        *,
        force: bool,
        instructions: str | None = None,
    ) -> tuple[Compaction | None, ModelView, list[Message]]:
        """Run the compactor; returns (notice or None, the view, the messages to send).

        A folding result is stored as a checkpoint and the view rebuilt from it. An
        in-place result (eviction rewrites old tool results, folds nothing) is a pure
        function of the stored log, so it is recomputed per request, never stored.
        """
        tool_tokens = estimate_tool_tokens(tools)
        before = estimate_tokens(view.messages)
        emit(CompactionStarted(comp.strategy, before))
        result = comp.compact(
            view.messages,
            force=force,
            instructions=instructions,
            on_progress=lambda i, n: emit(CompactionProgress(i, n)),
        )
        after = estimate_tokens(result.messages)
        st = self.state(session.session_id)
        st.last_compaction_tokens = after
        gained = after < before * (1 - MIN_COMPACTION_GAIN) or (force and after < before)
        if not gained:
            return None, view, view.messages
        cp = checkpoint_for(view, result, previous=session.latest_checkpoint())
        if cp is None:
            if result.plan.cut != 1:
                return None, view, view.messages
            evicted = sum(1 for m in result.messages if m.content.startswith(EVICTED_PREFIX))
            announce = evicted > st.evicted_announced
            st.evicted_announced = evicted
            notice = _notice(view.messages, result.messages, tool_tokens, result)
            if announce:
                emit(notice)
            return (notice if announce else None), view, result.messages
        session.add_checkpoint(cp)
        st.evicted_announced = 0
        new_view = load_view(session, system)
        notice = _notice(view.messages, new_view.messages, tool_tokens, result)
        emit(notice)
        return notice, new_view, new_view.messages


def _notice(
    before: list[Message], after: list[Message], tool_tokens: int, result: CompactionResult
) -> Compaction:
    return Compaction(
        tokens_before=estimate_tokens(before) + tool_tokens,
        tokens_after=estimate_tokens(after) + tool_tokens,
        msgs_before=len(before),
        msgs_after=len(after),
        strategy=result.strategy,
        fallback_reason=result.error,
    )


def _threshold_text(comp: Compactor, plan: CompactionPlan) -> str:
    """The threshold a plan was measured against, in its unit (a blind window counts messages)."""
    if plan.threshold <= 0 and isinstance(comp, SlidingWindowCompactor):
        return f"{comp.max_messages} messages"
    return f"{format_token_count(plan.threshold)} tokens"
