"""The phase-2 compactor: evict first, summarise only if eviction was not enough.

With ``max_tokens`` the context budget (for example the model's window):

1. Under ``threshold * max_tokens`` (80 %): nothing happens.
2. ``evict_by_density`` down to ``evict_target * max_tokens`` (70 %), keeping the
   newest ``keep_groups`` (3) tool groups intact. If that lands under 80 %, done:
   no model call (strategy ``"evict"``).
3. Otherwise fold everything before the verbatim tail (at least
   ``min_tail_messages``, 6) into one structured summary: marker prompt, then
   fingerprint validation and repair. The fingerprint is taken from the original
   messages, so facts that only lived in evicted tool results still survive.
   Result: ``[system, user("[Conversation Summary]\\n" + summary), *tail]``
   (strategy ``"evict+summary"``).
4. If the summariser fails: ``fallback.compact(evicted)`` when a fallback is set,
   else the evicted history, with the error recorded on the result.
"""

from __future__ import annotations

from harness9.memory._plan import (
    CompactionPlan,
    CompactionResult,
    Summarizer,
    _find_cut,
    _repair,
)
from harness9.memory.eviction import evict_by_density, tool_groups
from harness9.memory.fingerprint import structured_summary
from harness9.memory.tokens import estimate_tokens
from harness9.schema import ROLE_SYSTEM, ROLE_USER, SUMMARY_PREFIX, Message

STRATEGY_EVICT = "evict"
STRATEGY_SUMMARY = "evict+summary"
STRATEGY_FALLBACK = "fallback"


class Phase2Compactor:
    def __init__(
        self,
        summarizer: Summarizer,
        max_tokens: int,
        *,
        threshold: float = 0.8,
        evict_target: float = 0.7,
        keep_groups: int = 3,
        min_tail_messages: int = 6,
        fallback: object | None = None,
    ) -> None:
        self.summarizer = summarizer
        self.max_tokens = max_tokens
        self.threshold = threshold
        self.evict_target = evict_target
        self.keep_groups = keep_groups
        self.min_tail_messages = min_tail_messages
        self.fallback = fallback  # anything with compact(msgs) -> list[Message]

    @property
    def threshold_tokens(self) -> int:
        return int(self.max_tokens * self.threshold)

    def plan(self, msgs: list[Message], *, force: bool = False) -> CompactionPlan:
        return self._plan(msgs, force)[0]

    def compact(self, msgs: list[Message]) -> list[Message]:
        return self.compact_detailed(msgs).messages

    def compact_detailed(self, msgs: list[Message], *, force: bool = False) -> CompactionResult:
        plan, evicted = self._plan(msgs, force)
        if not plan.would_compact:
            return CompactionResult(list(msgs), plan, None, plan.strategy)
        if plan.strategy == STRATEGY_EVICT:
            return CompactionResult(evicted, plan, None, STRATEGY_EVICT)
        # The head/tail cut mirrors SummarizationCompactor's: msgs[1:cut] is folded,
        # msgs[cut:] stays verbatim. Eviction keeps positions, so the same indices
        # address the original (un-evicted) messages for the fingerprint.
        cut = plan.cut
        try:
            summary = structured_summary(
                self.summarizer, evicted[1:cut], fingerprint_from=msgs[1:cut]
            )
        except Exception as exc:  # provider errors of any kind: compaction must not fail
            error = f"{type(exc).__name__}: {exc}"
            if self.fallback is not None:
                out = self.fallback.compact(evicted)  # type: ignore[attr-defined]
                plan.tokens_after = estimate_tokens(out)
                return CompactionResult(out, plan, None, STRATEGY_FALLBACK, error=error)
            plan.tokens_after = estimate_tokens(evicted)
            return CompactionResult(evicted, plan, None, STRATEGY_EVICT, error=error)
        out = _repair([evicted[0], Message(ROLE_USER, SUMMARY_PREFIX + summary), *evicted[cut:]])
        plan.tokens_after = estimate_tokens(out)
        return CompactionResult(out, plan, summary, STRATEGY_SUMMARY)

    def _plan(self, msgs: list[Message], force: bool) -> tuple[CompactionPlan, list[Message]]:
        before = estimate_tokens(msgs)
        plan = CompactionPlan(
            False, STRATEGY_EVICT, len(msgs), before, before, self.threshold_tokens
        )
        if not msgs or msgs[0].role != ROLE_SYSTEM:
            return plan, list(msgs)
        if not force and before < self.threshold_tokens:
            return plan, list(msgs)
        evicted = evict_by_density(msgs, self.keep_groups, int(self.max_tokens * self.evict_target))
        after_evict = estimate_tokens(evicted)
        plan.tokens_after = after_evict
        if not force and after_evict < self.threshold_tokens:
            groups = tool_groups(msgs)
            kept = groups[-self.keep_groups :] if self.keep_groups > 0 else []
            plan.cut = kept[0].call_index if kept else len(msgs)
            plan.would_compact = after_evict < before
            return plan, evicted
        cut = _find_cut(evicted, self.min_tail_messages)
        if cut <= 1:  # nothing old enough to fold; eviction is all we can do
            plan.would_compact = after_evict < before
            return plan, evicted
        plan.strategy = STRATEGY_SUMMARY
        plan.cut = cut
        # The summary's size is unknown until the model answers: a lower bound.
        plan.tokens_after = estimate_tokens([evicted[0], *evicted[cut:]])
        plan.would_compact = True
        return plan, evicted
