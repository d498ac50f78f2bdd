"""One agent turn: load the view, measure, compact, call the model, run tools, save.

Everything the model produces is saved the moment it exists (each reply, each
tool result), not at the end of the turn: a turn that fails or is interrupted
keeps its trajectory. The stored log is append-only; compaction only adds a
checkpoint, and the view sent to the model is rebuilt from the latest one, so
``--resume`` sends exactly what the live session would have sent.
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from harness9.context.compaction import CompactionPlan, CompactionResult, Compactor
from harness9.context.eviction import EVICTED_PREFIX
from harness9.context.repair import repair_orphaned_tool_pairs
from harness9.context.tokens import estimate_tokens, estimate_tool_tokens, format_token_count
from harness9.context.view import ModelView, checkpoint_for, load_view
from harness9.engine import events as ev
from harness9.engine.prompt import PromptBuilder
from harness9.provider.errors import (
    ContextWindowExceededError,
    ProviderError,
    StreamInterruptedError,
)
from harness9.schema import (
    ROLE_ASSISTANT,
    ROLE_TOOL,
    ROLE_USER,
    Message,
    ToolCall,
    ToolDefinition,
    Usage,
)
from harness9.store.session import CheckpointedSession
from harness9.tools.base import ToolContext, ToolResult
from harness9.tools.registry import ToolRegistry

# A compaction is announced (and stored) only when it cuts more than this share.
MIN_COMPACTION_GAIN = 0.05
INTERRUPTED_STUB = "[interrupted by the user before this tool finished]"
# Appended to a reply that stopped mid-stream (Ctrl-C or a dropped connection): what the
# user saw is what is stored, and the model sees on the next turn that it was cut off.
REPLY_INTERRUPTED = "\n[reply interrupted]"
EMPTY_REPLY = (
    "{model} sent an empty reply (no text, no tool call); send your message again "
    "or try another model"
)


class ModelProvider(Protocol):
    model: str

    def generate(
        self,
        messages: list[Message],
        tools: list[ToolDefinition],
        *,
        stream: bool = False,
        on_delta: Any = None,
    ) -> tuple[Message, Usage | None]: ...


class Offloader(Protocol):
    def maybe_offload(
        self, session_id: str, tool_name: str, args_json: str, content: str, *, metadata: Any = None
    ) -> Any: ...


class CompactionTrigger(Protocol):
    """Decides, before each model call, whether to compact early (phase-2 smart triggers)."""

    def should_compact(
        self, session_id: str, iteration: int, tokens: int, tools_used: list[str]
    ) -> bool: ...

    def compacted(self, session_id: str, iteration: int) -> None: ...


@dataclass(slots=True)
class TurnResult:
    reply: Message | None = None
    iterations: int = 0
    interrupted: bool = False
    error: str | None = None
    usage: Usage | None = None


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


class AgentEngine:
    def __init__(
        self,
        provider: ModelProvider,
        registry: ToolRegistry,
        workdir: Path,
        *,
        session: CheckpointedSession,
        compactor: Compactor | None,
        context_window: int,
        prompt_builder: PromptBuilder | None = None,
        max_iterations: int = 50,
        on_event: ev.EventSink = ev.discard,
        stream: bool = True,
        confirm: Any = None,
        assume_yes: bool = False,
        offload: Offloader | None = None,
        trigger: CompactionTrigger | None = None,
        auto_compact: bool = True,
        topic_compressor: Compactor | None = None,
        token_counter: Any = None,
    ) -> None:
        self.provider = provider
        self.registry = registry
        self.workdir = Path(workdir).resolve()
        self.context_window = context_window
        self.prompt_builder = prompt_builder or PromptBuilder(self.workdir)
        self.max_iterations = max_iterations
        self.on_event = on_event
        self.stream = stream
        self.confirm = confirm
        self.assume_yes = assume_yes
        self.offload = offload
        self.trigger = trigger
        self.auto_compact = auto_compact
        self.topic_compressor = topic_compressor
        # Displayed estimates: the model's tokenizer when known, calibrated by the real
        # input tokens of each call. Compaction decisions keep the byte estimate, whose
        # 20 % head-room the threshold was chosen for.
        self.token_counter = token_counter
        self._calibrated = False
        self.last_usage: Usage | None = None
        # Per session: tokens after the last compaction, evicted results announced,
        # and whether the "compaction is off" warning was shown.
        self._last_compaction: dict[str, int] = {}
        self._evicted: dict[str, int] = {}
        self._warned_full: dict[str, bool] = {}
        self._lock = threading.RLock()
        self._session = session
        self._compactor = compactor

    # -- session switching (the REPL's /new and /resume; seed §8.4) ---------------

    @property
    def session(self) -> CheckpointedSession:
        with self._lock:
            return self._session

    def set_session(self, session: CheckpointedSession) -> None:
        with self._lock:
            self._session = session
            self.last_usage = None
            sid = session.session_id
            for state in (self._last_compaction, self._evicted, self._warned_full):
                state.pop(sid, None)
            reset = getattr(self.trigger, "reset", None)
            if reset is not None:
                reset(sid)

    @property
    def compactor(self) -> Compactor | None:
        with self._lock:
            return self._compactor

    def set_compactor(self, compactor: Compactor | None) -> None:
        with self._lock:
            self._compactor = compactor

    # -- views ---------------------------------------------------------------

    def system_message(self, session: CheckpointedSession | None = None) -> Message:
        return self.prompt_builder.build(session or self.session)

    def current_view(self, session: CheckpointedSession | None = None) -> ModelView:
        sess = session or self.session
        return load_view(sess, self.system_message(sess))

    def context_breakdown(self) -> ContextBreakdown:
        view = self.current_view()
        msgs = repair_orphaned_tool_pairs(view.messages)
        system = estimate_tokens(msgs[:1])
        summary = sum(estimate_tokens([m]) for m in msgs[1:] if m.is_summary)
        rest = estimate_tokens(msgs) - system - summary
        comp = self.compactor
        threshold = getattr(comp, "max_tokens", 0) or self.context_window * 80 // 100
        return ContextBreakdown(
            system=system,
            tools=estimate_tool_tokens(self.registry.definitions()),
            summary=summary,
            messages=max(rest, 0),
            message_count=len(msgs) - 1,
            context_window=self.context_window,
            threshold=threshold,
        )

    # -- compaction ------------------------------------------------------------

    def plan_compaction(self, *, force: bool = False) -> tuple[ModelView, CompactionPlan | None]:
        """What a compaction would fold right now, without calling any model (--dry-run)."""
        view = self.current_view()
        comp = self.compactor
        return view, (comp.plan(view.messages, force=force) if comp is not None else None)  # type: ignore[attr-defined]

    def compact_now(
        self, *, instructions: str | None = None, force: bool = True
    ) -> ev.Compaction | None:
        """Compact the current session immediately (/compact, `harness9 compact`).

        Returns the notice, or None when nothing was folded (under the threshold
        without ``force``, or nothing left to fold).
        """
        sess = self.session
        system = self.system_message(sess)
        view = load_view(sess, system)
        comp = self.compactor
        if comp is None:
            return None
        if not force and not comp.plan(view.messages).would_compact:  # type: ignore[attr-defined]
            return None
        notice, _, _ = self._compact(
            sess, system, view, comp, force=force, instructions=instructions
        )
        return notice

    def _compact(
        self,
        sess: CheckpointedSession,
        system: Message,
        view: ModelView,
        comp: Compactor,
        *,
        force: bool,
        instructions: str | None = None,
    ) -> tuple[ev.Compaction | None, ModelView, list[Message]]:
        """Run the compactor; returns (notice or None, the view, the messages to send).

        A folding result is stored as a checkpoint and the view rebuilt from it. An
        in-place result (eviction rewrites old tool results, folds nothing) is a pure
        function of the stored log, so it is recomputed per request, never stored.
        """
        tool_tokens = estimate_tool_tokens(self.registry.definitions())
        before = estimate_tokens(view.messages)
        self.on_event(ev.CompactionStarted(getattr(comp, "strategy", type(comp).__name__), before))
        result = _call_compactor(
            comp,
            view.messages,
            force=force,
            on_progress=lambda i, n: self.on_event(ev.CompactionProgress(i, n)),
            instructions=instructions,
        )
        after = estimate_tokens(result.messages)
        self._last_compaction[sess.session_id] = after
        gained = after < before * (1 - MIN_COMPACTION_GAIN) or (force and after < before)
        if not gained:
            return None, view, view.messages
        cp = checkpoint_for(view, result, previous=sess.latest_checkpoint())
        if cp is None:
            if result.plan.cut != 1:
                return None, view, view.messages
            evicted = sum(1 for m in result.messages if m.content.startswith(EVICTED_PREFIX))
            announce = evicted > self._evicted.get(sess.session_id, 0)
            self._evicted[sess.session_id] = evicted
            notice = self._notice(view.messages, result.messages, tool_tokens, result)
            if announce:
                self.on_event(notice)
            return (notice if announce else None), view, result.messages
        sess.add_checkpoint(cp)
        self._evicted.pop(sess.session_id, None)
        new_view = load_view(sess, system)
        notice = self._notice(view.messages, new_view.messages, tool_tokens, result)
        self.on_event(notice)
        return notice, new_view, new_view.messages

    @staticmethod
    def _notice(
        before: list[Message], after: list[Message], tool_tokens: int, result: CompactionResult
    ) -> ev.Compaction:
        return ev.Compaction(
            tokens_before=estimate_tokens(before) + tool_tokens,
            tokens_after=estimate_tokens(after) + tool_tokens,
            msgs_before=len(before),
            msgs_after=len(after),
            strategy=result.strategy,
            fallback_reason=result.error,
        )

    # -- the turn ------------------------------------------------------------------

    def run_turn(self, user_text: str) -> TurnResult:
        with self._lock:  # snapshot once: /new during a turn must not mix sessions
            sess, comp = self._session, self._compactor
        result = TurnResult()
        too_big = self._never_fits(sess, user_text)
        if too_big is not None:
            result.error = too_big
            self.on_event(ev.Error(too_big))
            return result
        sess.add_messages([Message(ROLE_USER, user_text)])
        if self.topic_compressor is not None and self.auto_compact:
            self._isolate_topics(sess)
        pending: list[ToolCall] = []
        tools_used: list[str] = []
        streamed: list[str] = []  # text of the reply being streamed, until it is stored
        forced_retry_done = False

        def on_delta(text: str) -> None:
            streamed.append(text)
            self.on_event(ev.TextDelta(text))

        try:
            iteration = 0
            while iteration < self.max_iterations:
                system = self.prompt_builder.build(sess)
                view = load_view(sess, system)
                tools = self.registry.definitions()
                tool_tokens = estimate_tool_tokens(tools)
                outgoing = view.messages
                decision = self._should_compact(comp, sess, view, iteration, tools_used)
                if comp is not None and decision is not None:
                    notice, view, outgoing = self._compact(
                        sess, system, view, comp, force=decision == "early"
                    )
                    if notice is not None and self.trigger is not None:
                        self.trigger.compacted(sess.session_id, iteration)
                request = repair_orphaned_tool_pairs(outgoing)
                counted = self._count(request)
                # Until the first calibration the tool definitions are added explicitly;
                # afterwards the calibration ratio accounts for them.
                shown = counted if self._calibrated else counted + tool_tokens
                self.on_event(ev.TokenUpdate(shown, self.context_window))
                try:
                    reply, usage = self.provider.generate(
                        request,
                        tools,
                        stream=self.stream,
                        on_delta=on_delta,
                    )
                except ContextWindowExceededError as exc:
                    # Our estimate said it fits, the API says no: compact harder, once.
                    if not self.auto_compact:
                        raise ContextWindowExceededError(
                            f"{exc} — automatic compaction is off: run /compact, then send again"
                        ) from exc
                    if forced_retry_done or comp is None:
                        raise
                    forced_retry_done = True
                    self.on_event(
                        ev.Notice(
                            f"the model rejected the context as too long ({exc}); compacting and retrying"
                        )
                    )
                    self._compact(sess, system, view, comp, force=True)
                    continue
                except StreamInterruptedError:
                    _keep_partial(sess, streamed)
                    raise
                streamed.clear()  # complete: stored below (or reported, when empty)
                iteration += 1
                result.iterations = iteration
                if usage is not None:
                    self.last_usage = usage
                    result.usage = usage
                    if usage.input_tokens > 0:
                        if self.token_counter is not None:
                            self.token_counter.calibrate(counted, usage.input_tokens)
                            self._calibrated = True
                        self.on_event(
                            ev.TokenUpdate(usage.input_tokens, self.context_window, actual=True)
                        )
                reply = Message(ROLE_ASSISTANT, reply.content, list(reply.tool_calls))
                if not reply.content.strip() and not reply.tool_calls:
                    # Nothing to keep, and an empty assistant turn is rejected by some APIs
                    # on the next request: report it instead of storing it.
                    result.error = EMPTY_REPLY.format(model=self.provider.model)
                    self.on_event(ev.Error(result.error))
                    return result
                sess.add_messages([reply])
                self.on_event(ev.AssistantReply(reply))
                result.reply = reply
                if not reply.tool_calls:
                    return result
                pending = list(reply.tool_calls)
                while pending:
                    call = pending[0]
                    content = self._run_tool(sess, call)
                    sess.add_messages([Message(ROLE_TOOL, content, tool_call_id=call.id)])
                    pending.pop(0)
                    tools_used.append(call.name)
            result.error = (
                f"stopped after {self.max_iterations} model calls in one turn; "
                "send another message to let the agent continue"
            )
            self.on_event(ev.Error(result.error))
            return result
        except KeyboardInterrupt:
            # Keep what is complete, and of a reply cut off mid-stream what was shown (the
            # rule a dropped stream follows too); give every call that did not finish a
            # stub result so the stored sequence stays valid for the next request and --resume.
            _keep_partial(sess, streamed)
            if pending:
                sess.add_messages(
                    [Message(ROLE_TOOL, INTERRUPTED_STUB, tool_call_id=c.id) for c in pending]
                )
            result.interrupted = True
            return result
        except ProviderError as exc:
            result.error = str(exc)
            self.on_event(ev.Error(result.error))
            return result

    def _never_fits(self, sess: CheckpointedSession, user_text: str) -> str | None:
        """Why a message cannot be sent at all, or None: with the system prompt and the
        tool definitions it would exceed the whole window, so no compaction of the
        history could ever make room. Refused before it is stored, so nothing is lost
        and --resume is not left with a turn that fails forever."""
        size = estimate_tokens([Message(ROLE_USER, user_text)])
        if size <= self.context_window // 2:
            return None  # the common case, without building the system prompt
        fixed = estimate_tokens([self.prompt_builder.build(sess)]) + estimate_tool_tokens(
            self.registry.definitions()
        )
        if size + fixed <= self.context_window:
            return None
        return (
            f"this message is about {format_token_count(size)} tokens and can never fit the "
            f"{format_token_count(self.context_window)}-token context window; nothing was sent "
            "(save it to a file in the working directory and ask the agent to read it)"
        )

    def _should_compact(
        self,
        comp: Compactor | None,
        sess: CheckpointedSession,
        view: ModelView,
        iteration: int,
        tools_used: list[str],
    ) -> str | None:
        """None, "threshold" (over the compactor's budget) or "early" (the smart trigger).

        The fixed threshold always compacts. The phase-2 trigger may compact early,
        when growth predicts the threshold will be crossed within a few model calls,
        and its cooldown limits only those early compactions. A compaction that could
        not get under the threshold (the protected tail alone is too big) is not
        repeated until the context has grown by another 5 %.
        """
        if comp is None:
            return None
        plan = comp.plan(view.messages)  # type: ignore[attr-defined]
        tokens = estimate_tokens(view.messages)
        if not self.auto_compact:
            if plan.would_compact and not self._warned_full.get(sess.session_id):
                self._warned_full[sess.session_id] = True
                self.on_event(
                    ev.Notice(
                        f"the context ({format_token_count(tokens)} tokens) is over the "
                        f"compaction threshold ({_threshold_text(plan)}); "
                        "automatic compaction is off: run /compact"
                    )
                )
            return None
        early = self.trigger is not None and self.trigger.should_compact(
            sess.session_id, iteration, tokens, tools_used[-5:]
        )
        last = self._last_compaction.get(sess.session_id)
        if (
            last is not None
            and tokens <= last * (1 + MIN_COMPACTION_GAIN)
            and tokens >= plan.threshold
        ):
            return None  # compacting again now would fold nothing new
        if plan.would_compact:
            return "threshold"
        return "early" if early else None

    def _count(self, msgs: list[Message]) -> int:
        if self.token_counter is None:
            return estimate_tokens(msgs)
        return self.token_counter.count(msgs)

    def _isolate_topics(self, sess: CheckpointedSession) -> None:
        """Experimental: when the new message starts a new topic, fold the finished ones."""
        system = self.prompt_builder.build(sess)
        view = load_view(sess, system)
        comp = self.topic_compressor
        if comp is not None and comp.plan(view.messages).would_compact:  # type: ignore[attr-defined]
            self._compact(sess, system, view, comp, force=False)

    def _run_tool(self, sess: CheckpointedSession, call: ToolCall) -> str:
        self.on_event(ev.ToolStarted(call))
        offload = self.offload
        ctx = ToolContext(
            workdir=self.workdir,
            session=sess,
            confirm=self.confirm,
            assume_yes=self.assume_yes,
            session_id=sess.session_id,
            open_output=(
                (lambda tool, args: offload.open_stream(sess.session_id, tool, args))
                if offload is not None and hasattr(offload, "open_stream")
                else None
            ),
        )
        outcome: ToolResult = self.registry.execute(call, ctx)
        content = outcome.content
        exempt = getattr(self.registry.get(call.name), "offload_exempt", False)
        exempt = exempt or "offloaded" in outcome.metadata  # the tool streamed it there already
        if self.offload is not None and not outcome.is_error and not exempt:
            offloaded = self.offload.maybe_offload(
                sess.session_id, call.name, call.arguments, content, metadata=outcome.metadata
            )
            if offloaded is not None:
                content = offloaded.summary
        self.on_event(ev.ToolFinished(call, content, outcome.is_error))
        return content


def _threshold_text(plan: CompactionPlan) -> str:
    from harness9.context.tokens import format_token_count

    if plan.strategy == "window":  # the window's threshold is a message count
        return f"{plan.threshold} messages"
    return f"{format_token_count(plan.threshold)} tokens"


def _keep_partial(sess: CheckpointedSession, streamed: list[str]) -> None:
    """Store the part of a reply that was shown before its stream stopped, marked as cut."""
    text = "".join(streamed)
    streamed.clear()
    if text.strip():
        sess.add_messages([Message(ROLE_ASSISTANT, text + REPLY_INTERRUPTED)])


_PARAMS_CACHE: dict[type, frozenset[str]] = {}


def _call_compactor(comp: Compactor, msgs: list[Message], **kwargs: Any) -> CompactionResult:
    """Pass only the keyword arguments this compactor's compact_detailed accepts."""
    cls = type(comp)
    if cls not in _PARAMS_CACHE:
        _PARAMS_CACHE[cls] = frozenset(inspect.signature(comp.compact_detailed).parameters)  # type: ignore[attr-defined]
    accepted = _PARAMS_CACHE[cls]
    usable = {k: v for k, v in kwargs.items() if k in accepted and v is not None}
    return comp.compact_detailed(msgs, **usable)  # type: ignore[attr-defined]
