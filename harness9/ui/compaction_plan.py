"""The ``compact --dry-run`` table: what a compaction would fold and what it would keep."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from harness9.context.pipeline import MIN_COMPACTION_GAIN, SUMMARY_STRATEGIES, CompactionPlan
from harness9.context.stubs import is_summary
from harness9.context.view import ModelView
from harness9.tokens import estimate_message_tokens, format_token_count
from harness9.ui.text import inert

# Rows of a dry-run table before the folded span is collapsed to its ends.
MAX_ROWS = 40
# Over the threshold with nothing the strategy can fold: the newest tool groups, kept
# whole, are too big (a small window). A compaction asked for stubs them as a last resort.
FOLDS_NOTHING = (
    "the strategy finds nothing more to fold (--force also stubs the newest tool results)"
)


def too_small_reason(plan: CompactionPlan) -> str:
    """Why a compaction asked for under the threshold is not made (``plan.too_small``)."""
    n = plan.cut - 1
    summary = plan.strategy in SUMMARY_STRATEGIES
    verb = "summarising" if summary else "folding" if plan.strategy == "evict" else "dropping"
    saved = max(0, plan.tokens_before - plan.tokens_after)
    share = f"{saved * 100 // max(1, plan.tokens_before)} %"
    what = f"{verb} {n} message{'' if n == 1 else 's'}" if n > 0 else "stubbing old tool results"
    cost = "the summary call and the prompt cache" if summary else "the prompt cache"
    return (
        f"{what} would save {format_token_count(saved)} of "
        f"{format_token_count(plan.tokens_before)} tokens ({share}), under the "
        f"{round(MIN_COMPACTION_GAIN * 100)} % it takes to pay for {cost} a compaction breaks"
    )


def render_plan(
    out: Console,
    view: ModelView,
    plan: CompactionPlan,
    summary: dict[str, Any],
    numbers: dict[int, int] | None = None,
) -> None:
    """Print the plan as a table of the view's messages, then one verdict line.

    ``numbers`` maps a stored message id to its ``#N`` in the session, as ``sessions
    show`` numbers it (#1 is the session's first message), so both name one message alike.
    """
    # evict folds messages (no model call) only when eviction is not enough; with nothing
    # folded, it and hybrid:stubs replace old tool results and keep every message.
    fold_word = {
        "summarize": "summarize",
        "hybrid": "summarize",
        "evict": "fold" if plan.cut > 1 else "evict",
        "hybrid:stubs": "stub",
    }.get(plan.strategy, "drop")
    numbers = numbers or {}
    folded_end = plan.cut if plan.would_compact else 1
    rows = [(i, _label(view, i, numbers)) for i in range(1, len(view.messages))]
    if len(rows) > MAX_ROWS:
        # Collapse the middle of the folded span, then of the kept span if still too long.
        rows = rows[: MAX_ROWS // 4] + [(-1, "…")] + rows[-(MAX_ROWS * 3 // 4) :]
    table = _plan_table(summary["session"], rows, view, out.width)
    for i, label in rows:
        if i == -1:
            table.add_row("…", "", "", "", Text("(rows omitted)", style="dim"))
            continue
        msg = view.messages[i]
        folded = i < folded_end
        preview = inert(msg.content.splitlines()[0] if msg.content else "")
        if msg.tool_calls:
            calls = " ".join(f"{tc.name}({inert(tc.arguments)})" for tc in msg.tool_calls)
            preview = calls + " " + preview
        table.add_row(
            label,
            _role(msg),
            format_token_count(estimate_message_tokens(msg)),
            Text(fold_word if folded else "keep", style="yellow" if folded else "green"),
            Text(preview),
        )
    out.print(table)
    if plan.would_compact and plan.cut <= 1:
        verdict = (
            f"would {fold_word} old tool results and keep all {summary['messages_kept']} messages"
        )
    elif plan.would_compact:
        n = summary["messages_to_summarize"]
        verdict = (
            f"would {fold_word} {n} message{'' if n == 1 else 's'} "
            f"and keep {summary['messages_kept']}"
        )
    elif plan.too_small:
        verdict = f"nothing would be compacted: {too_small_reason(plan)}"
    elif plan.tokens_before > plan.threshold > 0:
        verdict = f"over the threshold, but {FOLDS_NOTHING}"
    else:
        verdict = (
            f"under the threshold ({format_token_count(plan.threshold)} tokens): "
            "nothing would be compacted"
        )
    after = plan.tokens_after if plan.would_compact else plan.tokens_before
    out.print(
        f"{verdict}; tokens {format_token_count(plan.tokens_before)} → {format_token_count(after)}"
        f" (window {format_token_count(summary['context_window'])}, threshold {format_token_count(plan.threshold)})"
    )


def _label(view: ModelView, i: int, numbers: dict[int, int]) -> str:
    """``#12`` for a stored message (as ``sessions show``), ``summary`` for the checkpoint's."""
    stored = view.ids[i] if i < len(view.ids) else None
    if stored is None:
        return "summary" if is_summary(view.messages[i]) else "-"
    number = numbers.get(stored)
    return f"#{number}" if number is not None else f"row {stored}"


def _role(msg: Any) -> str:
    return msg.role + (" (summary)" if is_summary(msg) else "")


def _plan_table(session: str, rows: list[tuple[int, str]], view: ModelView, width: int) -> Table:
    """The columns: every fixed one as wide as its widest cell; the preview gets the rest."""
    roles = [_role(view.messages[i]) for i, _ in rows if i != -1]
    widths = (max(len(x) for _, x in rows), max([4, *map(len, roles)]), 6, 9)
    table = Table(title=f"session {session}", show_lines=False)
    table.add_column("#", justify="right", no_wrap=True, min_width=widths[0])
    table.add_column("role", no_wrap=True, min_width=widths[1])
    table.add_column("tokens", justify="right", no_wrap=True, min_width=widths[2])
    table.add_column("action", no_wrap=True, min_width=widths[3])
    # Each of the 5 columns has a space either side, and 6 borders separate them.
    room = width - sum(widths) - 5 * 2 - 6
    table.add_column("content", overflow="ellipsis", no_wrap=True, max_width=max(10, room))
    return table
