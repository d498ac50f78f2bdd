"""The Compactor seam, its plan and result, and the cut rule every compactor shares: a cut
never separates tool results from the call they answer. The implementation: pipeline.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Protocol, runtime_checkable

from harness9.context.repair import match_tool_results
from harness9.schema import ROLE_ASSISTANT, ROLE_SYSTEM, ROLE_TOOL, TRUNCATED_STUB, Message
from harness9.tokens import BYTES_PER_TOKEN

# (call number, calls expected so far): a summariser working through chunks reports progress.
ProgressCallback = Callable[[int, int], None]


@dataclass(slots=True)
class CompactionPlan:
    would_compact: bool
    strategy: str
    cut: int  # msgs[1:cut] are folded/dropped, msgs[cut:] kept (before repair); 1: nothing folds
    tokens_before: int  # estimate_tokens(msgs)
    tokens_after: int  # estimate of the result (a summary's size is estimated by ``plan``)
    threshold: int  # the compactor's threshold_tokens
    # It would fold ``msgs[1:cut]`` down to ``tokens_after`` but save too little to be worth
    # it (the policy's rule): ``would_compact`` is then False, and nothing is made.
    too_small: bool = False


@dataclass(slots=True)
class CompactionResult:
    messages: list[Message]  # the new view, repaired
    plan: CompactionPlan
    summary: str | None  # summary text without SUMMARY_PREFIX when one was produced
    strategy: str  # what actually ran ("budget" when summarize fell back)
    error: str | None = None  # why a fallback happened, if it did
    # The earlier summary at msgs[1] is kept as it was (a fallback after a failed summary).
    kept_previous_summary: bool = False
    # A summary was made but not used, its result larger than its input: that result, for
    # a caller that cuts further anyway and keeps what was paid for.
    declined: CompactionResult | None = None


@runtime_checkable
class Compactor(Protocol):
    """The one compaction seam; pure: the input is never mutated.

    ``threshold_tokens``: the estimate over which ``plan`` compacts unforced (0: triggered
    otherwise, as topic isolation is). ``plan``: what ``compact`` would fold, no model call.
    ``compact``: ``instructions`` focus a summary (``/compact <focus>``), ``on_progress``
    hears each summariser call (a compactor calling no model ignores both). An input not
    starting with the system message is returned unchanged; otherwise the output is repaired.
    """

    @property
    def strategy(self) -> str: ...

    @property
    def threshold_tokens(self) -> int: ...

    def plan(self, msgs: Sequence[Message], *, force: bool = False) -> CompactionPlan: ...

    def compact(
        self,
        msgs: Sequence[Message],
        *,
        force: bool = False,
        instructions: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> CompactionResult: ...


def starts_with_system(msgs: Sequence[Message]) -> bool:
    return bool(msgs) and msgs[0].role == ROLE_SYSTEM


def find_cut(msgs: Sequence[Message], tail_len: int) -> int:
    """Where the kept part begins when keeping the newest ``tail_len`` messages (>= 1)."""
    return extend_cut(msgs, max(1, len(msgs) - max(tail_len, 0)))


def extend_cut(msgs: Sequence[Message], cut: int) -> int:
    """``cut`` moved back over the tool results it would begin with, to the assistant message
    before them if it made calls; results whose call is not adjacent are left to the repair."""
    if cut >= len(msgs) or msgs[cut].role != ROLE_TOOL:
        return cut
    first = cut
    while first > 1 and msgs[first - 1].role == ROLE_TOOL:
        first -= 1
    caller = first - 1
    if caller >= 1 and msgs[caller].role == ROLE_ASSISTANT and msgs[caller].tool_calls:
        return caller
    return cut


class KeptSizer:
    """Exact token estimate of ``repair([msgs[0]] + msgs[cut:])`` for any cut >= start, in O(1).

    One pass over ``msgs[start:]``: each message's bytes, plus the stubs the repair adds to
    unanswered calls, minus results it drops. A result whose call lies before the cut is
    dropped only for cuts between the two: a difference array counts that.
    """

    __slots__ = ("_start", "_straddle", "_suffix", "_system_bytes")

    def __init__(self, msgs: Sequence[Message], sizes: Sequence[int], start: int = 1) -> None:
        """``sizes[i]`` is ``message_bytes(msgs[i])``; ``msgs[0]`` is the system message."""
        part = msgs[start:]
        # Exact for cuts inside the part: a result whose call lies before it is unmatched.
        result = match_tool_results(part)
        stub_bytes = len(TRUNCATED_STUB.encode("utf-8"))
        # What each message adds to a repaired suffix: results count with their call.
        eff = [0 if m.role == ROLE_TOOL else sizes[start + j] for j, m in enumerate(part)]
        # A result whose call lies before the cut is dropped: for cuts in (i, r].
        diff = [0] * (len(part) + 1)
        slot = 0  # calls are numbered in history order, as match_tool_results does
        for i, m in enumerate(part):
            if m.role != ROLE_ASSISTANT or not m.tool_calls:
                continue
            for tc in m.tool_calls:
                r = result[slot]
                slot += 1
                if r < 0:
                    eff[i] += stub_bytes + len(tc.id.encode("utf-8", "surrogatepass"))
                else:
                    eff[r] = b = sizes[start + r]
                    diff[i + 1] += b
                    diff[r + 1] -= b
        self._start = start
        self._suffix = [*accumulate(reversed(eff), initial=0)][::-1]
        self._straddle = [*accumulate(diff)]
        self._system_bytes = sizes[0]

    def kept_bytes(self, cut: int) -> int:
        j = cut - self._start
        if j < 0:
            raise ValueError(f"cut {cut} is before the measured part (from {self._start})")
        return self._system_bytes + self._suffix[j] - self._straddle[j]

    def kept_tokens(self, cut: int) -> int:
        return self.kept_bytes(cut) // BYTES_PER_TOKEN
