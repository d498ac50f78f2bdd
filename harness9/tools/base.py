"""The records every tool shares: its result, the context it runs in, and the Tool seam."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness9.schema import ToolDefinition
from harness9.store.session import OffloadLink, Session


@dataclass(slots=True)
class ToolResult:
    content: str
    is_error: bool = False
    # Facts about the run for later consumers (the offload summariser), e.g.
    # {"exit_code": 0} for bash or {"path": ..., "total_lines": N} for read_file.
    metadata: dict[str, Any] = field(default_factory=dict)
    # False: the result reaches the model as it is, never offloaded (it is already a
    # bounded page of a stored result, as offload_recall's and history_search's are).
    offload: bool = True
    # The offload ``content`` summarises, when the tool wrote its output there itself
    # (a streamed bash output): the log records it with the result.
    offloaded: OffloadLink | None = None

    @property
    def may_offload(self) -> bool:
        """Whether the engine may offload it: allowed, not an error, and not
        already offloaded by the tool itself."""
        return self.offload and not self.is_error and self.offloaded is None

    @classmethod
    def error(cls, message: str, **metadata: Any) -> ToolResult:
        """An error result as the model sees it: one line starting with ``error:``."""
        return cls(content=f"error: {message}", is_error=True, metadata=dict(metadata))


@dataclass(slots=True, frozen=True)
class Approval:
    """What a tool asks the user before acting: run this command, write this file."""

    tool: str  # "bash", "write_file" or "edit_file"
    subject: str  # the command, or the path relative to the working directory
    question: str  # one line, e.g. "Run: ls -la?"
    preview: str = ""  # plain text shown before the question (a unified diff, a file's head)


@dataclass(slots=True, frozen=True)
class Declined:
    """A "no" that carries the user's reason to the model ("n, use the staging config")."""

    reason: str = ""

    def __bool__(self) -> bool:
        return False


# What a confirm callback answers: True (go ahead), False or Declined (do not).
ApprovalAnswer = bool | Declined


def declined(message: str, answer: ApprovalAnswer) -> str:
    """The tool result for a declined action: ``message``, and the user's reason if given."""
    if isinstance(answer, Declined) and answer.reason:
        return f"{message}; the user said: {answer.reason}"
    return message


# What the model is told of a call the user stopped the turn at instead of answering.
NOT_RUN = "[not run: the user stopped the turn when asked to approve this call]"


class ToolInterrupted(KeyboardInterrupt):
    """Ctrl-C while a tool was asked about or ran: the turn stops as on any Ctrl-C, and
    ``result`` is what the model is told of this call (it was never run, or the output
    the command had printed when it was stopped)."""

    def __init__(self, result: str, *, ran: bool) -> None:
        super().__init__(result)
        self.result = result
        self.ran = ran


def refusal(
    ctx: ToolContext, approval: Callable[[], Approval], *, refused: str, declined_as: str
) -> str | None:
    """Why an action that needs the user's approval may not go ahead, None when it may:
    ``refused`` with nobody to ask, ``declined_as`` (with their reason) when they say no.
    ``approval`` is made only when there is someone to ask (a diff costs reading a file).
    Ctrl-C at the question stops the turn with ``ToolInterrupted`` (``NOT_RUN``)."""
    if ctx.confirm is None:
        return refused
    try:
        answer = ctx.confirm(approval())
    except ToolInterrupted:
        raise
    except KeyboardInterrupt as exc:
        raise ToolInterrupted(NOT_RUN, ran=False) from exc
    return None if answer else declined(declined_as, answer)


@dataclass(slots=True)
class ToolContext:
    workdir: Path  # resolved absolute working directory
    session: Session | None  # None: todos are unavailable (the todo tools return an error)
    # Asks the user to approve an action (the REPL on a TTY); None means no TTY is available.
    confirm: Callable[[Approval], ApprovalAnswer] | None = None
    assume_yes: bool = False  # --yes
    # Shell commands that never need asking (config: tools.auto_approve), e.g. "git status".
    auto_approve: tuple[str, ...] = ()
    session_id: str = ""
    # Opens a sink for a tool's full output (the offload store's stream writer): a tool
    # with huge output writes it there as it comes instead of holding it. None: no sink.
    open_output: Callable[[str, str], OutputSink] | None = None
    # Shows a running command's output as it comes (the REPL's live view): called with b""
    # once the command has started, then with each chunk read. None: nobody is watching.
    on_output: Callable[[bytes], None] | None = None
    # The id of the call being run (the `task` tool records it in the sub-agent's session).
    tool_call_id: str = ""
    # Set when the user stopped the turn (Ctrl-C) while this call runs in a worker thread:
    # a long tool (a sub-agent) checks it and returns what it has. None: never stopped.
    stop: threading.Event | None = None


class OutputSink(Protocol):
    """Where a tool streams its whole output (harness9.tools.offload.OffloadWriter)."""

    @property
    def over_limits(self) -> bool: ...

    def write(self, chunk: bytes) -> None: ...

    def abort(self) -> None: ...

    def finish(self, *, metadata: dict | None = None) -> Any: ...


class ToolError(Exception):
    """An expected failure a tool reports to the model; becomes ``error: <message>``."""


class Tool(Protocol):
    name: str

    def definition(self) -> ToolDefinition: ...

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult: ...


class ToolSource(Protocol):
    """Tools that come and go with something outside harness9 (MCP servers): the registry
    asks it for the definitions of every request and for a tool by name."""

    def definitions(self) -> list[ToolDefinition]: ...

    def get(self, name: str) -> Tool | None: ...
