"""Sub-agents: the `task` tool's runs, each a child session with its own context.

A sub-agent is an ``AgentEngine`` of its own: a fresh session in the store (linked to
the parent session and its tool call), its own context policy (so it compacts by
itself), the sub-agent system prompt (harness9/prompts/subagent.txt), the parent's tools minus
`task`, the same working directory and approvals. It runs one turn, the job, to its
final reply; that reply is the `task` result. Its bounds (model calls, tokens, wall
time) are checked before each of its model calls by ``BoundedProvider``: a run that
reaches one, fails or is stopped returns what it has, with the reason.

Its events reach the parent's sink wrapped in ``SubAgentActivity`` (the UI draws
its line from them and records its usage against the child session); they come
from the worker thread the parent engine runs the `task` call in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from harness9.engine import events as ev
from harness9.prompts import prompt
from harness9.provider.errors import ProviderError
from harness9.request import Request
from harness9.schema import ROLE_ASSISTANT, Message, Usage
from harness9.store.session import ChatSession, SessionInfo, SubAgentLink
from harness9.tools.base import ToolContext, ToolResult

if TYPE_CHECKING:
    from harness9.engine.engine import AgentEngine, ModelProvider, TurnResult

__all__ = [
    "BoundedProvider",
    "Bounds",
    "ChildSessions",
    "SubAgentRunner",
    "SubAgentStopped",
    "subagent_prompt",
]

TRAIL_SHOWN = 12  # tool calls a partial result lists


def subagent_prompt() -> str:
    """The sub-agent's system prompt (harness9/prompts/subagent.txt)."""
    return prompt("subagent").strip()


class SubAgentStopped(ProviderError):
    """A sub-agent reached one of its bounds, or its parent's turn was stopped."""


@dataclass(slots=True, frozen=True)
class Bounds:
    max_model_calls: int = 30
    max_tokens: int = 1_000_000  # input + output tokens, summed over its calls
    max_seconds: float = 600.0


