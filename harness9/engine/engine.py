"""One agent turn: the view, the context policy, the model, the tools, save; repeat.

Everything the model produces is saved the moment it exists (each reply, each
tool result), not at the end of the turn: a turn that fails or is interrupted
keeps its trajectory. The stored log is append-only; what the model is shown
(compaction, triggers, token counting) is the ``ContextPolicy``'s business (a big
tool result's offload is the engine's: ``OffloadStore``), so ``--resume`` sends exactly
what the live session would have sent: each model call sends the ``Request``
``ContextPolicy.prepare`` builds (from the prompt's parts, ``PromptBuilder.parts``, and
the registry's tools), unchanged.
"""

from __future__ import annotations

import codecs
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from harness9.context.pipeline import CompactionPlan
from harness9.context.policy import ContextPolicy
from harness9.context.view import ModelView
from harness9.engine import events as ev
from harness9.engine.breakdown import ContextBreakdown, measure
from harness9.engine.parallel import run_side_by_side
from harness9.engine.prepared import AheadOfThreshold
from harness9.engine.prompt import PromptBuilder
from harness9.provider.errors import (
    ContextWindowExceededError,
    ProviderError,
    StreamInterruptedError,
)
from harness9.request import Request, SystemPart
from harness9.schema import (
    ROLE_ASSISTANT,
    ROLE_TOOL,
    ROLE_USER,
    Message,
    ToolCall,
    ToolDefinition,
    Usage,
    result_metadata,
)
from harness9.store.holding import SAVE_RETRY_S, HoldingSession
from harness9.store.session import ChatSession, CheckpointedSession, OffloadLink, SessionSettings
from harness9.tokens import estimate_tokens, estimate_tool_tokens, format_token_count
from harness9.tools.base import (
    Approval,
    ApprovalAnswer,
    ToolContext,
    ToolInterrupted,
    ToolResult,
)
from harness9.tools.offload import OffloadStore
from harness9.tools.registry import ToolRegistry
from harness9.tools.task import TASK_TOOL, TaskTool

__all__ = [
    "EMPTY_REPLY",
    "INTERRUPTED_STUB",
    "AgentEngine",
    "ContextBreakdown",
    "EngineOptions",
    "ModelProvider",
    "TurnResult",
]

INTERRUPTED_STUB = "[interrupted by the user before this tool finished]"
# Appended to a reply that stopped mid-stream (Ctrl-C or a dropped connection): what the
# user saw is what is stored, and the model sees on the next turn that it was cut off.
REPLY_INTERRUPTED = "\n[reply interrupted]"
EMPTY_REPLY = (
    "{model} sent an empty reply (no text, no tool call); send your message again "
    "or try another model"
)


class Closeable(Protocol):
    def close(self) -> None: ...


class ModelProvider(Protocol):
    model: str

    def send(
        self, request: Request, *, stream: bool = False, on_delta: Any = None
    ) -> tuple[Message, Usage | None]: ...


@dataclass(slots=True)
class EngineOptions:
    """How a turn runs (the context side is the policy's)."""

    max_iterations: int = 50  # model calls per turn before the agent is stopped
    stream: bool = True
    assume_yes: bool = False  # --yes: run shell commands and write files without asking
    # Asks the user to approve a tool's action (a TTY); None: no one to ask.
    confirm: Callable[[Approval], ApprovalAnswer] | None = None
    # Shell commands that never need asking (config: tools.auto_approve).
    auto_approve: tuple[str, ...] = ()
    # The server the provider talks to ("" : the provider's own), recorded with the session
    # so that --continue and `compact` reach the same one.
    api_base: str = ""
    # How long a save retries a database another process keeps locked before the
    # messages are held in memory (harness9.store.holding).
    save_retry_s: float = SAVE_RETRY_S
    # `task` calls of one reply that run at the same time (config: subagents.parallel).
    parallel_tasks: int = 4


@dataclass(slots=True)
class TurnResult:
    reply: Message | None = None
    iterations: int = 0
    interrupted: bool = False
    error: str | None = None
    usage: Usage | None = None


