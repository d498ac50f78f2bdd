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
from harness9.context.repair import repair_orphaned_tool_pairs
from harness9.context.tokens import estimate_tokens, estimate_tool_tokens
from harness9.context.view import ModelView, build_view, checkpoint_for, load_view
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
from harness9.store.session import Checkpoint, CheckpointedSession
from harness9.tools.base import ToolContext, ToolResult
from harness9.tools.registry import ToolRegistry

# A compaction is announced (and stored) only when it cuts more than this share.
MIN_COMPACTION_GAIN = 0.05
# What a plan's strategy says when carrying it out calls no model: a dry run can then
# compute the exact result.
MODEL_FREE_STRATEGIES = frozenset({"budget", "window", "evict", "hybrid:stubs"})
INTERRUPTED_STUB = "[interrupted by the user before this tool finished]"
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
        recall_budget: int = 0,
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
        self._warned_full: dict[str, bool] = {}
        self._lock = threading.RLock()
        self._session = session
        self._compactor = compactor
        # Tokens a checkpoint's recall index may take; 0: no index (recall is off).
        self.recall_budget = recall_budget
        self._remembered: set[str] = set()

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
            for state in (self._last_compaction, self._warned_full):
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
        """What a compaction would do right now, without calling any model (--dry-run).

        The figures are chat's: the messages sent plus the tool definitions. When the
        compaction needs no model (truncation, eviction, stubs), it is run without
        storing anything, so ``tokens_after`` is exactly what the checkpoint will say;
        a summary's size is only known once the model answers, so it stays an estimate.
        """
        sess = self.session
        system = self.system_message(sess)
        view = load_view(sess, system)
        comp = self.compactor
        if comp is None:
            return view, None
        plan = comp.plan(view.messages, force=force)  # type: ignore[attr-defined]
        tool_tokens = estimate_tool_tokens(self.registry.definitions())
        plan.tokens_before += tool_tokens
        plan.tokens_after += tool_tokens
        if plan.would_compact and plan.strategy in MODEL_FREE_STRATEGIES:
            result = _call_compactor(comp, view.messages, force=force)
            cp, _ = self.checkpoint_of(sess, system, view, result)
            if cp is not None:
                plan.tokens_before, plan.tokens_after = cp.tokens_before, cp.tokens_after
        return view, plan

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

        Every result that changes the view is stored as a checkpoint, eviction stubs
        included (ARCHITECTURE decision 7): the view is then a pure function of the log
        and the latest checkpoint, the same on every request until the next compaction
        and on ``--resume``. The notice, the checkpoint and ``/context`` count the same
        way: the messages sent plus the tool definitions.
        """
        self.on_event(ev.CompactionStarted(getattr(comp, "strategy", type(comp).__name__), 0))
        result = _call_compactor(
            comp,
            view.messages,
            force=force,
            on_progress=lambda i, n: self.on_event(ev.CompactionProgress(i, n)),
            instructions=instructions,
        )
        cp, new_view = self.checkpoint_of(sess, system, view, result)
        before = estimate_tokens(view.messages)
        after = estimate_tokens(new_view.messages) if cp is not None else before
        self._last_compaction[sess.session_id] = after
        gained = after < before * (1 - MIN_COMPACTION_GAIN) or (force and after < before)
        if cp is None or not gained:
            return None, view, view.messages
        cp = sess.add_checkpoint(cp)
        notice = self._notice(cp, result)
        self.on_event(notice)
        return notice, new_view, new_view.messages

    def checkpoint_of(
        self,
        sess: CheckpointedSession,
        system: Message,
        view: ModelView,
        result: CompactionResult,
    ) -> tuple[Checkpoint | None, ModelView]:
        """The checkpoint ``result`` would store, and the view it would give (nothing stored)."""
        previous = sess.latest_checkpoint()
        cp = checkpoint_for(
            view,
            result,
            previous=previous,
            recall_budget=self.recall_budget,
            state_note=self.prompt_builder.state_note(sess),
        )
        if cp is None:
            return None, view
        new_view = build_view(system, sess.get_records(after_id=cp.last_message_id), cp)
        tool_tokens = estimate_tool_tokens(self.registry.definitions())
        cp.tokens_before = estimate_tokens(view.messages) + tool_tokens
        cp.tokens_after = estimate_tokens(new_view.messages) + tool_tokens
        cp.messages_before = len(view.messages)
        cp.messages_after = len(new_view.messages)
        return cp, new_view

    @staticmethod
    def _notice(cp: Checkpoint, result: CompactionResult) -> ev.Compaction:
        return ev.Compaction(
            tokens_before=cp.tokens_before,
            tokens_after=cp.tokens_after,
            msgs_before=cp.messages_before,
            msgs_after=cp.messages_after,
            strategy=result.strategy,
            fallback_reason=result.error,
        )

    # -- the turn ------------------------------------------------------------------

    def run_turn(self, user_text: str) -> TurnResult:
        with self._lock:  # snapshot once: /new during a turn must not mix sessions
            sess, comp = self._session, self._compactor
        result = TurnResult()
        self._remember_model(sess)
        sess.add_messages([Message(ROLE_USER, user_text)])
        if self.topic_compressor is not None and self.auto_compact:
            self._isolate_topics(sess)
        pending: list[ToolCall] = []
        tools_used: list[str] = []
        forced_retry_done = False
        compacted_for_call = False  # one compaction per model call, never two
        try:
            iteration = 0
            while iteration < self.max_iterations:
                system = self.prompt_builder.build(sess)
                view = load_view(sess, system)
                tools = self.registry.definitions()
                tool_tokens = estimate_tool_tokens(tools)
                outgoing = view.messages
                decision = None
                if not compacted_for_call:
                    decision = self._should_compact(comp, sess, view, iteration, tools_used)
                compacted_for_call = False
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
                        on_delta=lambda text: self.on_event(ev.TextDelta(text)),
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
                    compacted_for_call = True
                    continue
                except StreamInterruptedError as exc:
                    partial = exc.partial
                    if partial is not None and partial.content:
                        kept = Message(ROLE_ASSISTANT, partial.content + "\n[reply interrupted]")
                        sess.add_messages([kept])
                    raise
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
            # Keep what is complete; give every call that did not finish a stub result
            # so the stored sequence stays valid for the next request and for --resume.
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

    def _remember_model(self, sess: CheckpointedSession) -> None:
        """Store the model and window this session uses (``harness9 compact`` reads them)."""
        if sess.session_id in self._remembered:
            return
        self._remembered.add(sess.session_id)
        sess.remember_model(self.provider.model, self.context_window)

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
                        f"the context is over the compaction threshold ({tokens} tokens); "
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
                (lambda tool, args: offload.open_stream(sess.session_id, tool, args))  # type: ignore[attr-defined]
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


_PARAMS_CACHE: dict[type, frozenset[str]] = {}


def _call_compactor(comp: Compactor, msgs: list[Message], **kwargs: Any) -> CompactionResult:
    """Pass only the keyword arguments this compactor's compact_detailed accepts."""
    cls = type(comp)
    if cls not in _PARAMS_CACHE:
        _PARAMS_CACHE[cls] = frozenset(inspect.signature(comp.compact_detailed).parameters)  # type: ignore[attr-defined]
    accepted = _PARAMS_CACHE[cls]
    usable = {k: v for k, v in kwargs.items() if k in accepted and v is not None}
    return comp.compact_detailed(msgs, **usable)  # type: ignore[attr-defined]