class BoundedProvider:
    """The model, called only while the run is within its bounds and not stopped."""

    def __init__(
        self,
        inner: ModelProvider,
        bounds: Bounds,
        stop: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.model = inner.model
        self.bounds = bounds
        self.stop = stop
        self.clock = clock
        self.started = clock()
        self.calls = 0
        self.tokens = 0

    def check(self) -> None:
        """SubAgentStopped naming the bound reached (or the stop), else nothing."""
        b = self.bounds
        if self.stop is not None and self.stop.is_set():
            raise SubAgentStopped("stopped: its parent's turn was interrupted")
        if self.calls >= b.max_model_calls:
            raise SubAgentStopped(f"stopped at its bound of {b.max_model_calls} model calls")
        if self.tokens >= b.max_tokens:
            raise SubAgentStopped(
                f"stopped at its bound of {b.max_tokens} tokens ({self.tokens} used)"
            )
        elapsed = self.clock() - self.started
        if elapsed >= b.max_seconds:
            raise SubAgentStopped(
                f"stopped at its bound of {b.max_seconds:g} s of wall time ({elapsed:.0f} s)"
            )

    def send(
        self, request: Request, *, stream: bool = False, on_delta: Any = None
    ) -> tuple[Message, Usage | None]:
        """The sub-agent's request, sent unchanged while the run is within its bounds."""
        self.check()
        reply, usage = self.inner.send(request, stream=stream, on_delta=on_delta)
        self.calls += 1
        if usage is not None:
            self.tokens += usage.input_tokens + usage.output_tokens
        return reply, usage


class ChildSessions(Protocol):
    """Where sub-agents' sessions are created and found (the session store's manager)."""

    def new_child_session(
        self, parent_id: str, tool_call_id: str, description: str = ""
    ) -> ChatSession: ...

    def open_session(self, session_id: str) -> ChatSession: ...

    def children(self, session_id: str) -> list[tuple[SubAgentLink, SessionInfo]]: ...


# Builds a sub-agent's engine: (its session, its bounded model, its depth) -> engine.
Spawn = Callable[[ChatSession, "ModelProvider", int], "AgentEngine"]


@dataclass(slots=True)
class _Run:
    """What one running sub-agent has done so far (a stopped run's partial result)."""

    session_id: str
    description: str
    trail: list[str] = field(default_factory=list)
    last_text: str = ""


class SubAgentRunner:
    """Runs `task` calls (harness9.tools.task.SubAgentRunner)."""

    def __init__(
        self,
        spawn: Spawn,
        sessions: ChildSessions,
        make_provider: Callable[[], ModelProvider],
        bounds: Bounds,
        *,
        depth: int = 1,
        on_event: ev.EventSink = ev.discard,
    ) -> None:
        self.spawn = spawn
        self.sessions = sessions
        self.make_provider = make_provider
        self.bounds = bounds
        self.depth = depth  # the depth of the agents this runner starts (1: the parent's)
        self.on_event = on_event
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}

    def run_task(self, prompt: str, description: str, ctx: ToolContext) -> ToolResult:
        child = self.sessions.new_child_session(ctx.session_id, ctx.tool_call_id, description)
        call_id, child_id = ctx.tool_call_id, child.session_id
        run = _Run(child_id, description)
        with self._lock:
            self._runs[call_id] = run
        provider = BoundedProvider(self.make_provider(), self.bounds, ctx.stop)
        engine = self.spawn(child, provider, self.depth)
        emit = self.on_event

        def forward(event: ev.Event) -> None:
            match event:
                case ev.ToolStarted(call=c):
                    run.trail.append(_call_label(c.name, c.arguments))
                case ev.AssistantReply(message=m) if m.content.strip():
                    run.last_text = m.content.strip()
            emit(ev.SubAgentActivity(call_id, child_id, event))

        engine.on_event = forward
        emit(ev.SubAgentStarted(call_id, child_id, description))
        started = time.monotonic()
        outcome = "failed"
        try:
            result = engine.run_turn(prompt)
            content, outcome = _result_text(result, run)
        finally:
            engine.policy.cancel_prepared(wait=True)  # its session goes no further
            engine.flush_held()
            with self._lock:
                self._runs.pop(call_id, None)
            emit(
                ev.SubAgentFinished(
                    call_id, child_id, description, outcome, time.monotonic() - started
                )
            )
        return ToolResult(content, metadata={"subagent_session": child_id, "outcome": outcome})

    def stopped_result(self, call_id: str) -> str:
        """The result of a run its parent stopped waiting for (Ctrl-C): what it had."""
        with self._lock:
            run = self._runs.get(call_id)
        if run is None:
            return STOPPED_BEFORE_START
        return partial_text("stopped: its parent's turn was interrupted", run)


STOPPED_BEFORE_START = "[sub-agent stopped: its parent's turn was interrupted before it started]"


def _result_text(result: TurnResult, run: _Run) -> tuple[str, str]:
    """(the `task` result, its outcome: "done" or "stopped")."""
    reply = result.reply
    finished = (
        not result.interrupted
        and result.error is None
        and reply is not None
        and reply.role == ROLE_ASSISTANT
        and not reply.tool_calls
    )
    if finished and reply is not None:
        return reply.content, "done"
    reason = result.error or "stopped: it was interrupted"
    return partial_text(reason, run), "stopped"


def partial_text(reason: str, run: _Run) -> str:
    """A run that did not finish: the reason, its last words, what it ran, where it is."""
    lines = [f"[sub-agent did not finish: {reason}]"]
    if run.last_text:
        lines += ["Its last reply before it stopped:", run.last_text]
    else:
        lines.append("It wrote no reply before it stopped.")
    if run.trail:
        shown = run.trail[-TRAIL_SHOWN:]
        more = len(run.trail) - len(shown)
        head = f"It ran {len(run.trail)} tool calls" + (f" (the last {len(shown)})" if more else "")
        lines += [head + ":", *(f"- {c}" for c in shown)]
    lines.append(f"Its whole conversation is session {run.session_id}.")
    return "\n".join(lines)


def _call_label(name: str, arguments: str) -> str:
    """``read_file src/a.py``: a tool call in a few words (its first string argument)."""
    import json

    try:
        args = json.loads(arguments) if arguments else {}
    except ValueError:
        args = {}
    first = (
        next((v for v in args.values() if isinstance(v, str)), "") if isinstance(args, dict) else ""
    )
    first = " ".join(first.split())
    return f"{name} {first[:60]}".strip()
