"""``harness9 compact``: preview (--dry-run) or perform a compaction of a stored session."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from harness9.errors import UsageError

if TYPE_CHECKING:
    from rich.console import Console

# Rows of a dry-run table before the folded span is collapsed to its ends.
_MAX_ROWS = 40


def compact(
    session: str | None = typer.Option(
        None,
        "--session",
        "-s",
        metavar="ID",
        help="Session to compact (a unique id prefix is enough).",
    ),
    last: bool = typer.Option(
        False, "--last", help="Compact the most recently updated session (the default)."
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Show what would be folded and what kept; call no model, write nothing.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON object instead of a table."),
    strategy: str | None = typer.Option(
        None,
        "--strategy",
        help="hybrid (stub old tool results, then summarise; the default; alias phase2), "
        "summarize (LLM summary), budget (drop oldest), window (last 100 messages), "
        "evict (replace old low-value tool results); "
        "default: compaction.strategy in config.toml.",
    ),
    force: bool = typer.Option(
        False, "--force", help="Compact even when the context is under the threshold."
    ),
    context_window: int | None = typer.Option(
        None,
        "--context-window",
        min=1,
        help="Context window in tokens (default: the one the session last used in chat, "
        "then env HARNESS9_CONTEXT_WINDOW).",
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="Model whose window applies and who summarises (default: the one the session "
        "last used in chat, then env LLM_MODEL).",
    ),
    api_base: str | None = typer.Option(
        None, "--api-base", help="OpenAI-compatible server URL (env LLM_API_BASE)."
    ),
    workdir: Path | None = typer.Option(
        None,
        "--workdir",
        "-C",
        help="Directory whose AGENTS.md the system prompt includes (default: current).",
    ),
) -> None:
    """Fold old messages of a session into a summary checkpoint, as chat does on overflow.

    The stored messages are never deleted: a checkpoint records the summary and
    the last message it covers, and chat sends the summary plus what follows.
    """
    from harness9.config import Settings, context_options
    from harness9.engine.setup import build_engine, resolve_workdir
    from harness9.provider import get_model_limits
    from harness9.store.sqlite import open_existing_manager

    if session and last:
        raise UsageError("use either --session ID or --last, not both")
    opts = context_options(strategy=strategy)
    work = resolve_workdir(workdir)
    from rich.console import Console

    out = Console(highlight=False, soft_wrap=not sys.stdout.isatty())
    err = Console(stderr=True, highlight=False)

    manager = open_existing_manager()  # a preview must not create a database
    if manager is None:
        raise UsageError("there are no sessions to compact")
    with manager:
        if session:
            sess = manager.open_session(manager.resolve_id(session))
        else:
            recent = manager.list_sessions(limit=1)
            if not recent:
                raise UsageError("there are no sessions to compact")
            sess = manager.open_session(recent[0].id)
        # The model and window chat last used for this session, unless a flag says otherwise:
        # judged against another window, the session would compact at another point.
        stored = sess.model_settings()
        if stored is not None:
            model = model or stored[0]
            context_window = context_window or stored[1] or None
        settings = Settings.from_env(model=model, api_base=api_base, context_window=context_window)
        limits = get_model_limits(settings.model, override=settings.context_window)
        engine = build_engine(settings, opts, sess, work, limits.context_tokens)
        view, plan = engine.plan_compaction(force=force)
        assert plan is not None
        if dry_run:
            summary = {
                "session": sess.session_id,
                "would_compact": plan.would_compact,
                "strategy": plan.strategy,
                "tokens_before": plan.tokens_before,
                "tokens_after": plan.tokens_after,
                "messages_to_summarize": plan.cut - 1 if plan.would_compact else 0,
                "messages_kept": len(view.messages) - (plan.cut if plan.would_compact else 1),
                "context_window": limits.context_tokens,
                "threshold": plan.threshold,
            }
            if as_json:
                print(json.dumps(summary))
            else:
                _render_plan(out, view, plan, summary)
            return

        if opts.strategy in ("hybrid", "summarize"):
            from harness9.provider import LLMProvider

            LLMProvider(settings.model, settings.api_base).check_credentials()
        from harness9.engine import events as ev

        status = err.status("compacting…", spinner="dots") if sys.stderr.isatty() else None

        def on_event(event: ev.Event) -> None:
            if status is None:
                return
            if isinstance(event, ev.CompactionProgress):
                status.update(f"summarising part {event.chunk} of {event.total}…")

        engine.on_event = on_event
        if status is not None:
            status.start()
        try:
            notice = engine.compact_now(force=force)
        finally:
            if status is not None:
                status.stop()
        if as_json:
            print(
                json.dumps(
                    {
                        "session": sess.session_id,
                        "compacted": notice is not None,
                        "strategy": notice.strategy if notice else plan.strategy,
                        "tokens_before": notice.tokens_before if notice else plan.tokens_before,
                        "tokens_after": notice.tokens_after if notice else plan.tokens_before,
                        "messages_before": notice.msgs_before if notice else len(view.messages),
                        "messages_after": notice.msgs_after if notice else len(view.messages),
                        "fallback_reason": notice.fallback_reason if notice else None,
                    }
                )
            )
            return
        from harness9.context.tokens import format_token_count
        from harness9.ui.status import compaction_notice

        if notice is None:
            out.print(
                f"nothing to compact: {format_token_count(plan.tokens_before)} tokens is under the "
                f"{format_token_count(plan.threshold)} threshold (use --force to compact anyway)"
                if not plan.would_compact
                else "nothing to compact: nothing left to fold"
            )
            return
        out.print(compaction_notice(notice))


def _render_plan(out: Console, view, plan, summary: dict) -> None:  # noqa: ANN001
    from rich.table import Table
    from rich.text import Text

    from harness9.context.tokens import estimate_message_tokens, format_token_count
    from harness9.ui.status import inert

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
    if len(rows) > _MAX_ROWS:
        # Collapse the middle of the folded span, then of the kept span if still too long.
        head, tail = rows[: _MAX_ROWS // 4], rows[-(_MAX_ROWS * 3 // 4) :]
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
    verdict = (
        f"would {fold_word} {summary['messages_to_summarize']} messages and keep {summary['messages_kept']}"
        if plan.would_compact
        else f"under the threshold ({format_token_count(plan.threshold)} tokens): nothing would be compacted"
    )
    out.print(
        f"{verdict}; tokens {format_token_count(plan.tokens_before)} → {format_token_count(plan.tokens_after)}"
        f" (window {format_token_count(summary['context_window'])}, threshold {format_token_count(plan.threshold)})"
    )
