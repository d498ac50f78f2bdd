"""ContextPolicy: what the model is shown, decided before every model call.

``ContextPolicy.prepare`` is the one place the next request is built: read it, then
``_decide`` → ``_compact`` → ``_run``. Every count (the threshold, the token line,
``/context``, ``--dry-run``) is arithmetic on that request's parts. How the engine and the
commands call the policy: docs/architecture.md, "One request, built in one place".
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Protocol

from harness9.config import ContextOptions
from harness9.context.pipeline import (
    DEFAULT_TARGET,
    MIN_COMPACTION_GAIN,
    MODEL_FREE_STRATEGIES,
    RECALL_SHARE,
    STRATEGIES,
    CompactionPlan,
    CompactionResult,
    Compactor,
    CompactorFactory,
    MessageBound,
    OverPrefix,
    SummarizationCompactor,
    strategy_pipeline,
    tail_compactor,
    topic_compactor,
)
from harness9.context.stubs import repair_orphaned_tool_pairs
from harness9.context.summarize import Summarizer
from harness9.context.topics import TopicDetector
from harness9.context.view import (
    FreshViews,
    MeasuredView,
    ModelView,
    Views,
    build_view,
    checkpoint_for,
    instruction_budget,
    load_view,
    state_items,
    summary_text,
    with_notes,
)
from harness9.context_events import (
    Compaction,
    CompactionProgress,
    CompactionStarted,
    ContextEventSink,
    Notice,
    discard,
)
from harness9.errors import UsageError
from harness9.request import Request, SystemPart, SystemPrompt, prompt_parts, system_message
from harness9.schema import UNFINISHED_STUB, Message, ToolDefinition
from harness9.store.session import Checkpoint, CheckpointedSession
from harness9.tokens import (
    BYTES_PER_TOKEN,
    ServerCount,
    estimate_tokens,
    estimate_tool_tokens,
    format_token_count,
    utf8_len,
)


class TokenCounter(Protocol):
    """Counts a request's tokens for display (the provider's tokenizer when it has one)."""

    def count(self, msgs: list[Message]) -> int: ...


# At the threshold, the compaction over a prepared prefix: (the framing the preparation
# counted, the prefix, seconds waited for it) -> its notice (None: not stored).
ApplyPrepared = Callable[[int, ModelView, float], Compaction | None]


class Preparations(Protocol):
    """Summaries prepared ahead of the threshold, at most one per session: what the policy
    calls. Running them on threads and timing them is the engine's (harness9.engine.prepared,
    docs/prepared-summaries.md); the policy decides when and what."""

    @property
    def trigger_lookahead(self) -> int: ...  # the smart trigger's own lookahead, in calls

    def consider(
        self,
        session_id: str,
        view: ModelView,
        checkpoint_key: object,
        framing: int,
        forecast: Callable[[int], bool],
        needs_model: Callable[[list[Message]], bool],
        compact: Callable[[list[Message]], object],
        emit: ContextEventSink,
    ) -> bool:
        """Starts ``compact`` of (a copy of) ``view``'s messages when ``forecast`` of the
        calls left says it is past the early mark and it ``needs_model``. True: started."""
        ...

    def pending(self, session_id: str, view: ModelView, checkpoint_key: object) -> bool:
        """A preparation of a prefix of ``view`` is still running."""
        ...

    def apply(
        self,
        session_id: str,
        view: ModelView,
        checkpoint_key: object,
        compact: ApplyPrepared,
        emit: ContextEventSink,
    ) -> Compaction | None:
        """At the threshold: ``compact`` over the prefix prepared, while it is unchanged;
        None: nothing prepared, or thrown away."""
        ...

    def cancel(self, session_id: str | None = None, *, wait: bool = False) -> int:
        """Cancels the preparation of ``session_id`` (None: every session's); how many."""
        ...


@dataclass(slots=True, frozen=True)
class Frame:
    """The system prompt's parts and the tool definitions (``fixed``: their estimate)."""

    system: tuple[SystemPart, ...]
    tools: tuple[ToolDefinition, ...] = ()
    fixed: int = 0

    @classmethod
    def of(cls, system: SystemPrompt, tools: Sequence[ToolDefinition] = ()) -> Frame:
        return cls(prompt_parts(system), tuple(tools), estimate_tool_tokens(tools))

    def size(self, msgs: Sequence[Message]) -> int:
        """The estimate of a request of ``msgs`` (the system message first)."""
        return estimate_tokens(msgs) + self.fixed


@dataclass(slots=True)
class Attempt:
    """One compaction: ``comp`` run on ``view`` in ``frame``, its cut counting ``framing``
    tokens the server counts beyond the estimate."""

    session: CheckpointedSession
    frame: Frame
    view: ModelView
    comp: Compactor
    force: bool = True
    framing: int = 0
    emit: ContextEventSink = discard
    instructions: str | None = None
    waited: float | None = None  # seconds waited for a summary prepared ahead (the notice)
    keep_paid: bool = False  # a summary left over the threshold is stored: see ``_compact``
    shown_before: tuple[int, int] | None = None  # (tokens, messages) the notice starts from

    @property
    def tokens(self) -> int:
        return self.frame.size(self.view.messages)

    def planned(self, force: bool = False, framing: int = 0) -> CompactionPlan:
        """The compactor's plan, counting the tool definitions (and ``framing``)."""
        return self.comp.plan(self.view.messages, force=force, fixed=self.frame.fixed + framing)


def build_compactor(
    strategy: str,
    summarizer: Summarizer,
    context_window: int,
    threshold_tokens: int,
    target: float = DEFAULT_TARGET,
) -> Compactor:
    """The strategy's pipeline (``STRATEGIES``), compacting at ``threshold_tokens``."""
    if strategy not in STRATEGIES:
        names = ", ".join(STRATEGIES)
        raise UsageError(f"unknown compaction strategy {strategy!r}; choose one of: {names}")
    return strategy_pipeline(strategy, summarizer, context_window, threshold_tokens, target)


class ContextPolicy:
    """See the module docstring. Thread-safe for one turn at a time per session."""

    def __init__(
        self,
        opts: ContextOptions,
        summarizer: Summarizer,
        context_window: int,
        *,
        token_counter: TokenCounter | None = None,
        compactor_factory: CompactorFactory | None = None,
        ahead: Preparations | None = None,
        views: Views | None = None,
    ) -> None:
        """``compactor_factory`` replaces the strategy's compactor (benchmarks' peers);
        ``ahead``: summaries prepared ahead of the threshold (None: not), served to the
        compactions through ``summarizer`` (harness9.engine.prepared.prepared_ahead);
        ``views``: where each call's view comes from (None: read whole from the store every
        call; the engine's ``LiveViews`` keeps them between calls)."""
        self.opts, self.context_window = opts, context_window
        make = compactor_factory or partial(build_compactor, opts.strategy, target=opts.target)
        self.compactor = make(summarizer, context_window, opts.threshold_tokens(context_window))
        self.ahead = ahead
        self.topics = None  # experimental topic isolation, run by ``begin_turn``
        if opts.enable_topic_isolation:
            detector = TopicDetector(opts.topic_similarity_threshold, opts.topic_min_segment_size)
            self.topics = topic_compactor(detector, summarizer, summarizer_window=context_window)
        self.token_counter = token_counter  # shown until a server reported a count
        self.count = ServerCount()  # the server's count, learnt from each reply's usage
        # The largest request a reply came back for: a stream dying on a larger one is a
        # suspected overflow.
        self.largest_answered = 0
        self._make, self._summarizer = make, summarizer
        self.window_listeners: list[Callable[[int], object]] = []  # told ``adopt_window``
        self.views: Views = views if views is not None else FreshViews()
        self._states: dict[str, SessionContextState] = {}

    @property
    def threshold_tokens(self) -> int:
        return self.compactor.threshold_tokens

    # -- the engine's calls ------------------------------------------------------------

    def prepare(
        self,
        session: CheckpointedSession,
        system: SystemPrompt,
        tools: Sequence[ToolDefinition],
        recent_tools: Sequence[str],
        emit: ContextEventSink = discard,
        *,
        may_compact: bool = True,
    ) -> Request:
        """The next model call's request, whole, compacted first when it is time (unless
        ``may_compact`` is False: this call had its compaction, after an overflow)."""
        frame = Frame.of(system, tools)
        live = self.views.load(session, frame.system, frame.fixed)
        at = Attempt(session, frame, live.view, self.compactor, emit=emit)
        due = self._decide(at, live, recent_tools) if may_compact else None
        if due is not None and self._compact_due(due):
            if due.comp is self.compactor:
                self.state(session.session_id).compacted()  # the cooldown starts
            live = self.views.load(session, frame.system, frame.fixed)
        elif due is None and may_compact and self.ahead is not None:
            self._prepare_ahead(at, live)
        if may_compact and self._last_resort(at, live):
            live = self.views.load(session, frame.system, frame.fixed)
        request = self._request(live, frame)
        request.shown_tokens = self.shown(request.messages, request.estimated)
        return request

    def _request(self, live: MeasuredView, frame: Frame) -> Request:
        """The request of ``live`` in ``frame``, repaired; its reply's budget and estimate."""
        messages = repair_orphaned_tool_pairs(live.view.messages, stub=UNFINISHED_STUB)
        budget = self.opts.output_reserve or None
        request = Request(live.parts, messages, list(frame.tools), budget)
        request.estimated, request.window = request.estimate(), self.context_window
        return request

    def shown(self, messages: list[Message], estimated: int) -> int:
        """The count shown for a request: the server's expected count once one reported,
        else the tokenizer's."""
        counter = self.token_counter
        if self.count.known or counter is None:
            return self.count.count(estimated)
        return estimated - estimate_tokens(messages) + counter.count(messages)

    def _last_resort(self, at: Attempt, live: MeasuredView) -> bool:
        """A context over the room the window leaves beside the reply is not sent: all but
        the newest message fold into one summary, then what is still over the threshold
        loses its tool results and oldest messages. True when that changed the view."""
        if not self.opts.auto:
            return False
        served, limit = self.count.count(live.tokens), self.threshold_tokens
        if served <= self.context_window - self.opts.output_reserve:
            return False
        whole = SummarizationCompactor(
            self._summarizer, limit, min_tail_messages=1, summarizer_window=self.context_window
        )
        at = replace(at, view=live.view, comp=whole, framing=served - live.tokens)
        folded = self._compact(at)
        if folded is not None:
            live = self.views.load(at.session, at.frame.system, at.frame.fixed)
            served = self.count.count(live.tokens)
            if served <= limit:
                return True
            at = replace(at, view=live.view, framing=served - live.tokens)
        cut = self._compact(replace(at, comp=tail_compactor(limit)))
        return folded is not None or cut is not None

    def _decide(self, at: Attempt, live: MeasuredView, recent: Sequence[str]) -> Attempt | None:
        """The compaction this model call runs (None: none). Due at the threshold by the
        estimate or by the server's expected count, or when the smart trigger fires; one
        that could not get under the threshold waits until the context grew by another
        5 %. Past the message bound, old messages fold whatever their tokens."""
        st, tokens, limit = self.state(at.session.session_id), live.tokens, at.comp.threshold_tokens
        plan = at.planned()
        served = self.count.count(tokens)
        if not self.opts.auto:
            over = plan.would_compact or 0 < plan.threshold <= served
            if over and not st.warned_over_threshold:  # once a turn: ``begin_turn`` re-arms
                st.warned_over_threshold = True
                share = tokens * 100 // max(1, self.context_window)
                size = f"{format_token_count(tokens)} tokens, {share} % of the window"
                limit_text = f"{format_token_count(plan.threshold)} tokens"
                at.emit(
                    Notice(
                        f"the context ({size}) is over the compaction threshold ({limit_text}); "
                        "automatic compaction is off: run /compact"
                    )
                )
            return None
        early = False
        if self.opts.smart_triggers and limit > 0:  # 0: blind to tokens
            reads = read_heavy(recent, at.frame.tools)
            early = st.smart_trigger(served, reads, self.context_window, limit)
        # Forced when only the server's count or the trigger says so: the compactor's own
        # check counts the estimate alone. Once the server has reported, its count decides
        # either way: a server that counts less than the estimate compacts later.
        crossed = 0 < limit <= served if self.count.known else plan.would_compact
        due = crossed or early or 0 < limit <= served
        last = st.last_compaction_tokens
        grown = last is None or tokens > last * (1 + MIN_COMPACTION_GAIN)
        if due and (grown or served < plan.threshold):  # else it would fold nothing new
            # The cut counts what the server counts (the framing), once it has reported.
            framing = served - tokens if self.count.known or not crossed else 0
            return replace(at, force=not crossed, framing=framing)
        bound = self.opts.max_messages
        if bound and len(at.view.messages) > bound:
            return replace(at, comp=MessageBound(bound, bound // 2))
        return None

    def _compact(self, at: Attempt) -> Compaction | None:
        """Runs ``at`` and stores its checkpoint when it cuts enough (stubs too: the view is
        a function of the log and the latest checkpoint); the notice. ``keep_paid`` (the
        last resort follows): a summary left over the threshold is stored even when it
        saves too little, unannounced, so that the last resort cuts after it."""
        before, st = at.tokens, self.state(at.session.session_id)
        last = at.view.ids[-1] if at.view.ids else None
        tried = (at.comp.strategy, last, len(at.view.messages), before + at.framing)
        if st.futile == tried and at.instructions is None:
            return None
        at.emit(CompactionStarted(at.comp.strategy, before))
        result, cp = self._run(at)
        st.last_compaction_tokens = cp.tokens_after if cp is not None else before
        gained = cp is not None and _gained(before, cp.tokens_after, at.force)
        paid = at.keep_paid and cp is not None and result.summary is not None
        over = cp is not None and cp.tokens_after + at.framing > at.comp.threshold_tokens
        if cp is None or not (gained or paid and over):
            st.futile = tried
            return None
        cp = at.session.add_checkpoint(cp)
        if not gained:
            return None  # the last resort's notice reports both
        tokens, msgs = at.shown_before or (cp.tokens_before, cp.messages_before)
        served = self.count.count  # as the token line counts (the checkpoint keeps estimates)
        after = served(cp.tokens_after)
        notice = Compaction(
            served(tokens), after, msgs, cp.messages_after, result.strategy, result.error, at.waited
        )
        at.emit(notice)
        self._explain_fixed_part(st, at, cp.tokens_after)
        return notice

    def _explain_fixed_part(self, st: SessionContextState, at: Attempt, after: int) -> None:
        """Once a session: the system prompt and tool definitions take at least half of the
        target, so compactions come every few turns; say why, and what leaves more room."""
        window, target = self.context_window, int(self.context_window * self.opts.target)
        served = self.count.count  # as the server counts: a chat template may drop the tools
        fixed = served(at.frame.size([system_message(prompt_parts(at.frame.system))]))
        if st.explained_fixed_part or served(after) <= target or fixed * 2 < target:
            return
        st.explained_fixed_part = True
        n = format_token_count
        at.emit(
            Notice(
                f"the system prompt and tool definitions take {n(fixed)} tokens, "
                f"{fixed * 100 // window} % of the {n(window)} window, so compaction cannot "
                f"bring the context down to its {n(target)}-token target "
                f"({round(self.opts.target * 100)} %) and will run every few turns; a model "
                "with a larger window (--context-window), a shorter AGENTS.md or fewer tools "
                "(subagents.enabled = false in config.toml drops `task`) leave more room"
            )
        )

    def _run(self, at: Attempt) -> tuple[CompactionResult, Checkpoint | None]:
        """``at``'s result and the checkpoint it would store (None: it changes nothing),
        with its figures; stores nothing. Folded user messages are kept beside the summary,
        so a model-free compaction is made again with that excess counted, to land under
        the threshold (one with a summary is not: a model call each)."""
        session, frame, view, comp = at.session, at.frame, at.view, at.comp
        record, pins = self._recorder(session), session.pins()
        limit, extra = comp.threshold_tokens, at.framing
        before = at.tokens
        for _ in range(8):  # each step folds at least the excess more; cheap, no model
            result = comp.compact(
                view.messages,
                force=at.force,
                fixed=frame.fixed + extra,
                instructions=at.instructions,
                on_progress=lambda i, n: at.emit(CompactionProgress(i, n)),
            )
            if at.keep_paid and result.declined is not None:
                result = result.declined
            cp = record(view, result)
            if cp is None:
                return result, None
            records = session.get_records(after_id=cp.last_message_id)
            after = build_view(frame.system, records, cp, pins).messages
            cp.tokens_before, cp.tokens_after = before, frame.size(after)
            cp.messages_before, cp.messages_after = len(view.messages), len(after)
            model_free = result.summary is None and result.strategy in MODEL_FREE_STRATEGIES
            if not model_free or limit <= 0 or cp.tokens_after <= limit:
                break
            # Whole messages are cut: the extra doubles until the next one goes.
            extra = max(extra * 2, cp.tokens_after - limit)
        return result, cp

    def _recorder(
        self, session: CheckpointedSession
    ) -> Callable[[ModelView, CompactionResult], Checkpoint | None]:
        """A result's checkpoint: its recall index and the user messages it keeps."""
        window = self.context_window
        return partial(
            checkpoint_for,
            previous=session.latest_checkpoint(),
            recall_budget=max(1, int(window * RECALL_SHARE)) if self.opts.recall else 0,
            state=state_items(session),
            instruction_budget=instruction_budget(window),
        )

    def observe_usage(self, request: Request, input_tokens: int) -> None:
        """Learns the server's count (``ServerCount``) from the input it reported."""
        if input_tokens > 0 and request.estimated > 0:
            self.count.observe(request.estimated, input_tokens)
            self.largest_answered = max(self.largest_answered, input_tokens)

    def answered(self, request: Request) -> None:
        """A reply came back for ``request`` (whether or not the server reported usage)."""
        self.largest_answered = max(self.largest_answered, request.shown_tokens)

    def adopt_window(self, window: int) -> bool:
        """Works with a smaller ``window`` the server named, True when it changed: the
        reply's budget becomes at most a fifth of it (some servers count it against the
        window); the threshold and ``window_listeners`` follow."""
        if window <= 0 or window >= self.context_window:
            return False
        self.context_window = window
        reserve = self.opts.output_reserve
        if reserve > 0:
            self.opts = replace(self.opts, output_reserve=max(1, min(reserve, window // 5)))
        for listener in self.window_listeners:
            listener(window)
        threshold = self.opts.threshold_tokens(window)
        self.compactor = self._make(self._summarizer, window, threshold)
        return True

    def after_overflow(
        self,
        session: CheckpointedSession,
        system: SystemPrompt,
        tools: Sequence[ToolDefinition],
        reason: str,
        *,
        emit: ContextEventSink = discard,
        may_compact: bool = True,
        announce: bool = True,
    ) -> str | None:
        """The model rejected the request as too long: compacts (once per model call) and
        returns None to retry, or the error to report (``announce``: say so first)."""
        if not self.opts.auto:
            return f"{reason} — automatic compaction is off: run /compact, then send again"
        if not may_compact:
            if "--context-window" in reason:
                return reason
            window = format_token_count(self.context_window)
            return f"{reason} (if the server's window is smaller than {window}, set --context-window N)"
        if announce:
            what = f"the model rejected the context as too long ({reason})"
            emit(Notice(f"{what}; compacting and retrying"))
        self.compact(session, system, tools=tools, emit=emit, rejected=True)
        return None

    def begin_turn(
        self, session: CheckpointedSession, system: SystemPrompt, emit: ContextEventSink = discard
    ) -> None:
        """A new turn: the over-threshold notice is re-armed; a new topic folds the finished
        ones (topic isolation)."""
        self.state(session.session_id).warned_over_threshold = False
        if self.topics is not None and self.opts.auto:
            view = load_view(session, system)
            if self.topics.plan(view.messages).would_compact:
                self._compact(Attempt(session, Frame.of(system), view, self.topics, False, 0, emit))

    # -- what users ask for --------------------------------------------------------------

    def compact(
        self,
        session: CheckpointedSession,
        system: SystemPrompt,
        *,
        force: bool = True,
        instructions: str | None = None,
        tools: Sequence[ToolDefinition] = (),
        emit: ContextEventSink = discard,
        rejected: bool = False,
    ) -> Compaction | None:
        """Compact now (/compact, ``harness9 compact``, an overflow: ``rejected``, counted
        as at least the window): the notice, or None. Asked for under the threshold, it is
        made only when ``_verdict`` (what --dry-run shows) says it pays for itself."""
        frame = Frame.of(system, tools)
        view = load_view(session, frame.system)
        at = Attempt(session, frame, view, self.compactor, force, 0, emit, instructions)
        if not force and not at.planned().would_compact:
            return None
        tokens = at.tokens
        at.framing = self._framing(tokens)
        if rejected:
            at.framing = max(at.framing, self.context_window - tokens)
        elif self._optional(at) and self._verdict(at).too_small:
            return None
        key = session.latest_checkpoint_key()
        notice = self._compact(replace(at, keep_paid=force))
        if not force:
            return notice
        shown: tuple[int, int] | None = (tokens, len(view.messages))
        if notice is not None:
            at.view, at.framing, shown = load_view(session, frame.system), 0, None
        elif session.latest_checkpoint_key() != key:  # a summary kept for the last resort
            at.view = load_view(session, frame.system)
        # Still over the threshold (nothing folded, or a protected tail too big for a small
        # window): the tail's tool results go too rather than the next request overflowing.
        at.framing = max(at.framing, self._framing(at.tokens))
        if at.tokens + at.framing > self.threshold_tokens:
            tail = tail_compactor(self.threshold_tokens)
            last = replace(at, comp=tail, instructions=None, shown_before=shown)
            notice = self._compact(last) or notice
        return notice

    def _framing(self, tokens: int) -> int:
        """Tokens the server is expected to count beyond an estimate of ``tokens``."""
        return self.count.count(tokens) - tokens

    def plan(
        self,
        session: CheckpointedSession,
        system: SystemPrompt,
        *,
        force: bool = False,
        tools: Sequence[ToolDefinition] = (),
    ) -> tuple[ModelView, CompactionPlan]:
        """What ``compact`` would do now, calling no model and storing nothing (--dry-run)."""
        frame = Frame.of(system, tools)
        view = load_view(session, frame.system)
        at = Attempt(session, frame, view, self.compactor, force)
        at.framing = self._framing(at.tokens)
        plan = self._verdict(at)
        if plan.too_small:
            return view, plan  # its figures say what it would have saved
        if not plan.would_compact or plan.tokens_after > plan.tokens_before:
            plan.tokens_after = plan.tokens_before  # a compaction that would grow is not stored
        # In the server's count, as the token line and the notices show it.
        plan.tokens_before = self.count.count(plan.tokens_before)
        plan.tokens_after = self.count.count(plan.tokens_after)
        return view, plan

    def _verdict(self, at: Attempt) -> CompactionPlan:
        """What compacting now makes, calling no model: a model-free compaction is made
        (exact figures), a summary's size estimated. Asked for while nothing is due, one
        saving under ``MIN_COMPACTION_GAIN`` is ``too_small``: it would break the prompt
        cache (and pay for a summary) to gain almost nothing."""
        plan, optional = at.planned(at.force), self._optional(at)
        exact = plan.strategy in MODEL_FREE_STRATEGIES
        if plan.would_compact and exact:
            _, cp = self._run(replace(at, framing=0, emit=discard, instructions=None))
            if cp is None:
                plan.would_compact = False
                return plan
            plan.tokens_before, plan.tokens_after = cp.tokens_before, cp.tokens_after
        elif plan.would_compact:
            plan.tokens_after += self._beside_summary(at, plan)
        # A summary that is due is asked for whatever its estimate: only its result decides.
        judged = exact or optional
        gain = _gained(plan.tokens_before, plan.tokens_after, at.force and not optional)
        if plan.would_compact and judged and not gain:
            plan.would_compact, plan.too_small = False, optional
        return plan

    def _optional(self, at: Attempt) -> bool:
        """Asked for (``force``) while nothing is due, by the estimate and by the server."""
        if not at.force or at.planned().would_compact:
            return False
        return at.tokens + at.framing <= at.comp.threshold_tokens

    def _beside_summary(self, at: Attempt, plan: CompactionPlan) -> int:
        """Tokens a checkpoint of ``plan`` adds beside its summary: the user messages it
        keeps, the recall index and the todo state."""
        msgs = at.view.messages
        kept = [msgs[0], *msgs[plan.cut :]]
        cp = self._recorder(at.session)(at.view, CompactionResult(kept, plan, "", plan.strategy))
        if cp is None:
            return 0
        noted = with_notes(at.frame.system, at.session.pins(), cp.instructions)
        grown = estimate_tokens([noted]) - estimate_tokens(msgs[:1])
        return grown + utf8_len(summary_text(cp)) // BYTES_PER_TOKEN

    def uncompacted_request(
        self, session: CheckpointedSession, system: SystemPrompt, tools: Sequence[ToolDefinition]
    ) -> Request:
        """The request ``prepare`` would build now if nothing were compacted, measured by the
        estimate alone (/context): it compacts nothing, prepares nothing, counts no tokens."""
        frame = Frame.of(system, tools)
        return self._request(self.views.load(session, frame.system, frame.fixed), frame)

    def state(self, session_id: str) -> SessionContextState:
        """The session's state, created on first use (``setdefault``: atomic)."""
        fresh = SessionContextState(self.opts.cooldown_iterations, self.opts.lookahead_iterations)
        return self._states.setdefault(session_id, fresh)

    def forget(self, session_id: str) -> None:
        """/new and /resume start the session with fresh state."""
        self.cancel_prepared(session_id)
        self._states.pop(session_id, None)
        self.views.forget(session_id)

    # -- summaries prepared ahead (``Preparations``) ---------------------------------------

    def _compact_due(self, at: Attempt) -> Compaction | None:
        """The compaction ``_decide`` found due: the one prepared ahead when it still
        applies (the same compaction over the prefix it froze), else made now."""
        sid, view = at.session.session_id, at.view
        # A compaction that calls no model (stubs were enough) costs no wait: made now.
        ahead = self.ahead if at.comp is self.compactor else None
        if ahead is not None and _with_model(at.planned(True, at.framing)):
            key = at.session.latest_checkpoint_key()
            # Due early (the smart trigger: under the threshold still) while the summary
            # prepared for it is on its way: this call goes as it is, the next applies it.
            if at.force and ahead.pending(sid, view, key):
                return None

            def over_prefix(framing: int, prefix: ModelView, waited: float) -> Compaction | None:
                whole = OverPrefix(at.comp, len(prefix.messages))
                return self._compact(
                    replace(at, comp=whole, force=True, framing=framing, waited=waited)
                )

            notice = ahead.apply(sid, view, key, over_prefix, at.emit)
            if notice is not None:
                return notice
        return self._compact(at)

    def _prepare_ahead(self, at: Attempt, live: MeasuredView) -> None:
        """Past the early mark (not in a cooldown), the compaction of the view as it is
        starts in the background."""
        assert self.ahead is not None
        session, comp, limit = at.session, at.comp, self.threshold_tokens
        st = self.state(session.session_id)
        if st.in_cooldown(st.iterations):
            return
        framing, tokens = self._framing(live.tokens), live.tokens
        share, window = self.opts.prepare_at, self.context_window
        # The cut counts the growth still to come before the threshold (short of the smart
        # trigger's lookahead): applied, it leaves what a compaction there would leave.
        ahead = st.growth() * self.ahead.trigger_lookahead
        growth_to_come = max(0, int(limit - tokens - framing - ahead))

        def forecast(calls: int) -> bool:
            if tokens + framing < self.opts.target * window:
                return False  # under what a compaction leaves: nothing worth folding yet
            if share > 0:
                return tokens + framing >= share * window
            return tokens + framing + max(0.0, st.growth()) * calls >= limit

        def needs_model(_msgs: list[Message]) -> bool:
            # Whether stubbing the view as it is now is not enough (the growth to come is
            # not counted: it would turn what stubs alone still fit into a summary).
            return _with_model(at.planned(True, framing))

        def work(msgs: list[Message]) -> object:
            return comp.compact(msgs, force=True, fixed=live.fixed + framing + growth_to_come)

        key = session.latest_checkpoint_key()
        counted = framing + growth_to_come
        self.ahead.consider(
            session.session_id, live.view, key, counted, forecast, needs_model, work, at.emit
        )

    def cancel_prepared(self, session_id: str | None = None, *, wait: bool = False) -> int:
        """Ctrl-C, /exit: cancels the summaries being prepared (``wait``: their threads
        ended); how many."""
        return self.ahead.cancel(session_id, wait=wait) if self.ahead is not None else 0


def _with_model(plan: CompactionPlan) -> bool:
    """The compaction ``plan`` says folds with a model call."""
    return plan.would_compact and plan.cut > 1 and plan.strategy not in MODEL_FREE_STRATEGIES


def _gained(before: int, after: int, force: bool) -> bool:
    """Worth storing: it cuts more than ``MIN_COMPACTION_GAIN`` (when forced, anything)."""
    return after < before * (1 - MIN_COMPACTION_GAIN) or (force and after < before)


READ_HEAVY_LOOKAHEAD = 3  # model calls
RECENT_TOOLS = 5  # the calls whose tools decide "read-heavy"
GROWTH_WINDOW = 10  # the calls the growth is averaged over


def read_heavy(recent_tools: Sequence[str], tools: Sequence[ToolDefinition]) -> bool:
    """Of the last ``RECENT_TOOLS`` calls, more than half are of tools that read content in
    and none is of one that runs a sub-agent (as the tools declare: ``ToolDefinition.reads``,
    ``sub_agent``): the smart trigger then looks further ahead."""
    declared = {t.name: t for t in tools}
    calls = [declared.get(name) for name in recent_tools[-RECENT_TOOLS:]]
    if any(t is not None and t.sub_agent for t in calls):
        return False
    return sum(t is not None and t.reads for t in calls) * 2 > len(calls)


@dataclass(slots=True)
class SessionContextState:
    """What the policy remembers of one session (``forget`` drops it)."""

    cooldown_iterations: int = 3
    lookahead_iterations: int = 2
    iterations: int = 0  # model calls so far
    last_compaction: int | None = None  # the call that compacted last
    tokens: deque[int] = field(default_factory=lambda: deque(maxlen=GROWTH_WINDOW))
    last_compaction_tokens: int | None = None  # estimate right after the last compaction
    warned_over_threshold: bool = False  # this turn's "automatic compaction is off" notice
    explained_fixed_part: bool = False  # why compaction cannot reach its target was said
    # The strategy and view (newest id, messages, tokens) a compaction did not shrink:
    # retrying before it changes would bill the same summary for nothing.
    futile: tuple[str, int | None, int, int] | None = None

    def growth(self) -> float:
        """Tokens added per call, over the calls recorded."""
        seen = self.tokens
        return (seen[-1] - seen[0]) / (len(seen) - 1) if len(seen) >= 2 else 0.0

    def in_cooldown(self, iteration: int) -> bool:
        if self.last_compaction is None:
            return False
        return 0 <= iteration - self.last_compaction < self.cooldown_iterations

    def smart_trigger(self, tokens: int, reads: bool, window: int, threshold: int) -> bool:
        """Counts a model call of ``tokens``; whether to compact before it, a little before
        the threshold is crossed: always at the window, never in the cooldown, else when
        ``tokens + growth * lookahead`` reaches the threshold, looking further ahead when
        the recent calls mostly read (``reads``; docs/compaction.md)."""
        self.iterations += 1
        growth = self.growth()
        if self.tokens and tokens < self.tokens[-1]:
            # A drop means a compaction happened: growth before it says nothing about after.
            self.tokens.clear()
        self.tokens.append(tokens)
        if tokens >= window:
            return True
        if self.in_cooldown(self.iterations):
            return False
        ahead = READ_HEAVY_LOOKAHEAD if reads else self.lookahead_iterations
        # A shrinking context predicts no crossing: only the threshold itself counts then.
        return tokens + max(0.0, growth) * ahead >= threshold

    def compacted(self) -> None:
        """A compaction happened at the current model call: the cooldown starts."""
        self.last_compaction = self.iterations
