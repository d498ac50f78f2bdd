"""Truncating compactors (seed §6.2, §6.3) and the rules every compactor shares.

Shared rules:
- the input's first message must be the system message, otherwise the input
  is returned unchanged (the seed's defensive check);
- a cut never separates tool results from the assistant message that called
  them (``find_cut``): where the kept part would begin with results, it is
  extended back over them to include the call;
- the output is repaired (``repair_orphaned_tool_pairs``), so it is always a
  valid tool sequence, whether or not anything was folded.

Every compactor offers ``plan`` (pure, no model call: what ``compact
--dry-run`` shows), ``compact_detailed`` and ``compact``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from harness9.memory.repair import (
    is_valid_tool_sequence,
    match_tool_results,
    repair_orphaned_tool_pairs,
)
from harness9.memory.tokens import BYTES_PER_TOKEN, estimate_tokens, message_bytes
from harness9.schema import ROLE_ASSISTANT, ROLE_SYSTEM, ROLE_TOOL, TRUNCATED_STUB, Message

__all__ = [
    "DEFAULT_MIN_TAIL",
    "CompactionPlan",
    "CompactionResult",
    "Compactor",
    "SlidingWindowCompactor",
    "TokenBudgetCompactor",
    "find_cut",
    "is_valid_tool_sequence",
]

DEFAULT_MIN_TAIL = 6
BUDGET_PERCENT = (
    80  # of the context window; the rest is for tool schemas, output and estimate error
)


@runtime_checkable
class Compactor(Protocol):
    def compact(self, msgs: list[Message]) -> list[Message]: ...


@dataclass(slots=True)
class CompactionPlan:
    would_compact: bool
    strategy: str  # "summarize" | "budget" | "window"
    cut: (
        int  # msgs[1:cut] are folded/dropped, msgs[cut:] kept (before repair); 1 when nothing folds
    )
    tokens_before: int  # estimate_tokens(msgs)
    tokens_after: int  # estimate of the result (budget/window: exact; summarize: see there)
    threshold: int  # the max_tokens budget (window: the max_messages budget)


@dataclass(slots=True)
class CompactionResult:
    messages: list[Message]  # the new view, repaired
    plan: CompactionPlan
    summary: str | None  # summary text without SUMMARY_PREFIX when one was produced
    strategy: str  # what actually ran ("budget" when summarize fell back)
    error: str | None = None  # why a fallback happened, if it did


def starts_with_system(msgs: Sequence[Message]) -> bool:
    return bool(msgs) and msgs[0].role == ROLE_SYSTEM


def find_cut(msgs: Sequence[Message], tail_len: int) -> int:
    """Index where the kept part begins when keeping the newest ``tail_len`` messages.

    ``msgs[0]`` is the system message and is never part of the cut range, so
    the result is at least 1. When ``msgs[cut]`` is a tool result, the cut
    moves back over the contiguous results to the assistant message just
    before them if that message made calls (the seed's backtrack of §6.3);
    results whose call is not adjacent are left for the repair to drop.
    """
    n = len(msgs)
    cut = max(1, n - max(tail_len, 0))
    if cut >= n or msgs[cut].role != ROLE_TOOL:
        return cut
    first = cut
    while first > 1 and msgs[first - 1].role == ROLE_TOOL:
        first -= 1
    caller = first - 1
    if caller >= 1 and msgs[caller].role == ROLE_ASSISTANT and msgs[caller].tool_calls:
        return caller
    return cut


class KeptSizer:
    """Exact token estimate of ``repair([msgs[0]] + msgs[cut:])`` for any cut, in O(1).

    Built in one linear pass: each message's bytes, plus the stubs the repair
    will add to its unanswered calls, minus results the repair drops anyway.
    A result whose call lies before the cut is dropped only for cuts between
    the two, which a difference array accounts for. This replaces re-estimating
    the candidate tail at every step of the search.
    """

    __slots__ = ("_straddle", "_suffix", "_system_bytes")

    def __init__(self, msgs: Sequence[Message]) -> None:
        n = len(msgs)
        answers = match_tool_results(msgs)
        stub_bytes = len(TRUNCATED_STUB.encode("utf-8"))
        eff = [0] * n
        diff = [0] * (n + 2)
        for i, msg in enumerate(msgs):
            if msg.role == ROLE_TOOL:
                continue  # counted with its owner below; unanswerable results count 0
            eff[i] = message_bytes(msg)
            for pos, r in enumerate(answers[i]):
                if r < 0:
                    call_id = msg.tool_calls[pos].id
                    eff[i] += stub_bytes + len(call_id.encode("utf-8", "surrogatepass"))
                else:
                    b = message_bytes(msgs[r])
                    eff[r] = b
                    # For i < cut <= r the owner is folded and the result dropped.
                    diff[i + 1] += b
                    diff[r + 1] -= b
        suffix = [0] * (n + 1)
        for i in range(n - 1, -1, -1):
            suffix[i] = suffix[i + 1] + eff[i]
        straddle = [0] * (n + 1)
        running = 0
        for c in range(n + 1):
            running += diff[c]
            straddle[c] = running
        self._suffix = suffix
        self._straddle = straddle
        self._system_bytes = message_bytes(msgs[0]) if n else 0

    def kept_bytes(self, cut: int) -> int:
        return self._system_bytes + self._suffix[cut] - self._straddle[cut]

    def kept_tokens(self, cut: int) -> int:
        return self.kept_bytes(cut) // BYTES_PER_TOKEN


def unchanged_plan(strategy: str, msgs: Sequence[Message], threshold: int) -> CompactionPlan:
    tokens = estimate_tokens(msgs)
    return CompactionPlan(False, strategy, 1, tokens, tokens, threshold)


def truncate(msgs: Sequence[Message], plan: CompactionPlan) -> CompactionResult:
    """Apply a truncating plan: keep the system message and ``msgs[cut:]``, repaired."""
    if not starts_with_system(msgs):
        return CompactionResult(list(msgs), plan, None, plan.strategy)
    kept = [msgs[0], *msgs[plan.cut :]] if plan.would_compact else msgs
    return CompactionResult(repair_orphaned_tool_pairs(kept), plan, None, plan.strategy)


class TokenBudgetCompactor:
    """Keep the largest newest suffix (at least ``min_tail_messages``) that fits ``max_tokens``."""

    strategy = "budget"

    def __init__(self, max_tokens: int, min_tail_messages: int = DEFAULT_MIN_TAIL) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        if min_tail_messages < 0:
            raise ValueError(f"min_tail_messages must be >= 0, got {min_tail_messages}")
        self.max_tokens = max_tokens
        self.min_tail_messages = min_tail_messages

    @classmethod
    def for_context_window(cls, context_window: int) -> TokenBudgetCompactor:
        return cls(context_window * BUDGET_PERCENT // 100)

    def plan(self, msgs: Sequence[Message], *, force: bool = False) -> CompactionPlan:
        if not starts_with_system(msgs):
            return unchanged_plan(self.strategy, msgs, self.max_tokens)
        before = estimate_tokens(msgs)
        sizer = KeptSizer(msgs)
        nothing = CompactionPlan(
            False, self.strategy, 1, before, sizer.kept_tokens(1), self.max_tokens
        )
        non_system = len(msgs) - 1
        if non_system <= self.min_tail_messages:
            return nothing  # the protected tail is all there is
        if not force and nothing.tokens_after <= self.max_tokens:
            # Measured on the repaired history: that is what would be sent.
            return nothing
        target = min(self.max_tokens, before // 2) if force else self.max_tokens
        # kept_tokens(find_cut(t)) never decreases as t grows, so bisect on t.
        lo, hi, best = self.min_tail_messages, non_system, self.min_tail_messages
        while lo <= hi:
            mid = (lo + hi) // 2
            if sizer.kept_tokens(find_cut(msgs, mid)) <= target:
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        cut = find_cut(msgs, best)
        if cut <= 1:
            return nothing
        return CompactionPlan(
            True, self.strategy, cut, before, sizer.kept_tokens(cut), self.max_tokens
        )

    def compact_detailed(self, msgs: list[Message], *, force: bool = False) -> CompactionResult:
        return truncate(msgs, self.plan(msgs, force=force))

    def compact(self, msgs: list[Message]) -> list[Message]:
        return self.compact_detailed(msgs).messages


class SlidingWindowCompactor:
    """Keep the system message and the newest ``max_messages - 1`` messages (seed §6.3).

    Blind to tokens; the cut rule may keep a few more messages so that a
    block of results keeps its call. ``min_tail_messages`` only matters for
    ``force``: a forced compaction keeps max(min tail, half the history),
    never more than the window.
    """

    strategy = "window"

    def __init__(
        self, max_messages: int = 100, *, min_tail_messages: int = DEFAULT_MIN_TAIL
    ) -> None:
        if max_messages < 1:
            raise ValueError(f"max_messages must be >= 1 (the system message), got {max_messages}")
        self.max_messages = max_messages
        self.min_tail_messages = min_tail_messages

    def plan(self, msgs: Sequence[Message], *, force: bool = False) -> CompactionPlan:
        if not starts_with_system(msgs):
            return unchanged_plan(self.strategy, msgs, self.max_messages)
        before = estimate_tokens(msgs)
        sizer = KeptSizer(msgs)
        tail = self.max_messages - 1
        if force:
            tail = min(tail, max(self.min_tail_messages, len(msgs) // 2))
        elif len(msgs) <= self.max_messages:
            tail = len(msgs)
        cut = find_cut(msgs, tail)
        return CompactionPlan(
            cut > 1, self.strategy, cut, before, sizer.kept_tokens(cut), self.max_messages
        )

    def compact_detailed(self, msgs: list[Message], *, force: bool = False) -> CompactionResult:
        return truncate(msgs, self.plan(msgs, force=force))

    def compact(self, msgs: list[Message]) -> list[Message]:
        return self.compact_detailed(msgs).messages
