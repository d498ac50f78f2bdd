"""Temporary stand-ins for shared compaction pieces written in parallel.

``CompactionPlan``/``CompactionResult`` belong in ``memory/compaction.py``,
``find_cut`` there too and ``repair_orphaned_tool_pairs`` in ``memory/repair.py``.
Until those land, the phase-2 modules import these private copies; on merge
the imports switch over and this file goes away.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from harness9.schema import ROLE_TOOL, TRUNCATED_STUB, Message, ToolDefinition, Usage


@dataclass(slots=True)
class CompactionPlan:
    would_compact: bool
    strategy: str
    cut: int
    tokens_before: int
    tokens_after: int
    threshold: int


@dataclass(slots=True)
class CompactionResult:
    messages: list[Message]
    plan: CompactionPlan
    summary: str | None
    strategy: str
    error: str | None = None


class Summarizer(Protocol):
    """Anything that turns messages into one reply (provider.llm satisfies it)."""

    def generate(
        self, messages: list[Message], tools: list[ToolDefinition]
    ) -> tuple[Message, Usage | None]: ...


def _find_cut(msgs: list[Message], tail_len: int) -> int:
    """Index where the verbatim tail starts: ``msgs[1:cut]`` is folded.

    The seed's head/tail split (``tail = msgs[N-minTail:]``), moved back while the
    tail would open with a tool result, so a call and its results stay together.
    """
    cut = max(1, len(msgs) - max(tail_len, 0))
    while cut > 1 and msgs[cut].role == ROLE_TOOL:
        cut -= 1
    return cut


def _repair(msgs: list[Message]) -> list[Message]:
    """The seed's two-way repair: drop results with no call, stub calls with no result."""
    call_ids = {tc.id for m in msgs for tc in m.tool_calls}
    result_ids = {m.tool_call_id for m in msgs if m.role == ROLE_TOOL and m.tool_call_id}
    out: list[Message] = []
    for m in msgs:
        if m.role == ROLE_TOOL and m.tool_call_id not in call_ids:
            continue
        out.append(m)
        for tc in m.tool_calls:
            if tc.id not in result_ids:
                out.append(Message(ROLE_TOOL, TRUNCATED_STUB, tool_call_id=tc.id))
    return out
