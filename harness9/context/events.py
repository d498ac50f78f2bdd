"""The context events the UI shows (compaction started, progress, result; notices): here,
not in the engine, so the policy emits them without importing it."""

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
class Compaction:
    """A compaction that cut the context by more than 5 %."""

    tokens_before: int
    tokens_after: int
    msgs_before: int
    msgs_after: int
    strategy: str
    fallback_reason: str | None = None
    # Seconds the turn waited for a summary prepared in the background (None: not one).
    waited: float | None = None


@dataclass(slots=True)
class Notice:
    """Something the user should know that is not an error (e.g. an offloaded result)."""

    text: str


@dataclass(slots=True)
class SummaryPreparing:
    """A summary is being prepared in the background (``active``), or no longer is."""

    active: bool


ContextEvent = CompactionStarted | CompactionProgress | Compaction | Notice | SummaryPreparing
ContextEventSink = Callable[[ContextEvent], None]


def discard(_event: ContextEvent) -> None:
    """The sink used when nobody listens."""