class AgentEngine:
    def __init__(
        self,
        provider: ModelProvider,
        registry: ToolRegistry,
        workdir: Path,
        *,
        session: ChatSession,
        policy: ContextPolicy,
        offload: OffloadStore | None = None,
        prompt_builder: PromptBuilder | None = None,
        options: EngineOptions | None = None,
        on_event: ev.EventSink = ev.discard,
    ) -> None:
        self.provider = provider
        self.registry = registry
        self.workdir = Path(workdir).resolve()
        self.policy = policy
        self.offload = offload  # where big tool results go (None: they stay inline)
        self.prompt_builder = prompt_builder or PromptBuilder(self.workdir)
        self.options = options or EngineOptions()
        self.on_event = on_event
        # Told the window a server named in a refusal, once adopted (chat remembers it for
        # the next session on this model and server).
        self.on_window_named: Callable[[int], None] | None = None
        self.last_usage: Usage | None = None
        # Text of the reply streaming now, kept until the reply is stored, so that a
        # reply cut off mid-stream can be stored as far as it was shown.
        self._streamed: list[str] = []
        self._lock = threading.RLock()
        self._session = self._holding(session)
        # What was last stored with the session's settings: (session id, model, the
        # count's samples); /model switches the model, each reply the samples.
        self._remembered: tuple[str, str, tuple[tuple[int, int], ...]] | None = None
        # The threads of summaries prepared ahead (harness9.engine.background); build_engine
        # sets it, ``close`` ends them.
        self.background: Closeable | None = None
        # The summaries the policy prepares ahead (the object it was given as ``ahead``), which
        # /context counts; build_engine sets it (None: none are prepared).
        self.preparations: AheadOfThreshold | None = None

    @property
    def context_window(self) -> int:
        return self.policy.context_window

    # -- session switching (the REPL's /new and /resume) -----------------------------

    @property
    def session(self) -> HoldingSession:
        with self._lock:
            return self._session

    def _holding(self, session: ChatSession) -> HoldingSession:
        """Every save goes through a HoldingSession: a locked database never loses a reply."""
        if isinstance(session, HoldingSession):
            return session

        def notice(text: str) -> None:
            self.on_event(ev.Notice(text))

        return HoldingSession(
            session, on_held=notice, on_saved=notice, retry_s=self.options.save_retry_s
        )

    def flush_held(self) -> int:
        """Save messages held back by a locked database; return how many are still held."""
        with self._lock:
            sess = self._session
        sess.flush()
        return len(sess.held)

    def cancel_background(self) -> int:
        """Ctrl-C: the summaries being prepared in the background are cancelled; how many."""
        return self.policy.cancel_prepared(wait=True)

    def close(self) -> None:
        """The chat is over: no background summary, thread or request is left behind."""
        self.policy.cancel_prepared(wait=True)
        if self.background is not None:
            self.background.close()

    def set_session(self, session: ChatSession) -> None:
        with self._lock:
            # A summary prepared for the session being left would never be applied.
            self.policy.cancel_prepared(self._session.session_id)
            self._session.flush()  # the session being left keeps what it was told
            self._session = self._holding(session)
            self.last_usage = None
            self.policy.forget(session.session_id)

    # -- views and the policy's user-facing calls -------------------------------------

    def system_message(self, session: CheckpointedSession | None = None) -> Message:
        return self.prompt_builder.build(session or self.session)

    def system_parts(self, session: CheckpointedSession) -> tuple[SystemPart, ...]:
        return self.prompt_builder.parts(session)

    def context_breakdown(self) -> ContextBreakdown:
        """/context: what the next request would carry, and where compaction starts."""
        sess, policy = self.session, self.policy
        tools = self.registry.definitions()
        request = policy.uncompacted_request(sess, self.system_parts(sess), tools)
        return measure(request, policy, self.preparations, sess.session_id)

    def plan_compaction(self, *, force: bool = False) -> tuple[ModelView, CompactionPlan]:
        """What a compaction would fold right now, without calling any model (--dry-run)."""
        sess = self.session
        return self.policy.plan(
            sess, self.system_parts(sess), force=force, tools=self.registry.definitions()
        )

    def compact_now(
        self, *, instructions: str | None = None, force: bool = True
    ) -> ev.Compaction | None:
        """Compact the current session immediately (/compact, `harness9 compact`)."""
        sess = self.session
        return self.policy.compact(
            sess,
            self.system_parts(sess),
            force=force,
            instructions=instructions,
            tools=self.registry.definitions(),
            emit=self.on_event,
        )

    # -- the turn ------------------------------------------------------------------

    def run_turn(self, user_text: str) -> TurnResult:
        """The loop: view -> policy -> model -> tools -> save, until a reply without calls."""
        sess = self.session  # snapshot once: /new during a turn must not mix sessions
        policy, emit = self.policy, self.on_event
        result = TurnResult()
        too_big = self._never_fits(sess, user_text)
        if too_big is not None:
            return self._failed(result, too_big)
        self._remember_model(sess)
        sess.add_messages([Message(ROLE_USER, user_text)])
        policy.begin_turn(sess, self.system_parts(sess), emit)
        pending: list[ToolCall] = []  # calls of the last reply whose results are not saved yet
        tools_used: list[str] = []
        self._streamed.clear()
        may_compact_on_overflow = True
        just_compacted = False  # one compaction per model call, never two
        refused: Request | None = None  # the request the server just refused
        try:
            while result.iterations < self.options.max_iterations:
                system, tools = self.system_parts(sess), self.registry.definitions()
                request = policy.prepare(
                    sess, system, tools, tools_used[-5:], emit, may_compact=not just_compacted
                )
                just_compacted = False
                self._never_the_same(request, refused)
                emit(ev.TokenUpdate(request.shown_tokens, policy.context_window))
                answer = self._call_model(
                    sess, system, request, may_compact=may_compact_on_overflow
                )
                if answer is None:  # the context overflowed and was compacted: ask again
                    may_compact_on_overflow = False
                    just_compacted = True
                    refused = request
                    continue
                reply, usage = answer
                may_compact_on_overflow, refused = True, None  # this call got through
                self._streamed.clear()  # complete: stored below (or reported, when empty)
                result.iterations += 1
                if usage is not None:
                    self._record_usage(request, usage, result)
                if not reply.content.strip() and not reply.tool_calls:
                    # Nothing to keep, and an empty assistant turn is rejected by some APIs
                    # on the next request: report it instead of storing it.
                    self._report_usage(usage)
                    return self._failed(result, EMPTY_REPLY.format(model=self.provider.model))
                sess.add_messages([reply])
                # Reported after the save: accounting must never delay keeping the reply.
                self._report_usage(usage)
                self._remember_model(sess)  # the count it reported, for the next process
                emit(ev.AssistantReply(reply))
                result.reply = reply
                if not reply.tool_calls:
                    return result
                pending = list(reply.tool_calls)
                self._run_calls(sess, pending, tools_used)
            return self._failed(
                result,
                f"stopped after {self.options.max_iterations} model calls in one turn; "
                "send another message to let the agent continue",
            )
        except KeyboardInterrupt as exc:
            policy.cancel_prepared(wait=True)  # Ctrl-C stops the background summary too
            # Keep what is complete, and of a reply cut off mid-stream what was shown (the
            # rule a dropped stream follows too); give every call that did not finish a
            # stub result so the stored sequence stays valid for the next request and --resume.
            self._keep_partial(sess)
            self._stub_unfinished(sess, pending, exc)
            result.interrupted = True
            return result
        except ProviderError as exc:
            return self._failed(result, str(exc))

    def _stub_unfinished(
        self, sess: CheckpointedSession, pending: list[ToolCall], exc: KeyboardInterrupt
    ) -> None:
        """A result for each call an interrupt left unfinished: for the one stopped, what its
        tool said of it (never run, or the output it had), for the rest the plain stub."""
        if not pending:
            return
        stubs = [Message(ROLE_TOOL, INTERRUPTED_STUB, tool_call_id=c.id) for c in pending]
        if isinstance(exc, ToolInterrupted):
            stubs[0] = Message(ROLE_TOOL, exc.result, tool_call_id=pending[0].id)
            if not exc.ran:  # it was only asked about: no tool is running any more
                self.on_event(ev.ToolFinished(pending[0], exc.result, True, None, None))
        sess.add_messages(stubs)

    def _failed(self, result: TurnResult, error: str) -> TurnResult:
        """The turn ends with ``error``, shown to the user."""
        result.error = error
        self.on_event(ev.Error(error))
        return result

    def _output_watcher(self, call: ToolCall) -> Callable[[bytes], None]:
        """Hands a running tool's output to the UI as text (UTF-8 split across chunks kept)."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

        def watch(data: bytes) -> None:
            self.on_event(ev.ToolOutput(call, decoder.decode(data)))

        return watch

    def _run_calls(
        self, sess: CheckpointedSession, pending: list[ToolCall], tools_used: list[str]
    ) -> None:
        """Run a reply's calls in order (a run of `task` calls side by side), saving each
        result as it comes. ``pending`` is emptied as they are saved: what an interrupt
        leaves in it gets a stub result."""
        while pending:
            self._run_next(sess, pending, tools_used)

    def _remember_model(self, sess: HoldingSession) -> None:
        """Store the model, window and server's count the session uses (``--resume`` and
        ``harness9 compact`` read them): one write, and none when nothing changed."""
        samples = self.policy.count.samples()
        remembered = (sess.session_id, self.provider.model, samples)
        if self._remembered == remembered:
            return
        self._remembered = remembered
        sess.remember_model(
            SessionSettings(
                self.provider.model,
                self.policy.context_window,
                api_base=self.options.api_base,
                workdir=str(self.workdir),
                count_samples=samples,
            )
        )

    def seed_count(self, stored: SessionSettings | None) -> bool:
        """Count as the server did when ``stored`` was recorded: the policy's count starts
        from its samples, when they were learnt from this model at this API base (another
        server counts otherwise) and this engine has learnt nothing yet. True if seeded."""
        if stored is None or not stored.count_samples or self.policy.count.known:
            return False
        if (stored.model, stored.api_base) != (self.provider.model, self.options.api_base):
            return False
        self.policy.count.seed(stored.count_samples)
        return True

    def _report_usage(self, usage: Usage | None) -> None:
        if usage is not None:
            self.on_event(ev.ModelUsage(self.provider.model, usage))

    def _call_model(
        self,
        sess: HoldingSession,
        system: tuple[SystemPart, ...],
        request: Request,
        *,
        may_compact: bool,
    ) -> tuple[Message, Usage | None] | None:
        """The model's reply to ``request``, sent as it is; None when it rejected the
        context as too long and the policy compacted (once per model call: ``may_compact``)."""
        policy = self.policy
        try:
            reply, usage = self.provider.send(
                request, stream=self.options.stream, on_delta=self._on_delta
            )
            died = _nothing(reply) and usage is None
            if died and self.options.stream and request.shown_tokens > policy.largest_answered:
                # A stream that ended with nothing after a 200, on a request larger than any
                # this server answered: llama-cpp-python fails a stream over its window so,
                # and refuses the same request unstreamed in words that name the window.
                reply, usage = self.provider.send(request, stream=False)
        except ContextWindowExceededError as exc:
            # A window learnt from the refusal has just been announced: the refusal's own
            # words would say the same thing a second time.
            learnt = exc.window is not None and self._adopt_window(sess, exc.window)
            if learnt and exc.window is not None and self.on_window_named is not None:
                self.on_window_named(exc.window)
            self._overflowed(
                sess, system, request.tools, str(exc), may_compact, exc, announce=not learnt
            )
            return None
        except StreamInterruptedError:
            self._keep_partial(sess)
            raise
        if died and _nothing(reply) and request.shown_tokens > policy.largest_answered:
            # Nothing came back, asked again too: how a server that fails the stream says
            # "too long" when it names no window. The window is then taken as the largest
            # request answered (at least half of this one): every later request fits it.
            if policy.largest_answered > 0:
                guess = max(policy.largest_answered, request.shown_tokens // 2)
                self._adopt_window(sess, guess)
            why = self._too_long(request, "the server sent nothing back")
            self._overflowed(sess, system, request.tools, why, may_compact, None)
            return None
        policy.answered(request)
        return Message(ROLE_ASSISTANT, reply.content, list(reply.tool_calls)), usage

    def _overflowed(
        self,
        sess: CheckpointedSession,
        system: tuple[SystemPart, ...],
        tools: list[ToolDefinition],
        reason: str,
        may_compact: bool,
        cause: Exception | None,
        *,
        announce: bool = True,
    ) -> None:
        """The request was (or is taken to be) too long: compacted for the caller to retry
        (once), or the error raised."""
        if not may_compact:
            self._never_fitted(sess, cause)
        why = self.policy.after_overflow(
            sess,
            system,
            tools,
            reason,
            emit=self.on_event,
            may_compact=may_compact,
            announce=announce,
        )
        if why is not None:
            raise ContextWindowExceededError(why) from cause

    def _never_fitted(self, sess: CheckpointedSession, cause: Exception | None) -> None:
        """Refused again after compacting, while the turn's message is still the last one
        stored: when that message alone can never fit the window the server has now named,
        it is taken back (as one refused before sending is never stored, so --resume is not
        left with it) and the turn ends saying so, instead of blaming the window setting."""
        stored = sess.get_messages(limit=1)
        if not stored or stored[-1].role != ROLE_USER:
            return
        why = self._never_fits(sess, stored[-1].content, sent=True)
        if why is not None:
            sess.pop_message()
            raise ContextWindowExceededError(why) from cause

    def _never_the_same(self, request: Request, refused: Request | None) -> None:
        """A retry is never the request the server refused: it would be refused again (the
        same messages made for a smaller window ask for a smaller reply)."""
        if refused is None or request.window != refused.window:
            return
        if request.messages == refused.messages:
            raise ContextWindowExceededError(self._too_long(request, "nothing could be cut"))

    def _too_long(self, request: Request, what: str) -> str:
        """A failed request's size against the window, and what to do about it."""
        size = format_token_count(request.shown_tokens)
        window = format_token_count(self.policy.context_window)
        return (
            f"the request to {self.provider.model} failed: {what} for a request of ~{size} "
            f"tokens (window {window}); if the server's window is smaller, set "
            "--context-window N"
        )

    def _adopt_window(self, sess: HoldingSession, window: int) -> bool:
        """Work with the server's ``window`` from now on, when smaller than the one in use:
        say so, fit the reply's budget into it, and store it with the session's settings
        (``--resume``, ``--continue`` and ``compact`` use it). True when it was adopted."""
        old = self.policy.context_window
        if not self.policy.adopt_window(window):
            return False
        self.on_event(
            ev.Notice(
                f"the server's window is {window:,} tokens, not {format_token_count(old)}: "
                "compacting to it"
            )
        )
        self._remembered = None  # stored again, with the new window
        self._remember_model(sess)
        return True

    def _on_delta(self, text: str) -> None:
        self._streamed.append(text)
        self.on_event(ev.TextDelta(text))

    def _keep_partial(self, sess: CheckpointedSession) -> None:
        """Store the part of a reply that was shown before its stream stopped, marked as cut."""
        text = "".join(self._streamed)
        self._streamed.clear()
        if text.strip():
            sess.add_messages([Message(ROLE_ASSISTANT, text + REPLY_INTERRUPTED)])

    def _never_fits(
        self, sess: CheckpointedSession, user_text: str, *, sent: bool = False
    ) -> str | None:
        """Why a message cannot be sent at all, or None: with the system prompt and the
        tool definitions it would exceed the whole window, so no compaction of the
        history could ever make room. Refused before it is stored, so nothing is lost
        and --resume is not left with a turn that fails forever."""
        window = self.policy.context_window
        size = estimate_tokens([Message(ROLE_USER, user_text)])
        if size <= window // 2:
            return None  # the common case, without building the system prompt
        fixed = estimate_tokens([self.prompt_builder.build(sess)]) + estimate_tool_tokens(
            self.registry.definitions()
        )
        if self.policy.count.count(size + fixed) <= window:  # as the server counts it
            return None
        what = "the server refused it and it was not kept" if sent else "nothing was sent"
        return (
            f"this message is about {format_token_count(size)} tokens and can never fit the "
            f"{format_token_count(window)}-token context window; {what} "
            "(save it to a file in the working directory and ask the agent to read it)"
        )

    def _record_usage(self, request: Request, usage: Usage, result: TurnResult) -> None:
        self.last_usage = result.usage = usage
        # An estimate in the server's place neither calibrates the counter nor replaces
        # the "~" figure already shown.
        if usage.input_tokens > 0 and not usage.input_estimated:
            self.policy.observe_usage(request, usage.input_tokens)
            self.on_event(
                ev.TokenUpdate(usage.input_tokens, self.policy.context_window, actual=True)
            )

    def _run_next(
        self, sess: CheckpointedSession, pending: list[ToolCall], tools_used: list[str]
    ) -> None:
        """Run the next pending call (or the next run of `task` calls, side by side), save
        the results in call order and take them off ``pending``.

        Ctrl-C during `task` calls still saves one result for each of them (what each
        sub-agent had), then stops the turn."""
        batch = self._task_run(pending)
        if not batch:
            call = pending[0]
            result, link = self._run_tool(sess, call)
            sess.add_messages([result], [link])
            pending.pop(0)
            tools_used.append(call.name)
            return
        contents, interrupted = run_side_by_side(
            batch,
            lambda call, stop: self._execute(sess, call, stop),
            limit=self.options.parallel_tasks,
            on_start=lambda call: self.on_event(ev.ToolStarted(call)),
            stopped=self._stopped_task,
        )
        results = [
            self._finish_tool(sess, call, outcome)
            for call, outcome in zip(batch, contents, strict=True)
        ]
        sess.add_messages([m for m, _ in results], [link for _, link in results])
        del pending[: len(batch)]
        tools_used.extend(call.name for call in batch)
        if interrupted:
            raise KeyboardInterrupt

    def _task_run(self, pending: list[ToolCall]) -> list[ToolCall]:
        """The `task` calls at the head of ``pending`` (they run side by side)."""
        if not isinstance(self.registry.get(TASK_TOOL), TaskTool):
            return []
        n = 0
        while n < len(pending) and pending[n].name == TASK_TOOL:
            n += 1
        return pending[:n]

    def _stopped_task(self, call: ToolCall) -> ToolResult:
        tool = self.registry.get(TASK_TOOL)
        text = tool.stopped_result(call.id) if isinstance(tool, TaskTool) else INTERRUPTED_STUB
        return ToolResult(text)

    def _run_tool(
        self, sess: CheckpointedSession, call: ToolCall
    ) -> tuple[Message, OffloadLink | None]:
        self.on_event(ev.ToolStarted(call))
        return self._finish_tool(sess, call, self._execute(sess, call, None))

    def _execute(
        self, sess: CheckpointedSession, call: ToolCall, stop: threading.Event | None
    ) -> ToolResult:
        """Run one call (safe in a worker thread: it emits nothing of its own)."""
        opts, store = self.options, self.offload
        opener = None if store is None else partial(store.open_stream, sess.session_id)
        ctx = ToolContext(
            workdir=self.workdir,
            session=sess,
            confirm=opts.confirm,
            assume_yes=opts.assume_yes,
            auto_approve=opts.auto_approve,
            session_id=sess.session_id,
            open_output=opener,
            on_output=self._output_watcher(call),
            tool_call_id=call.id,
            stop=stop,
        )
        return self.registry.execute(call, ctx)

    def _finish_tool(
        self, sess: CheckpointedSession, call: ToolCall, outcome: ToolResult
    ) -> tuple[Message, OffloadLink | None]:
        """The result as stored, and the offload it summarises: offloaded when big (unless
        the tool is exempt or offloaded it itself). The run's facts (a command's exit code)
        are stored with it as data, so later readers never parse them from its text."""
        content, link = outcome.content, outcome.offloaded
        if outcome.may_offload and self.offload is not None:
            content, link = self.offload.offload_result(
                sess.session_id, call.name, call.arguments, content, metadata=outcome.metadata
            )
        code = outcome.metadata.get("exit_code")
        exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
        self.on_event(ev.ToolFinished(call, content, outcome.is_error, exit_code, link))
        kept = result_metadata(outcome.metadata)
        return Message(ROLE_TOOL, content, tool_call_id=call.id, metadata=kept), link


def _nothing(reply: Message) -> bool:
    """A reply with no text and no tool call."""
    return not reply.content.strip() and not reply.tool_calls
