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
    each tool result: content, link = policy.offload_result(session_id, name, args, content)

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

from harness9.context.compaction import CompactionPlan, CompactionResult, Compactor
from harness9.context.events import (
    Compaction,
    CompactionProgress,
    CompactionStarted,
    ContextEventSink,
    Notice,
    discard,
)
from harness9.context.instructions import instruction_budget, with_notes
from harness9.context.live_view import LiveViews
from harness9.context.offload import OffloadConfig, OffloadStore, OffloadWriter
from harness9.context.pipeline import (
    DEFAULT_TARGET,
    RECALL_SHARE,
    CompactorFactory,
    HybridCompactor,
    MessageBound,
    SlidingWindowCompactor,
    SummarizationCompactor,
    TokenBudgetCompactor,
    eviction_compactor,
    tail_compactor,
    topic_compactor,
)
from harness9.context.recall import state_items
from harness9.context.repair import repair_orphaned_tool_pairs
from harness9.context.summarize import Summarizer
from harness9.context.tokens import (
    BYTES_PER_TOKEN,
    estimate_tokens,
    estimate_tool_tokens,
    format_token_count,
)
from harness9.context.topics import TopicDetector
from harness9.context.triggers import SessionTriggerState, SmartTrigger
from harness9.context.view import ModelView, build_view, checkpoint_for, load_view
from harness9.errors import UsageError
from harness9.schema import UNFINISHED_STUB, Message, ToolDefinition
from harness9.store.blobs import BlobStore
from harness9.store.session import Checkpoint, CheckpointedSession, OffloadLink

if TYPE_CHECKING:
    from harness9.config import ContextOptions

__all__ = [
    "MIN_COMPACTION_GAIN",
    "ContextBreakdown",
    "ContextPolicy",
    "Request",
    "SessionContextState",
    "TokenCounter",
    "MODEL_FREE_STRATEGIES",
    "build_compactor",
]

# A compaction is announced (and stored) only when it cuts more than this share.
MIN_COMPACTION_GAIN = 0.05
# What a plan's strategy says when carrying it out calls no model: a dry run then
# computes the exact result.
MODEL_FREE_STRATEGIES = frozenset({"budget", "window", "evict", "hybrid:stubs"})


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
    estimated: int  # bytes / 4 of ``messages`` plus the tool definitions (decisions' unit)


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
    warned_over_threshold: bool = False  # the "automatic compaction is off" notice was shown
    # The strategy and view (newest id, messages, tokens) a compaction was tried on and did
    # not shrink: trying again before it changes would bill the same summary call for nothing.
    futile: tuple[str, int | None, int, int] | None = None


