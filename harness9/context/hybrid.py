"""The default policy, ``hybrid``: cheap steps first, a summary only when they are not enough.

Offloading happens when a tool runs: a big output goes to disk and the
conversation gets a marker. When the context passes the trigger
(``threshold`` × the window, 80 %), one compaction brings it down to ``target`` × the
window (40 %), well below the trigger, so compactions are rare and each one buys
many appended requests (ARCHITECTURE decision 7: requests are append-only between
compactions).

1. Stub: every tool result older than the newest ``keep_groups`` tool groups is
   replaced by a one-line stub. The checkpoint stores the stubs (the log is never
   rewritten) and gives each its recall handle, so ``offload_recall`` pages the full
   result back. If that lands under the target, no model is called.
2. Summarise: otherwise everything before a recent tail (sized so the result lands
   under the target) is folded into one structured summary (``@file:`` markers and
   "Preserved facts", fingerprinted from the messages as they were). The summariser
   reads the stubbed head, so the call is cheap. The checkpoint adds the folded tool
   results to its recall index (decision 6): a summary can be weak, the pointers cannot.
3. If the summariser fails, the stubbed history is truncated to the target instead
   (``fallback``), and the error is recorded. Truncated results are indexed too.

One compaction per model call at most, and never a loop: a compaction that could not
get under the trigger is not repeated until the context grows (the engine's rule).
"""

from __future__ import annotations

from collections.abc import Sequence

from harness9.context.compaction import (
    DEFAULT_MIN_TAIL,
    CompactionPlan,
    CompactionResult,
    Compactor,
    PlannedCompactor,
    ProgressCallback,
    TokenBudgetCompactor,
    extend_cut,
    find_cut,
    first_look,
    nothing_new,
    run_fallback,
    starts_with_system,
    unchanged_plan,
)
from harness9.context.eviction import tool_groups
from harness9.context.fingerprint import FoldingCompactor, marker_summarizer
from harness9.context.recall import stub_for
from harness9.context.repair import repair_orphaned_tool_pairs
from harness9.context.stubs import HANDLE_ALLOWANCE_BYTES, awaits_handle, is_stub
from harness9.context.summarize import (
    SUMMARY_ESTIMATE_CAP,
    Summarizer,
)
from harness9.context.tokens import BYTES_PER_TOKEN, estimate_tokens, message_bytes
from harness9.schema import ROLE_TOOL, SUMMARY_PREFIX, Message

__all__ = [
    "STRATEGY_TAIL",
    "DEFAULT_TARGET",
    "TailCompactor",
    "RECALL_SHARE",
    "STRATEGY_HYBRID",
    "STRATEGY_STUBS",
    "HybridCompactor",
    "stub_old_results",
]

STRATEGY_HYBRID = "hybrid"
STRATEGY_STUBS = "hybrid:stubs"  # what ran when stubbing alone was enough
STRATEGY_TAIL = "protected-tail"  # the last resort of a compaction the user asked for
MIN_GAIN = 0.05  # stubbing that saves less than this share is not worth a cache break
# What an API adds per message beyond its text (role, call ids, separators): about 8
# tokens for the call/result pairs of a tool-heavy session.
MESSAGE_OVERHEAD_TOKENS = 8
DEFAULT_TARGET = 0.4
# Shares of the window for the summary's "Preserved facts" and the recall index: small
# enough that the recent tail keeps most of the target, large enough for ~100 lines each
# on a 128K window.
PRESERVED_SHARE_HYBRID = 0.06
RECALL_SHARE = 0.06


def stub_old_results(msgs: Sequence[Message], keep_groups: int) -> list[Message]:
    """Old tool results replaced by stubs (the newest ``keep_groups`` groups stay whole)."""
    out = list(msgs)
    groups = tool_groups(out)
    for g in groups[: max(0, len(groups) - keep_groups)]:
        for i in g.result_indices:
            m = out[i]
            if is_stub(m.content):
                continue
            stub = stub_for(m)
            if message_bytes(stub) + HANDLE_ALLOWANCE_BYTES < message_bytes(m):
                out[i] = stub
    return out


