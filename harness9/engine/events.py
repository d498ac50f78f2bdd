"""What the engine tells the UI. The engine never prints; it emits these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness9.context_events import (
    Compaction,
    CompactionProgress,
    CompactionStarted,
    Notice,
    SummaryPreparing,
)
from harness9.schema import Message, ToolCall, Usage
from harness9.store.session import OffloadLink

__all__ = [
    "AssistantReply",
    "Compaction",
    "CompactionProgress",
    "CompactionStarted",
    "Error",
    "Event",
    "EventSink",
    "ModelUsage",
    "Notice",
    "Retrying",
    "SubAgentActivity",
    "SubAgentAsking",
    "SubAgentFinished",
    "SubAgentStarted",
    "SummaryPreparing",
    "TextDelta",
    "TokenUpdate",
    "ToolFinished",
    "ToolOutput",
    "ToolStarted",
    "discard",
]


@dataclass(slots=True)
class TokenUpdate:
    """Context size before a model call (estimate) and after it (the API's input tokens)."""

    tokens: int
    context_window: int
    actual: bool = False


@dataclass(slots=True)
class ModelUsage:
    """What one model call consumed, as the server reported it.

    ``summary``: the call wrote a compaction summary (billed like any call, and
    counted apart so the user sees what compaction cost)."""

    model: str
    usage: Usage
    summary: bool = False


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class AssistantReply:
    """A complete model reply, already saved."""

    message: Message


@dataclass(slots=True)
class ToolStarted:
    call: ToolCall


@dataclass(slots=True)
class ToolOutput:
    """A running tool's output as it comes ("" once it has started): for a live view only;
    what the model sees is the ToolFinished content."""

    call: ToolCall
    text: str


@dataclass(slots=True)
class ToolFinished:
    call: ToolCall
    content: str
    is_error: bool
    # The exit status of the command the tool ran (bash), None for other tools: a command
    # that failed is shown as failed even though its output is a normal result.
    exit_code: int | None = None
    # Where the whole output is when ``content`` is its offload's summary (/last shows it).
    offload: OffloadLink | None = None


@dataclass(slots=True)
class SubAgentStarted:
    """A `task` call's sub-agent started, in session ``session_id``."""

    call_id: str
    session_id: str
    description: str


@dataclass(slots=True)
class SubAgentActivity:
    """An event of a running sub-agent's own engine (sent from its worker thread)."""

    call_id: str
    session_id: str
    event: Event


@dataclass(slots=True)
class SubAgentFinished:
    """A sub-agent's run ended: ``outcome`` is "done", "stopped" or "failed"."""

    call_id: str
    session_id: str
    description: str
    outcome: str
    elapsed: float


@dataclass(slots=True)
class SubAgentAsking:
    """A sub-agent's tool asks the user (``asking``) or has its answer: live lines pause."""

    asking: bool


@dataclass(slots=True)
class Retrying:
    attempt: int
    delay: float
    reason: str


@dataclass(slots=True)
class Error:
    message: str


Event = (
    TokenUpdate
    | ModelUsage
    | CompactionStarted
    | CompactionProgress
    | Compaction
    | TextDelta
    | AssistantReply
    | ToolStarted
    | ToolOutput
    | ToolFinished
    | Retrying
    | Notice
    | SummaryPreparing
    | Error
    | SubAgentStarted
    | SubAgentActivity
    | SubAgentFinished
    | SubAgentAsking
)
EventSink = Callable[[Event], None]


def discard(_event: Event) -> None:
    """The sink used when nobody listens."""