def build_compactor(
    strategy: str,
    summarizer: Summarizer,
    context_window: int,
    *,
    threshold_tokens: int,
    target: float = DEFAULT_TARGET,
) -> Compactor:
    """The compactor for a strategy name; every one compacts at ``threshold_tokens``.

    Summarising ones fall back to ``budget`` on errors. ``target`` (a share of the
    window) is where ``hybrid`` compacts down to.
    """
    from harness9.config import STRATEGIES

    if strategy == "hybrid":
        return HybridCompactor(
            summarizer,
            context_window,
            threshold=threshold_tokens / context_window,
            target=target,
        )
    if strategy == "summarize":
        return SummarizationCompactor(
            summarizer, threshold_tokens, summarizer_window=context_window
        )
    if strategy == "budget":
        return TokenBudgetCompactor(threshold_tokens)
    if strategy == "window":
        return SlidingWindowCompactor(max_tokens=threshold_tokens)
    if strategy == "evict":
        return eviction_compactor(threshold_tokens)
    names = ", ".join(STRATEGIES)
    raise UsageError(f"unknown compaction strategy {strategy!r}; choose one of: {names}")


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
        recall_budget: int = 0,
        message_bound: MessageBound | None = None,
        instruction_budget: int = 0,
    ) -> None:
        """``compactor`` None: nothing is ever compacted. ``auto`` False: never compact
        behind the user's back (a notice says to run /compact). ``recall_budget``: the
        tokens a checkpoint's recall index of folded tool results may take (0: none).
        ``message_bound``: folds old messages when the view has too many, whatever
        their tokens (``MessageBound``); None: the view is bounded in tokens only."""
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
        self.recall_budget = recall_budget
        self.message_bound = message_bound
        # Each session's view between calls: a request reads only the new rows.
        self.views = LiveViews()
        # Tokens of the user's folded messages a checkpoint keeps verbatim (0: none).
        self.instruction_budget = instruction_budget
        self._calibrated = False
        # Tokens per message the server counted beyond the byte estimate in the last call:
        # each message's framing (roles, block types, tool-call ids, JSON) and the
        # tokenizer's difference. Decisions add it, so compaction starts at the threshold
        # by the server's count, not only by the estimate (issue 19: a session of many
        # small tool results reached 99 % of the window with the estimate under 80 %).
        self.overhead_per_message = 0.0
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
        compactor_factory: CompactorFactory | None = None,
    ) -> ContextPolicy:
        """The policy ``chat`` and ``compact`` use, from the resolved options.

        ``blobs`` is where offloaded outputs go: the session store's own (a database
        store keeps them with the sessions), or None for files in $HARNESS9_HOME.
        ``compactor_factory(summarizer, context_window, threshold_tokens)`` replaces the
        strategy's compactor: for programs that compare their own (a benchmark's peers).
        """
        threshold = opts.threshold_tokens(context_window)
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
            topics = topic_compactor(detector, summarizer, summarizer_window=context_window)
        if compactor_factory is not None:
            compactor = compactor_factory(summarizer, context_window, threshold)
        else:
            compactor = build_compactor(
                opts.strategy,
                summarizer,
                context_window,
                threshold_tokens=threshold,
                target=opts.target,
            )
        return cls(
            compactor,
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
            recall_budget=max(1, int(context_window * RECALL_SHARE)) if opts.recall else 0,
            message_bound=(
                MessageBound(opts.max_messages, opts.max_messages // 2)
                if opts.max_messages
                else None
            ),
            instruction_budget=instruction_budget(context_window),
        )

    # -- what users see ----------------------------------------------------------

    @property
    def threshold_tokens(self) -> int:
        """Where compaction starts (without a compactor: the window, nothing compacts)."""
        return self.compactor.threshold_tokens if self.compactor else self.context_window

    def breakdown(
        self, session: CheckpointedSession, system: Message, tools: list[ToolDefinition]
    ) -> ContextBreakdown:
        msgs = repair_orphaned_tool_pairs(load_view(session, system).messages, stub=UNFINISHED_STUB)
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
        self,
        session: CheckpointedSession,
        system: Message,
        *,
        force: bool = False,
        tools: list[ToolDefinition] | None = None,
    ) -> tuple[ModelView, CompactionPlan | None]:
        """What ``compact`` would do right now, without calling any model (--dry-run).

        The figures are chat's: the messages sent plus the tool definitions. When the
        compaction needs no model (truncation, eviction, stubs), it is run without
        storing anything, under the rule ``compact`` applies, so ``would_compact`` and
        ``tokens_after`` are exactly what ``compact`` then does; a summary's size is only
        known once the model answers, so it stays an estimate, never above the size now.
        """
        view = load_view(session, system)
        comp = self.compactor
        if comp is None:
            return view, None
        measured = self._measured(session, system, tools or [])
        plan = comp.plan(measured.messages, force=force)
        if plan.would_compact and plan.strategy in MODEL_FREE_STRATEGIES:
            _, cp, _ = self._fitted(session, system, measured, comp, tools or [], force=force)
            if cp is None or not _gained(cp.tokens_before, cp.tokens_after, force):
                plan.would_compact = False
                plan.tokens_after = plan.tokens_before
            else:
                plan.tokens_before, plan.tokens_after = cp.tokens_before, cp.tokens_after
        elif not plan.would_compact:
            plan.tokens_after = plan.tokens_before
        else:  # a summary's size is estimated; a compaction that would grow is not stored
            plan.tokens_after = min(plan.tokens_after, plan.tokens_before)
        return view, plan

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
        measured = self._measured(session, system, tools or [])
        if not force and not comp.plan(measured.messages).would_compact:
            return None
        notice, _ = self._compact(
            session,
            system,
            measured,
            comp,
            tools or [],
            emit,
            force=force,
            instructions=instructions,
        )
        over = estimate_tokens(measured.messages) > self.threshold_tokens
        if notice is None and force and over:
            # Asked for, over the threshold, and the strategy folded nothing: the
            # protected tail goes, as a last resort, rather than the next turn overflowing.
            tail = tail_compactor(self.threshold_tokens)
            notice, _ = self._compact(
                session, system, measured, tail, tools or [], emit, force=True
            )
        return notice

    # -- the engine's calls ------------------------------------------------------------

    def after_overflow(
        self,
        session: CheckpointedSession,
        system: Message,
        tools: list[ToolDefinition],
        reason: str,
        *,
        emit: ContextEventSink = discard,
        may_compact: bool = True,
    ) -> str | None:
        """The model rejected the request as too long (``reason``) although the estimate
        said it fits. Compacts harder, once per model call, and returns None for the
        caller to retry; or returns the error to report when it may not compact."""
        if not self.auto:
            return f"{reason} — automatic compaction is off: run /compact, then send again"
        if not may_compact or self.compactor is None:
            return reason
        emit(
            Notice(
                f"the model rejected the context as too long ({reason}); compacting and retrying"
            )
        )
        self.compact(session, system, tools=tools, emit=emit)
        return None

    def state(self, session_id: str) -> SessionContextState:
        """The session's state, created on first use."""
        with self._lock:
            st = self._states.get(session_id)
            if st is None:
                st = self._states[session_id] = SessionContextState(
                    SessionTriggerState(self.cooldown_iterations)
                )
            return st

    def forget(self, session_id: str) -> None:
        """/new and /resume start the session with fresh state."""
        with self._lock:
            self._states.pop(session_id, None)
        self.views.forget(session_id)

    def begin_turn(
        self, session: CheckpointedSession, system: Message, emit: ContextEventSink = discard
    ) -> None:
        """Experimental topic isolation: when the new message starts a new topic, fold the
        finished ones."""
        topics = self.topics
        if topics is None or not self.auto:
            return
        measured = self._measured(session, system, [])
        if topics.plan(measured.messages).would_compact:
            self._compact(session, system, measured, topics, [], emit, force=False)

    def prepare(
        self,
        session: CheckpointedSession,
        system: Message,
        tools: list[ToolDefinition],
        recent_tools: Sequence[str],
        emit: ContextEventSink = discard,
        *,
        may_compact: bool = True,
    ) -> Request:
        """The messages of the next model call: the view, compacted when it is time.

        ``may_compact`` False: this model call already had its compaction (the model
        rejected the context and it was compacted): never two for one call.
        """
        # The live view reads only the rows stored since the last call (issue 23); its
        # system message is padded by the tools' weight so every decision counts them.
        live = self.views.load(session, measured_system(system, tools))
        measured = live.view
        outgoing = [live.noted(system), *measured.messages[1:]]
        comp = self.compactor
        st = self.state(session.session_id)
        decision = None
        if may_compact:
            decision = self._decide(comp, st, measured, recent_tools, emit, live.tokens)
        if comp is not None and decision is not None:
            notice, sent = self._compact(
                session, system, measured, comp, tools, emit, force=decision == "early"
            )
            if notice is not None:
                outgoing = sent
                if self.trigger is not None:
                    st.trigger.compacted()
        elif may_compact and self._over_message_bound(measured):
            assert self.message_bound is not None  # checked by _over_message_bound
            notice, sent = self._compact(
                session, system, measured, self.message_bound, tools, emit, force=True
            )
            if notice is not None:
                outgoing = sent
        messages = repair_orphaned_tool_pairs(outgoing, stub=UNFINISHED_STUB)
        counted = self._count(messages)
        # Until the first calibration the tool definitions are added explicitly;
        # afterwards the calibration ratio accounts for them.
        shown = counted if self._calibrated else counted + estimate_tool_tokens(tools)
        estimated = estimate_tokens(messages) + estimate_tool_tokens(tools)
        return Request(messages, counted, shown, estimated)

    def _over_message_bound(self, view: ModelView) -> bool:
        """More messages than the bound allows, and compaction may run by itself."""
        bound = self.message_bound
        return (
            bound is not None
            and self.auto
            and self.compactor is not None
            and len(view.messages) > bound.max_messages
        )

    def observe_usage(self, request: Request, input_tokens: int) -> None:
        """Calibrates the displayed count, and the framing every decision adds to the
        byte estimate, with the API's real input tokens."""
        if input_tokens > 0 and request.estimated > 0:
            excess = input_tokens - request.estimated
            self.overhead_per_message = max(0.0, excess / max(1, len(request.messages)))
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
    ) -> tuple[str, OffloadLink | None]:
        """What the log keeps of a tool result: its offload summary when it was too big,
        with the link to that offload (stored with the message as data)."""
        if self.offload is None:
            return content, None
        offloaded = self.offload.maybe_offload(
            session_id, tool_name, args_json, content, metadata=metadata
        )
        if offloaded is None:
            return content, None
        return offloaded.summary, OffloadLink(offloaded.id, offloaded.token_size)

    # -- internals -----------------------------------------------------------------

    def _measured(
        self, session: CheckpointedSession, system: Message, tools: Sequence[ToolDefinition]
    ) -> ModelView:
        """The view as every decision measures it: messages plus tool definitions."""
        return load_view(session, measured_system(system, tools))

    def server_tokens(self, view: ModelView, tokens: int | None = None) -> int:
        """The measured ``view`` as the server is expected to count it: its byte estimate
        (``tokens`` when already known) plus the framing the last call showed per message."""
        if tokens is None:
            tokens = estimate_tokens(view.messages)
        return tokens + int(self.overhead_per_message * len(view.messages))

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
        tokens: int | None = None,
    ) -> str | None:
        """None, "threshold" (over the compactor's threshold) or "early" (the smart trigger).

        ``view`` is measured (its system message carries the tool definitions' weight),
        so the threshold is compared with what the request costs. The fixed threshold
        always compacts, whether the estimate or the server's expected count
        (``server_tokens``: plus the framing the last call showed) crosses it. The smart
        trigger may compact early, when the estimate's growth predicts the threshold will
        be crossed within a few model calls, and its cooldown limits only those early
        compactions. A compaction that could not get under the threshold
        (the protected tail alone is too big) is not repeated until the context has
        grown by another 5 %.
        """
        if comp is None:
            return None
        plan = comp.plan(view.messages)
        if tokens is None:
            tokens = estimate_tokens(view.messages)
        served = self.server_tokens(view, tokens)
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
            and served >= plan.threshold
        ):
            return None  # compacting again now would fold nothing new
        if plan.would_compact:
            return "threshold"
        if comp.threshold_tokens > 0 and served >= comp.threshold_tokens:
            # Under the threshold by the estimate, over it by the server's count: compact
            # as the trigger's early compaction does (forced: the compactor's own check
            # counts the estimate only).
            return "early"
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
    ) -> tuple[Compaction | None, list[Message]]:
        """Run the compactor on the measured ``view``; returns (notice or None, the
        messages to send, with the real ``system`` message).

        Every result that changes the view is stored as a checkpoint, eviction stubs
        included (ARCHITECTURE decision 7): the view is then a pure function of the log
        and the latest checkpoint, the same bytes on every request until the next
        compaction and on ``--resume``. The notice, the checkpoint, ``--dry-run`` and
        ``/context`` count the same way: the messages sent plus the tool definitions.
        """
        before = estimate_tokens(view.messages)
        st = self.state(session.session_id)
        tried = (comp.strategy, view.ids[-1] if view.ids else None, len(view.messages), before)
        if st.futile == tried and instructions is None:
            return None, [noted_system(session, system), *view.messages[1:]]
        emit(CompactionStarted(comp.strategy, before))
        result, cp, new_view = self._fitted(
            session,
            system,
            view,
            comp,
            tools,
            force=force,
            instructions=instructions,
            on_progress=lambda i, n: emit(CompactionProgress(i, n)),
        )
        after = cp.tokens_after if cp is not None else before
        st.last_compaction_tokens = after
        if cp is None or not _gained(before, after, force):
            st.futile = tried
            return None, [noted_system(session, system), *view.messages[1:]]
        cp = session.add_checkpoint(cp)
        notice = Compaction(
            tokens_before=cp.tokens_before,
            tokens_after=cp.tokens_after,
            msgs_before=cp.messages_before,
            msgs_after=cp.messages_after,
            strategy=result.strategy,
            fallback_reason=result.error,
        )
        emit(notice)
        return notice, [noted_system(session, system), *new_view.messages[1:]]

    def _fitted(
        self,
        session: CheckpointedSession,
        system: Message,
        view: ModelView,
        comp: Compactor,
        tools: list[ToolDefinition],
        *,
        force: bool,
        instructions: str | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> tuple[CompactionResult, Checkpoint | None, ModelView]:
        """Run ``comp`` on the measured ``view``: the result, the checkpoint it would store
        and the view it gives.

        The user's messages a compaction folds are kept verbatim beside the summary
        (``instructions.py``), so the view after it can be larger than what the
        compactor kept. A compaction that needs no model is then run again with that
        excess counted in the system message, so that it lands under the threshold as
        every compaction must; one with a summary is not repeated (a model call each).
        """
        padded, pad_bytes = view, 0
        for _ in range(8):  # each step folds at least the excess more; cheap, no model
            result = comp.compact(
                padded.messages, force=force, instructions=instructions, on_progress=on_progress
            )
            if padded is not view:  # the padding only steered the cut; it is never stored
                result.messages = [view.messages[0], *result.messages[1:]]
            cp, new_view = self.checkpoint_of(session, system, view, result, tools)
            limit = comp.threshold_tokens
            if (
                cp is None
                or result.summary is not None
                or result.strategy not in MODEL_FREE_STRATEGIES
                or limit <= 0
                or cp.tokens_after <= limit
            ):
                break
            # Whole messages are cut: the pad doubles until the next one goes.
            pad_bytes = max(pad_bytes * 2, (cp.tokens_after - limit) * BYTES_PER_TOKEN)
            head = view.messages[0]
            pad = Message(head.role, head.content + " " * pad_bytes)
            padded = ModelView([pad, *view.messages[1:]], view.ids)
        return result, cp, new_view

    def checkpoint_of(
        self,
        session: CheckpointedSession,
        system: Message,
        view: ModelView,
        result: CompactionResult,
        tools: list[ToolDefinition],
    ) -> tuple[Checkpoint | None, ModelView]:
        """The checkpoint ``result`` would store and the (measured) view it gives; nothing
        is stored. ``view`` is measured: its system message carries the tools' weight.

        Its figures are the ones the notice, ``sessions show`` and ``--dry-run`` print.
        """
        cp = checkpoint_for(
            view,
            result,
            previous=session.latest_checkpoint(),
            recall_budget=self.recall_budget,
            state=state_items(session),
            instruction_budget=self.instruction_budget,
        )
        if cp is None:
            return None, view
        sized = measured_system(system, tools)
        new_view = build_view(
            sized, session.get_records(after_id=cp.last_message_id), cp, session.pins()
        )
        cp.tokens_before = estimate_tokens(view.messages)
        cp.tokens_after = estimate_tokens(new_view.messages)
        cp.messages_before = len(view.messages)
        cp.messages_after = len(new_view.messages)
        return cp, new_view


def noted_system(session: CheckpointedSession, system: Message) -> Message:
    """The system message as sent: the prompt, the pins, the kept instructions."""
    cp = session.latest_checkpoint()
    return with_notes(system, session.pins(), cp.instructions if cp is not None else [])


def measured_system(system: Message, tools: Sequence[ToolDefinition]) -> Message:
    """``system`` padded with the tool definitions' weight, as the compactors measure it.

    Every request carries the tool definitions; a compactor sees only messages, and
    keeps the system message whatever it does. Padding it by exactly the tools'
    estimate makes every threshold, budget and figure count messages plus tools, the
    one count the notice, ``/context`` and ``--dry-run`` show. Never sent.
    """
    pad = estimate_tool_tokens(tools) * BYTES_PER_TOKEN
    return system if pad == 0 else Message(system.role, system.content + " " * pad)


def _gained(before: int, after: int, force: bool) -> bool:
    """Whether a compaction is worth storing: it cuts more than ``MIN_COMPACTION_GAIN``
    (any cut when forced); never one that leaves the context as large or larger."""
    return after < before * (1 - MIN_COMPACTION_GAIN) or (force and after < before)


def _threshold_text(comp: Compactor, plan: CompactionPlan) -> str:
    """The threshold a plan was measured against, in its unit (a blind window counts messages)."""
    if plan.threshold <= 0 and isinstance(comp, SlidingWindowCompactor):
        return f"{comp.max_messages} messages"
    return f"{format_token_count(plan.threshold)} tokens"
