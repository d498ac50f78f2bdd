"""ContextPolicy: what the model is shown, decided before every model call.

Read ``prepare`` → ``_decide`` → ``_compact`` to learn what the model sees next. The policy
owns the compactor (whose ``threshold_tokens`` is the one threshold the trigger, ``/context``
and ``--dry-run`` use), the smart trigger and each session's state, the offload store and
the token count the user sees. The engine, per turn::

    policy.begin_turn(session, system, emit)          # topic isolation, when enabled
    each model call:
        request = policy.prepare(session, system, tools, recent_tools, emit)
        reply, usage = model(request.messages, tools)  # request.shown_tokens for the UI
        policy.observe_usage(request, usage.input_tokens)
    the model said the context is too long: policy.after_overflow(...), once
    each tool result: content, link = policy.offload_result(session_id, name, args, content)

``/compact`` and ``harness9 compact`` call ``compact``, ``--dry-run`` ``plan``, ``/context``
``breakdown``, ``/new`` and ``/resume`` ``forget``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from harness9.config import STRATEGIES, ContextOptions
from harness9.context.compaction import CompactionPlan, CompactionResult, Compactor
from harness9.context.events import (
    Compaction,
    CompactionProgress,
    CompactionStarted,
    ContextEventSink,
    Notice,
    discard,
)
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
from harness9.context.view import (
    LiveViews,
    MeasuredView,
    ModelView,
    build_view,
    checkpoint_for,
    instruction_budget,
    load_view,
    state_items,
)
from harness9.errors import UsageError
from harness9.schema import UNFINISHED_STUB, Message, ToolDefinition
from harness9.store.blobs import BlobStore
from harness9.store.session import Checkpoint, CheckpointedSession, OffloadLink

__all__ = [
    "ContextBreakdown",
    "ContextPolicy",
    "Request",
    "SessionContextState",
    "TokenCounter",
    "build_compactor",
]

# A compaction is stored (and announced) only when it cuts more than this share.
MIN_COMPACTION_GAIN = 0.05
# What a result's strategy says when it was made without a model: a dry run computes it
# exactly, and one left over the threshold is made again with a larger cut.
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
    threshold_tokens: int,
    target: float = DEFAULT_TARGET,
) -> Compactor:
    """The strategy's compactor, compacting at ``threshold_tokens`` (``hybrid``: down to
    ``target``, a share of the window)."""
    if strategy == "hybrid":
        threshold = threshold_tokens / context_window
        return HybridCompactor(summarizer, context_window, threshold=threshold, target=target)
    if strategy == "summarize":
        window = context_window
        return SummarizationCompactor(summarizer, threshold_tokens, summarizer_window=window)
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
        opts: ContextOptions,
        summarizer: Summarizer,
        context_window: int,
        *,
        token_counter: TokenCounter | None = None,
        blobs: BlobStore | None = None,
        compactor_factory: CompactorFactory | None = None,
    ) -> None:
        """``blobs``: where offloaded outputs go (the session store's; None: files in
        $HARNESS9_HOME). ``compactor_factory(summarizer, context_window, threshold_tokens)``
        replaces the strategy's compactor (a benchmark's peers)."""
        self.opts, self.context_window = opts, context_window
        make = compactor_factory or partial(build_compactor, opts.strategy, target=opts.target)
        self.compactor = make(summarizer, context_window, opts.threshold_tokens(context_window))
        self.topics = None  # experimental topic isolation, run by ``begin_turn``
        if opts.enable_topic_isolation:
            detector = TopicDetector(opts.topic_similarity_threshold, opts.topic_min_segment_size)
            self.topics = topic_compactor(detector, summarizer, summarizer_window=context_window)
        config = OffloadConfig(
            opts.offload_max_result_tokens,
            opts.offload_max_result_bytes,
            cleanup_age_days=opts.offload_cleanup_age_days,
        )
        self.offload = OffloadStore(config, blobs) if opts.offload else None
        self.trigger = SmartTrigger(opts.lookahead_iterations) if opts.smart_triggers else None
        # The displayed count: the model's tokenizer when known, calibrated by each call's
        # input tokens. Decisions keep the byte estimate, whose head-room the threshold is for.
        self.token_counter = token_counter
        self._calibrated = False
        # Tokens per message the server counted beyond the byte estimate in the last call
        # (framing: roles, block types, call ids; the tokenizer's difference). Decisions add
        # it, so compaction starts at the threshold by the server's count too (issue 19: a
        # session of small tool results reached 99 % of the window, its estimate under 80 %).
        self.overhead_per_message = 0.0
        self.views = LiveViews()  # each session's view between calls: reads only new rows
        self._states: dict[str, SessionContextState] = {}

    @property
    def threshold_tokens(self) -> int:
        return self.compactor.threshold_tokens

    # -- the engine's calls ------------------------------------------------------------

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
        ``may_compact`` False: this call already had its compaction (after an overflow)."""
        # The live view reads only the rows stored since the last call (issue 23); its
        # system message is padded by the tools' weight so every decision counts them.
        sized = measured_system(system, tools)
        live = self.views.load(session, sized)
        due = self._decide(session.session_id, live, recent_tools, emit) if may_compact else None
        if due is not None and self._compact(session, sized, live.view, *due, emit):
            if due[0] is self.compactor:
                self.state(session.session_id).trigger.compacted()  # the cooldown starts
            live = self.views.load(session, sized)
        messages = [live.noted(system), *live.view.messages[1:]]
        messages = repair_orphaned_tool_pairs(messages, stub=UNFINISHED_STUB)
        counter = self.token_counter
        counted = counter.count(messages) if counter is not None else estimate_tokens(messages)
        tool_tokens = estimate_tool_tokens(tools)
        # Until the first calibration the tool definitions are added explicitly;
        # afterwards the calibration ratio accounts for them.
        shown = counted if self._calibrated else counted + tool_tokens
        return Request(messages, counted, shown, estimate_tokens(messages) + tool_tokens)

    def _decide(
        self, session_id: str, live: MeasuredView, recent: Sequence[str], emit: ContextEventSink
    ) -> tuple[Compactor, bool] | None:
        """The compaction this model call runs, and whether it is forced; None: none.

        The view is measured (its system message carries the tool definitions), so the
        threshold is compared with what the request costs, by the estimate or by the
        server's expected count (``served``: plus the framing the last call showed). The
        smart trigger may compact early, when growth predicts the threshold within a few
        calls; its cooldown limits only those. A compaction that could not get under the
        threshold (the protected tail alone is too big) is not repeated until the context
        grew by another 5 %. Past the message bound, old messages fold whatever their tokens.
        """
        comp, st, view, tokens = self.compactor, self.state(session_id), live.view, live.tokens
        plan = comp.plan(view.messages)
        served = tokens + int(self.overhead_per_message * len(view.messages))
        if not self.opts.auto:
            if plan.would_compact and not st.warned_over_threshold:
                st.warned_over_threshold = True
                emit(Notice(_off_notice(plan, tokens)))
            return None
        limit, early = comp.threshold_tokens, False
        if self.trigger is not None and limit > 0:  # 0: blind to tokens
            info = st.trigger.info(
                tokens, recent, max_tokens=self.context_window, threshold_tokens=limit
            )
            early = self.trigger.should_compress_dynamic(info)
        # Over by the server's count or by the trigger only: forced, as the compactor's own
        # check counts the estimate alone.
        due = plan.would_compact or early or 0 < limit <= served
        last = st.last_compaction_tokens
        grown = last is None or tokens > last * (1 + MIN_COMPACTION_GAIN)
        if due and (grown or served < plan.threshold):  # else it would fold nothing new
            return comp, not plan.would_compact
        bound = self.opts.max_messages
        if bound and len(view.messages) > bound:
            return MessageBound(bound, bound // 2), True
        return None

    def _compact(
        self,
        session: CheckpointedSession,
        sized: Message,
        view: ModelView,
        comp: Compactor,
        force: bool,
        emit: ContextEventSink,
        instructions: str | None = None,
    ) -> Compaction | None:
        """Runs ``comp`` on the measured ``view``; stores its checkpoint when it cuts enough
        and returns the notice. Every result that changes the view is stored, stubs included
        (ARCHITECTURE decision 7): the view is a pure function of the log and the latest
        checkpoint, the same bytes on every request until the next one and on --resume."""
        before = estimate_tokens(view.messages)
        st = self.state(session.session_id)
        tried = (comp.strategy, view.ids[-1] if view.ids else None, len(view.messages), before)
        if st.futile == tried and instructions is None:
            return None
        emit(CompactionStarted(comp.strategy, before))
        result, cp = self._run(session, sized, view, comp, force, instructions, emit)
        st.last_compaction_tokens = cp.tokens_after if cp is not None else before
        if cp is None or not _gained(before, cp.tokens_after, force):
            st.futile = tried
            return None
        cp = session.add_checkpoint(cp)
        figures = (cp.tokens_before, cp.tokens_after, cp.messages_before, cp.messages_after)
        emit(notice := Compaction(*figures, result.strategy, result.error))
        return notice

    def _run(
        self,
        session: CheckpointedSession,
        sized: Message,
        view: ModelView,
        comp: Compactor,
        force: bool,
        instructions: str | None = None,
        emit: ContextEventSink = discard,
    ) -> tuple[CompactionResult, Checkpoint | None]:
        """``comp``'s result on ``view`` (built with the system message ``sized``) and the
        checkpoint it would store, None when it changes nothing; stores nothing. The
        checkpoint's figures are those the notice, ``sessions show`` and --dry-run print.

        The user's messages a compaction folds are kept verbatim beside the summary
        (``view.carry_instructions``), so the view after it can be larger than what the compactor
        kept. A compaction that needs no model is then made again with that excess counted
        in the system message, so that it lands under the threshold as every compaction
        must; one with a summary is not repeated (a model call each).
        """
        window, pins = self.context_window, session.pins()
        record = partial(  # a result's checkpoint: its recall index and kept user messages
            checkpoint_for,
            previous=session.latest_checkpoint(),
            recall_budget=max(1, int(window * RECALL_SHARE)) if self.opts.recall else 0,
            state=state_items(session),
            instruction_budget=instruction_budget(window),
        )
        head, limit, pad = view.messages[0], comp.threshold_tokens, 0
        before = estimate_tokens(view.messages)
        for _ in range(8):  # each step folds at least the excess more; cheap, no model
            msgs = view.messages
            if pad:  # the padding only steers the cut; it is never stored
                msgs = [Message(head.role, head.content + " " * pad), *msgs[1:]]
            result = comp.compact(
                msgs,
                force=force,
                instructions=instructions,
                on_progress=lambda i, n: emit(CompactionProgress(i, n)),
            )
            if pad:
                result.messages = [head, *result.messages[1:]]
            cp = record(view, result)
            if cp is None:
                return result, None
            records = session.get_records(after_id=cp.last_message_id)
            after = build_view(sized, records, cp, pins).messages
            cp.tokens_before, cp.tokens_after = before, estimate_tokens(after)
            cp.messages_before, cp.messages_after = len(view.messages), len(after)
            if (
                result.summary is not None
                or result.strategy not in MODEL_FREE_STRATEGIES
                or limit <= 0
                or cp.tokens_after <= limit
            ):
                break
            # Whole messages are cut: the pad doubles until the next one goes.
            pad = max(pad * 2, (cp.tokens_after - limit) * BYTES_PER_TOKEN)
        return result, cp

    def observe_usage(self, request: Request, input_tokens: int) -> None:
        """Calibrates the displayed count, and the framing every decision adds to the
        byte estimate, with the API's real input tokens."""
        if input_tokens > 0 and request.estimated > 0:
            excess = input_tokens - request.estimated
            self.overhead_per_message = max(0.0, excess / max(1, len(request.messages)))
        if input_tokens > 0 and self.token_counter is not None:
            self.token_counter.calibrate(request.counted, input_tokens)
            self._calibrated = True

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
        said it fits: compacts harder, once per model call, and returns None for the caller
        to retry; or returns the error to report when it may not compact."""
        if not self.opts.auto:
            return f"{reason} — automatic compaction is off: run /compact, then send again"
        if not may_compact:
            return reason
        what = f"the model rejected the context as too long ({reason})"
        emit(Notice(f"{what}; compacting and retrying"))
        self.compact(session, system, tools=tools, emit=emit)
        return None

    def begin_turn(
        self, session: CheckpointedSession, system: Message, emit: ContextEventSink = discard
    ) -> None:
        """Topic isolation: when the new message starts a new topic, fold the finished ones."""
        if self.topics is not None and self.opts.auto:
            view = load_view(session, system)
            if self.topics.plan(view.messages).would_compact:
                self._compact(session, system, view, self.topics, False, emit)

    # -- what users ask for --------------------------------------------------------------

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
        """Compact now (/compact, ``harness9 compact``, an overflow): the notice, or None when
        nothing was folded (under the threshold without ``force``, or nothing left)."""
        sized = measured_system(system, tools or [])
        view = load_view(session, sized)
        if not force and not self.compactor.plan(view.messages).would_compact:
            return None
        notice = self._compact(session, sized, view, self.compactor, force, emit, instructions)
        if notice is None and force and estimate_tokens(view.messages) > self.threshold_tokens:
            # Asked for, over the threshold, and the strategy folded nothing: the
            # protected tail goes, as a last resort, rather than the next turn overflowing.
            tail = tail_compactor(self.threshold_tokens)
            notice = self._compact(session, sized, view, tail, True, emit)
        return notice

    def plan(
        self,
        session: CheckpointedSession,
        system: Message,
        *,
        force: bool = False,
        tools: list[ToolDefinition] | None = None,
    ) -> tuple[ModelView, CompactionPlan]:
        """What ``compact`` would do now, calling no model and storing nothing (--dry-run),
        in chat's figures (messages plus tool definitions). A compaction that needs no
        model is made, so its figures are exactly ``compact``'s; a summary's size is known
        only once the model answers: an estimate, never above the size now."""
        sized = measured_system(system, tools or [])
        view = load_view(session, sized)
        plan = self.compactor.plan(view.messages, force=force)
        if plan.would_compact and plan.strategy in MODEL_FREE_STRATEGIES:
            _, cp = self._run(session, sized, view, self.compactor, force)
            plan.would_compact = cp is not None and _gained(
                cp.tokens_before, cp.tokens_after, force
            )
            if cp is not None and plan.would_compact:
                plan.tokens_before, plan.tokens_after = cp.tokens_before, cp.tokens_after
        # A summary's size is estimated; a compaction that would grow is not stored.
        plan.tokens_after = min(plan.tokens_after, plan.tokens_before)
        if not plan.would_compact:
            plan.tokens_after = plan.tokens_before
        return view, plan

    def breakdown(
        self, session: CheckpointedSession, system: Message, tools: list[ToolDefinition]
    ) -> ContextBreakdown:
        """What the next request would carry, by part (/context)."""
        msgs = repair_orphaned_tool_pairs(load_view(session, system).messages, stub=UNFINISHED_STUB)
        system_tokens = estimate_tokens(msgs[:1])
        summary = sum(estimate_tokens([m]) for m in msgs[1:] if m.is_summary)
        rest = max(estimate_tokens(msgs) - system_tokens - summary, 0)
        tool_tokens, window = estimate_tool_tokens(tools), self.context_window
        return ContextBreakdown(
            system_tokens, tool_tokens, summary, rest, len(msgs) - 1, window, self.threshold_tokens
        )

    def state(self, session_id: str) -> SessionContextState:
        """The session's state, created on first use (``setdefault`` is atomic)."""
        trigger = SessionTriggerState(self.opts.cooldown_iterations)
        return self._states.setdefault(session_id, SessionContextState(trigger))

    def forget(self, session_id: str) -> None:
        """/new and /resume start the session with fresh state."""
        self._states.pop(session_id, None)
        self.views.forget(session_id)

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


def measured_system(system: Message, tools: Sequence[ToolDefinition]) -> Message:
    """``system`` padded by the tool definitions' estimate, never sent: a compactor sees only
    messages and keeps the system message, so every threshold, budget and figure then
    counts messages plus tools, the one count the notice, /context and --dry-run show."""
    pad = estimate_tool_tokens(tools) * BYTES_PER_TOKEN
    return system if pad == 0 else Message(system.role, system.content + " " * pad)


def _gained(before: int, after: int, force: bool) -> bool:
    """Whether a compaction is worth storing: it cuts more than ``MIN_COMPACTION_GAIN``
    (any cut when forced); never one that leaves the context as large or larger."""
    return after < before * (1 - MIN_COMPACTION_GAIN) or (force and after < before)


def _off_notice(plan: CompactionPlan, tokens: int) -> str:
    return (
        f"the context ({format_token_count(tokens)} tokens) is over the compaction "
        f"threshold ({format_token_count(plan.threshold)} tokens); automatic compaction "
        "is off: run /compact"
    )
