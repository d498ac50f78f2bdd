"""What a compaction tells the user: the events the context policy and the engine's summaries
prepared ahead emit, and the UI shows (harness9.engine.events re-exports them beside the
engine's own). A bottom-layer module: both emitters import it, neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class CompactionStarted:
    strategy: str
    tokens_before: int


@dataclass(slots=True)
class CompactionProgress:
    chunk: int
    total: int


@dataclass(slots=True)
class Compaction:  # a compaction that cut the context by more than 5 %
    tokens_before: int
    tokens_after: int
    msgs_before: int
    msgs_after: int
    strategy: str
    fallback_reason: str | None = None
    waited: float | None = None  # seconds the turn waited for a prepared summary


@dataclass(slots=True)
class Notice:  # something the user should know that is not an error
    text: str


@dataclass(slots=True)
class SummaryPreparing:
    active: bool  # a summary is being prepared in the background, or no longer is


ContextEvent = CompactionStarted | CompactionProgress | Compaction | Notice | SummaryPreparing
ContextEventSink = Callable[[ContextEvent], None]


def discard(_event: ContextEvent) -> None:
    """The sink used when nobody listens."""
