"""The ``compact --dry-run`` table: what a compaction would fold and what it would keep."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from harness9.context.compaction import CompactionPlan
from harness9.context.tokens import estimate_message_tokens, format_token_count
from harness9.context.view import ModelView
from harness9.ui.text import inert

# Rows of a dry-run table before the folded span is collapsed to its ends.
MAX_ROWS = 40


def render_plan(
    out: Console, view: ModelView, plan: CompactionPlan, summary: dict[str, Any]
) -> None:
    """Print the plan as a table of the view's messages, then one verdict line."""
    fold_word = {
        "summarize": "summarize",
        "hybrid": "summarize",
        "evict+summary": "summarize",
        "evict": "evict",
        "hybrid:stubs": "stub",
    }.get(plan.strategy, "drop")
    table = Table(title=f"session {summary['session']}", show_lines=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("role", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("action", no_wrap=True)
    # The fixed columns need ~40 cells; the preview takes what is left of the line.
    table.add_column(
        "content", overflow="ellipsis", no_wrap=True, max_width=max(20, out.width - 42)
    )
    rows = list(range(1, len(view.messages)))
    folded_end = plan.cut if plan.would_compact else 1
    if len(rows) > MAX_ROWS:
        # Collapse the middle of the folded span, then of the kept span if still too long.
        head, tail = rows[: MAX_ROWS // 4], rows[-(MAX_ROWS * 3 // 4) :]
        rows = head + [-1] + tail
    for i in rows:
        if i == -1:
            table.add_row("…", "", "", "", Text("(rows omitted)", style="dim"))
            continue
        msg = view.messages[i]
        folded = i < folded_end
        preview = inert(msg.content.splitlines()[0] if msg.content else "")
        if msg.tool_calls:
            preview = (
                " ".join(f"{tc.name}({inert(tc.arguments)})" for tc in msg.tool_calls)
                + " "
                + preview
            )
        table.add_row(
            str(i),
            msg.role + (" (summary)" if msg.is_summary else ""),
            format_token_count(estimate_message_tokens(msg)),
            Text(fold_word if folded else "keep", style="yellow" if folded else "green"),
            Text(preview),
        )
    out.print(table)
    if plan.would_compact:
        n = summary["messages_to_summarize"]
        verdict = (
            f"would {fold_word} {n} message{'' if n == 1 else 's'} "
            f"and keep {summary['messages_kept']}"
        )
    else:
        verdict = (
            f"under the threshold ({format_token_count(plan.threshold)} tokens): "
            "nothing would be compacted"
        )
    out.print(
        f"{verdict}; tokens {format_token_count(plan.tokens_before)} → {format_token_count(plan.tokens_after)}"
        f" (window {format_token_count(summary['context_window'])}, threshold {format_token_count(plan.threshold)})"
    )
