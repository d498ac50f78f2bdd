"""A view bounded in messages, whatever the window: old tool groups fold without a model call.

Stubbing keeps every old tool call and its (stubbed) result as two messages, so a
long session's view grows by two messages per call even when its tokens are far under
the threshold; with a 1M window that is thousands of messages, and every request pays
for walking them (harness9's repair and estimates, litellm's request preparation).

When the view holds more than ``max_messages``, ``MessageBound`` folds everything
before the newest ``keep_messages`` into the checkpoint, calling no model:

- the folded tool results go into the checkpoint's recall index (the policy adds them,
  as for every compaction), each with its handle: ``offload_recall`` pages any of them
  back from the log and ``history_search`` finds them;
- the folded user and assistant text is carried into the summary verbatim (assistant
  text clipped), after the previous summary, so no instruction is lost.

It fills the ``Compactor`` seam so the policy stores it like any compaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness9.context.compaction import (
    CompactionPlan,
    CompactionResult,
    ProgressCallback,
    extend_cut,
    starts_with_system,
    unchanged_plan,
)
from harness9.context.recall import summary_message, summary_of
from harness9.context.repair import repair_orphaned_tool_pairs
from harness9.context.tokens import estimate_tokens
from harness9.schema import ROLE_ASSISTANT, ROLE_USER, Message

__all__ = [
    "DEFAULT_KEEP_MESSAGES",
    "DEFAULT_MAX_VIEW_MESSAGES",
    "FOLDED_HEADING",
    "STRATEGY_FOLD",
    "MessageBound",
]

# A few hundred messages: far more than any turn needs, few enough that a request costs
# the same at call 100 and call 10,000. Folding down to half means one fold (one cache
# break) per ~100 tool calls.
DEFAULT_MAX_VIEW_MESSAGES = 400
DEFAULT_KEEP_MESSAGES = 200
STRATEGY_FOLD = "fold"
FOLDED_HEADING = "## Earlier messages (tool calls folded into the recall index)"
ASSISTANT_CHARS = 400


class MessageBound:
    """See the module docstring. Pure: never mutates its input."""

    strategy = STRATEGY_FOLD
    threshold_tokens = 0  # triggered by the number of messages, not by tokens

    def __init__(
        self,
        max_messages: int = DEFAULT_MAX_VIEW_MESSAGES,
        keep_messages: int = DEFAULT_KEEP_MESSAGES,
    ) -> None:
        if not 1 <= keep_messages < max_messages:
            raise ValueError(
                f"keep_messages must be between 1 and max_messages - 1, got {keep_messages}"
            )
        self.max_messages = max_messages
        self.keep_messages = keep_messages

    def plan(self, msgs: Sequence[Message], *, force: bool = False) -> CompactionPlan:
        """Fold when the view is over ``max_messages`` (``force`` does not change that:
        the bound is the promise, as a sliding window's is)."""
        nothing = unchanged_plan(self.strategy, msgs, 0)
        if not starts_with_system(msgs) or len(msgs) <= self.max_messages:
            return nothing
        cut = extend_cut(msgs, len(msgs) - self.keep_messages)
        if cut <= 1 or (cut == 2 and msgs[1].is_summary):
            return nothing
        kept = estimate_tokens([msgs[0], *msgs[cut:]])
        return CompactionPlan(True, self.strategy, cut, nothing.tokens_before, kept, 0)

    def compact(
        self,
        msgs: Sequence[Message],
        *,
        force: bool = False,
        instructions: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> CompactionResult:
        plan = self.plan(msgs, force=force)
        if not plan.would_compact:
            return CompactionResult(repair_orphaned_tool_pairs(msgs), plan, None, self.strategy)
        summary = folded_summary(msgs, plan.cut)
        head = [msgs[0], summary_message(summary)] if summary else [msgs[0]]
        out = repair_orphaned_tool_pairs([*head, *msgs[plan.cut :]])
        plan.tokens_after = estimate_tokens(out)
        return CompactionResult(out, plan, summary, self.strategy)


def folded_summary(msgs: Sequence[Message], cut: int) -> str:
    """The previous summary, then the text of ``msgs[1:cut]`` said by the user (verbatim)
    and the assistant (clipped); tool calls and results are the recall index's."""
    previous = ""
    lines: list[str] = []
    for m in msgs[1:cut]:
        if m.is_summary:
            previous = summary_of(m).strip()
        elif m.role == ROLE_USER and m.content.strip():
            lines.append(f"User: {m.content.strip()}")
        elif m.role == ROLE_ASSISTANT and m.content.strip():
            text = " ".join(m.content.split())
            if len(text) > ASSISTANT_CHARS:
                text = text[: ASSISTANT_CHARS - 1] + "…"
            lines.append(f"Assistant: {text}")
    if not lines:
        return previous
    if FOLDED_HEADING in previous:
        return previous + "\n" + "\n".join(lines)
    parts = [p for p in (previous, FOLDED_HEADING + "\n" + "\n".join(lines)) if p]
    return "\n\n".join(parts)