def _load(msgs: Sequence[Message], tokens: int) -> int:
    """``tokens`` (the messages' estimate) plus the framing of each message."""
    return tokens + MESSAGE_OVERHEAD_TOKENS * len(msgs)


def _bytes(msgs: Sequence[Message]) -> int:
    """Bytes of ``msgs`` with room for the handles the checkpoint adds to new stubs."""
    total = 0
    for m in msgs:
        total += message_bytes(m)
        if m.role == ROLE_TOOL and awaits_handle(m.content):
            total += HANDLE_ALLOWANCE_BYTES
    return total


class HybridCompactor(FoldingCompactor):
    """Offload → stub → structured summary with a recall index; see the module docstring."""

    strategy = STRATEGY_HYBRID

    def __init__(
        self,
        summarizer: Summarizer,
        context_window: int,
        *,
        threshold: float = 0.8,
        target: float = DEFAULT_TARGET,
        keep_groups: int = 3,
        min_tail_messages: int = DEFAULT_MIN_TAIL,
        summarizer_window: int | None = None,
        preserved_share: float = PRESERVED_SHARE_HYBRID,
        recall_share: float = RECALL_SHARE,
        fallback: Compactor | None = None,
    ) -> None:
        if context_window < 1:
            raise ValueError(f"context_window must be positive, got {context_window}")
        self.context_window = context_window
        self.threshold = threshold
        self.target = min(target, threshold)
        self.keep_groups = keep_groups
        self.min_tail_messages = min_tail_messages
        self.preserved_share = preserved_share
        self.recall_share = recall_share
        self.span = marker_summarizer(summarizer, window=summarizer_window or context_window)
        self.fallback: Compactor = fallback or TokenBudgetCompactor(
            self.target_tokens, min_tail_messages
        )

    @property
    def threshold_tokens(self) -> int:
        """The trigger: what /context, the engine and ``compact`` read."""
        return max(1, int(self.context_window * self.threshold))

    @property
    def target_tokens(self) -> int:
        return max(1, int(self.context_window * self.target))

    @property
    def preserved_budget(self) -> int:
        return max(1, int(self.context_window * self.preserved_share))

    @property
    def recall_budget(self) -> int:
        """Tokens the checkpoint's recall index may take."""
        return max(1, int(self.context_window * self.recall_share))

    @property
    def summarizer(self) -> Summarizer:
        return self.span.summarizer

    # -- the seam ------------------------------------------------------------------------

    def _apply(
        self,
        msgs: Sequence[Message],
        plan: CompactionPlan,
        stubbed: list[Message],
        force: bool,
        instructions: str | None,
        on_progress: ProgressCallback | None,
    ) -> CompactionResult:
        if plan.cut <= 1:
            out = repair_orphaned_tool_pairs(stubbed)
            return CompactionResult(out, plan, None, STRATEGY_STUBS)
        return self._fold(stubbed, msgs, plan, True, on_progress, instructions=instructions)

    # -- internals -----------------------------------------------------------------------

    def _plan(
        self, msgs: Sequence[Message], force: bool, *, offload: bool = False
    ) -> tuple[CompactionPlan, list[Message]]:
        """``offload`` is not used: stubs point at the store's own rows."""
        # The trigger is the estimate every strategy uses (what /context shows). How far
        # down to compact also counts each message's framing (MESSAGE_OVERHEAD_TOKENS):
        # stubs make messages small and many, and the byte estimate alone misses that.
        nothing, go_on = first_look(STRATEGY_HYBRID, msgs, self.threshold_tokens, force)
        if not go_on:
            return nothing, list(msgs)
        before = nothing.tokens_before
        stubbed = stub_old_results(msgs, self.keep_groups)
        after_stub = _bytes(stubbed) // BYTES_PER_TOKEN
        # Stubbing is enough when it lands under the target (forced or not: a forced
        # compaction, e.g. the trigger's early one, should still be the cheap kind).
        if _load(stubbed, after_stub) <= self.target_tokens and after_stub < before * (
            1 - MIN_GAIN
        ):
            return CompactionPlan(
                True, STRATEGY_STUBS, 1, before, after_stub, self.threshold_tokens
            ), stubbed
        cut = self._cut(stubbed)
        if cut <= 1 and force:
            # Forced (/compact) with everything under the target: fold all but the
            # protected tail, as asked.
            cut = find_cut(stubbed, self.min_tail_messages)
        if nothing_new(stubbed, cut):  # nothing old enough to fold: stubbing is all there is
            cut = 1
        if cut <= 1:
            return CompactionPlan(
                after_stub < before, STRATEGY_STUBS, 1, before, after_stub, self.threshold_tokens
            ), stubbed
        head = estimate_tokens(stubbed[1:cut])
        summary = min(head, SUMMARY_ESTIMATE_CAP) + len(SUMMARY_PREFIX) // BYTES_PER_TOKEN
        kept = _bytes([stubbed[0], *stubbed[cut:]]) // BYTES_PER_TOKEN
        return CompactionPlan(
            True, STRATEGY_HYBRID, cut, before, kept + summary, self.threshold_tokens
        ), stubbed

    def _cut(self, msgs: Sequence[Message]) -> int:
        """Where the kept tail begins: as many newest messages as fit the target, less
        room for the summary, its preserved facts and the recall index; at least the
        protected minimum."""
        room = self.target_tokens - self.preserved_budget - self.recall_budget
        room -= min(SUMMARY_ESTIMATE_CAP, self.target_tokens // 8)
        room_bytes = max(0, room) * BYTES_PER_TOKEN - message_bytes(msgs[0])
        n = len(msgs)
        start = n
        used = 0
        while start > 1:
            cost = _bytes([msgs[start - 1]]) + MESSAGE_OVERHEAD_TOKENS * BYTES_PER_TOKEN
            if used + cost > room_bytes and n - start >= self.min_tail_messages:
                break
            used += cost
            start -= 1
        cut = extend_cut(msgs, start)
        return cut if cut > 1 else 1


class TailCompactor(PlannedCompactor[CompactionResult]):
    """The last resort of a compaction the user asked for (``/compact``) when the
    strategy folded nothing and the request is still over ``max_tokens``: the protected
    tail is given up. Every tool result is stubbed (recallable by its handle), then the
    history is truncated to what fits, down to its newest message; an earlier summary
    is kept. Calls no model, so ``instructions`` and ``on_progress`` go unused."""

    strategy = STRATEGY_TAIL

    def __init__(self, max_tokens: int) -> None:
        self.budget = TokenBudgetCompactor(max_tokens, min_tail_messages=1)

    @property
    def threshold_tokens(self) -> int:
        return self.budget.max_tokens

    def _plan(
        self, msgs: Sequence[Message], force: bool, *, offload: bool = False
    ) -> tuple[CompactionPlan, CompactionResult]:
        """The whole result is the plan's by-product (it is cheap and calls no model)."""
        if not starts_with_system(msgs):
            res = CompactionResult(list(msgs), unchanged_plan(self.strategy, msgs, 0), None, "")
            return res.plan, res
        res = run_fallback(
            self.budget, stub_old_results(msgs, keep_groups=0), force=False, error=""
        )
        plan = res.plan
        plan.strategy = self.strategy
        plan.tokens_before = estimate_tokens(msgs)
        plan.tokens_after = estimate_tokens(res.messages)
        plan.would_compact = plan.tokens_after < plan.tokens_before
        kept = res.kept_previous_summary
        return plan, CompactionResult(res.messages, plan, None, self.strategy, None, kept)

    def _apply(
        self,
        msgs: Sequence[Message],
        plan: CompactionPlan,
        prepared: CompactionResult,
        force: bool,
        instructions: str | None,
        on_progress: ProgressCallback | None,
    ) -> CompactionResult:
        return prepared
