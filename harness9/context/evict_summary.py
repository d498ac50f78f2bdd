"""The evict+summary compactor: evict first, summarise only if eviction was not enough.

With ``max_tokens`` the compaction threshold, as for every compactor (80 % of
the window from ``for_context_window``), and ``context_window`` the model's window:

1. Under ``max_tokens``: nothing happens.
2. ``evict_by_density`` down to ``evict_target * context_window`` (70 %), keeping the
   newest ``keep_groups`` (3) tool groups intact. If that lands under 80 %, done:
   no model call (strategy ``"evict"``). Each stub keeps the result's error lines,
   declared names and paths within a small budget; with ``offload`` the full
   result is stored and the stub carries its ``📂 [offload:<id>]`` marker.
3. Otherwise fold everything before the verbatim tail (``find_cut`` with at
   least ``min_tail_messages``, 6) into one structured summary. The summarising
   is a ``SpanSummarizer`` with the marker prompt, so a head
   larger than the summariser's window is summarised in chunks and an earlier
   summary at the head is merged, not lost. The result is then checked against
   a fingerprint taken from the *original* messages and repaired, so facts that
   only lived in evicted tool results still survive. The "Preserved facts" section
   is bounded by ``preserved_share`` (15 %) of ``context_window``; what does not fit is
   counted there ("… and N more paths not shown") and, with an ``offload`` store,
   written to it with a recallable marker. Result:
   ``[system, user("[Conversation Summary]\\n" + summary), *tail]``
   (strategy ``"evict+summary"``).
4. If the summariser fails (exception or empty reply): the fallback, by default
   ``TokenBudgetCompactor(max_tokens)``, runs on the evicted
   history and the error is recorded on the result.

Like every compactor, the output is repaired (a valid tool sequence) and an
input that does not start with the system message comes back unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness9.context.compaction import (
    BUDGET_PERCENT,
    DEFAULT_MIN_TAIL,
    CompactionPlan,
    CompactionResult,
    Compactor,
    ProgressCallback,
    TokenBudgetCompactor,
    find_cut,
    first_look,
    starts_with_system,
)
from harness9.context.eviction import evict_by_density
from harness9.context.fingerprint import PRESERVED_SHARE, FoldingCompactor, marker_summarizer
from harness9.context.offload import OffloadError, OffloadStore, valid_session_id
from harness9.context.patterns import OFFLOAD_MARKER
from harness9.context.repair import repair_orphaned_tool_pairs
from harness9.context.summarize import Summarizer
from harness9.context.tokens import estimate_tokens
from harness9.schema import Message

__all__ = ["STRATEGY_EVICT", "STRATEGY_SUMMARY", "EvictionSummaryCompactor"]

STRATEGY_EVICT = "evict"
STRATEGY_SUMMARY = "evict+summary"


class EvictionSummaryCompactor(FoldingCompactor):
    strategy = STRATEGY_SUMMARY

    def __init__(
        self,
        summarizer: Summarizer,
        max_tokens: int,
        *,
        context_window: int | None = None,
        evict_target: float = 0.7,
        keep_groups: int = 3,
        min_tail_messages: int = DEFAULT_MIN_TAIL,
        fallback: Compactor | None = None,
        summarizer_window: int | None = None,
        preserved_share: float = PRESERVED_SHARE,
        offload: OffloadStore | None = None,
        session_id: str = "",
    ) -> None:
        """``max_tokens`` is the threshold; ``context_window`` (default: ``max_tokens``) the
        window that ``evict_target`` and ``preserved_share`` are shares of, and the
        summariser's window unless ``summarizer_window`` says otherwise.

        ``preserved_share`` of the window bounds the summary's "Preserved facts"
        section. With ``offload`` (and the session's ``session_id``), evicted tool
        results and the preserved facts that do not fit are written to the store, so
        their markers make them recallable with ``offload_recall``.
        """
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        if offload is not None and not valid_session_id(session_id):
            raise ValueError(f"offload needs a valid session id, got {session_id!r}")
        self.preserved_share = preserved_share
        self.offload = offload
        self.session_id = session_id
        self.max_tokens = max_tokens
        self.context_window = context_window or max_tokens
        self.evict_target = evict_target
        self.keep_groups = keep_groups
        self.min_tail_messages = min_tail_messages
        self.fallback: Compactor = fallback or TokenBudgetCompactor(max_tokens, min_tail_messages)
        self.span = marker_summarizer(summarizer, window=summarizer_window or self.context_window)

    @classmethod
    def for_context_window(
        cls, summarizer: Summarizer, context_window: int
    ) -> EvictionSummaryCompactor:
        return cls(
            summarizer,
            context_window * BUDGET_PERCENT // 100,
            context_window=context_window,
        )

    @property
    def summarizer(self) -> Summarizer:
        return self.span.summarizer

    @property
    def threshold_tokens(self) -> int:
        return self.max_tokens

    @property
    def preserved_budget(self) -> int:
        """Tokens the "Preserved facts" section may take."""
        return int(self.context_window * self.preserved_share)

    def _spill(self, facts: str) -> str:
        """Writes facts left out of the summary to the offload store; the line naming them."""
        if self.offload is None:
            return ""
        try:
            writer = self.offload.open_stream(self.session_id, "preserved_facts", "{}")
            writer.write(facts + "\n")
            oid = writer.finish().id
        except (OSError, OffloadError):  # an unwritable store must not fail compaction
            return ""
        return f'{OFFLOAD_MARKER}{oid}] the facts not shown, in full: offload_recall(id="{oid}")'

    def _apply(
        self,
        msgs: Sequence[Message],
        plan: CompactionPlan,
        evicted: list[Message],
        force: bool,
        instructions: str | None,
        on_progress: ProgressCallback | None,
    ) -> CompactionResult:
        """``instructions`` is not used: the fingerprint is the focus of its summary."""
        if not starts_with_system(msgs):
            return CompactionResult(list(msgs), plan, None, plan.strategy)
        if plan.strategy == STRATEGY_EVICT:
            return CompactionResult(repair_orphaned_tool_pairs(evicted), plan, None, plan.strategy)
        # msgs[1:cut] is folded, msgs[cut:] stays verbatim. Eviction keeps positions,
        # so the same indices address the original messages for the fingerprint.
        spill = self._spill if self.offload is not None else None
        return self._fold(evicted, msgs, plan, force, on_progress, spill=spill)

    def _plan(
        self, msgs: Sequence[Message], force: bool, *, offload: bool = False
    ) -> tuple[CompactionPlan, list[Message]]:
        """``offload``: write evicted results to the store (never in a dry-run ``plan``)."""
        plan, go_on = first_look(STRATEGY_EVICT, msgs, self.threshold_tokens, force)
        if not go_on:
            return plan, list(msgs)
        before = plan.tokens_before
        evicted = evict_by_density(
            msgs,
            self.keep_groups,
            int(self.context_window * self.evict_target),
            offload=self.offload if offload else None,
            session_id=self.session_id,
        )
        after_evict = estimate_tokens(evicted)
        plan.tokens_after = after_evict
        plan.would_compact = after_evict < before
        if not force and after_evict < self.threshold_tokens:
            return plan, evicted  # eviction alone was enough: nothing is folded (cut 1)
        cut = find_cut(evicted, self.min_tail_messages)
        if cut <= 1:  # nothing old enough to fold; eviction is all we can do
            return plan, evicted
        plan.strategy = STRATEGY_SUMMARY
        plan.cut = cut
        # The summary's size is unknown until the model answers: a lower bound.
        plan.tokens_after = estimate_tokens([evicted[0], *evicted[cut:]])
        plan.would_compact = True
        return plan, evicted
