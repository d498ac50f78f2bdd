"""Compaction summaries are model calls too: their usage reaches the session's accounting.

The context layer calls its summariser through the plain ``Summarizer`` seam and
never sees usage events; the engine hands it a ``MeteredSummarizer`` instead of
the provider, which reports each call's usage as ``ModelUsage(summary=True)``
(the same event a reply's usage travels as), so tokens and cost include them.
``record_usage`` is the one way such an event is priced and stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from harness9.engine import events as ev
from harness9.schema import Message, ToolDefinition, Usage
from harness9.store.backend import UsageStore

__all__ = ["MeteredSummarizer", "UsageStore", "record_usage"]


class NamedSummarizer(Protocol):
    model: str

    def generate(
        self, messages: list[Message], tools: list[ToolDefinition]
    ) -> tuple[Message, Usage | None]: ...


class MeteredSummarizer:
    """``inner``'s answers, unchanged; each call's usage goes to ``report`` first."""

    def __init__(self, inner: NamedSummarizer, report: Callable[[ev.ModelUsage], None]) -> None:
        self.inner = inner
        self.report = report

    @property
    def model(self) -> str:
        return self.inner.model

    def generate(
        self, messages: list[Message], tools: list[ToolDefinition]
    ) -> tuple[Message, Usage | None]:
        reply, usage = self.inner.generate(messages, tools)
        if usage is not None:
            self.report(ev.ModelUsage(self.inner.model, usage, summary=True))
        return reply, usage


def record_usage(
    store: UsageStore,
    session_id: str,
    used: ev.ModelUsage,
    pricing: Callable[[str, Usage], float | None] | None,
) -> None:
    """Add one call's usage, priced by ``pricing`` (None: costs not tracked), to the session."""
    usage = used.usage
    store.add_usage(
        session_id,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_tokens=usage.cached_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost_usd=pricing(used.model, usage) if pricing is not None else None,
        summary=used.summary,
    )
