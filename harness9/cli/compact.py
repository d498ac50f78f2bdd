"""``harness9 compact``: preview (--dry-run) or perform a compaction of a stored session."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer

from harness9.cli import options
from harness9.cli.env import environment
from harness9.errors import HarnessError, UsageError

if TYPE_CHECKING:
    from harness9.context.compaction import CompactionPlan


def compact(
    ctx: typer.Context,
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
    strategy: options.Strategy = None,
    summary_model: options.SummaryModel = None,
    force: bool = typer.Option(
        False, "--force", help="Compact even when the context is under the threshold."
    ),
    context_window: options.ContextWindow = None,
    model: options.Model = None,
    api_base: options.ApiBase = None,
    workdir: options.Workdir = None,
    timeout: options.Timeout = None,
) -> None:
    """Fold old messages of a session into a summary checkpoint, as chat does on overflow.

    The stored messages are never deleted: a checkpoint records the summary and
    the last message it covers, and chat sends the summary plus what follows.
    """
    from harness9.config import (
        Settings,
        context_options,
        provider_options,
        store_location,
        subagent_options,
    )
    from harness9.engine.setup import build_engine, resolve_workdir
    from harness9.provider import get_model_limits
    from harness9.store.backend import open_existing_store

    if session and last:
        raise UsageError("use either --session ID or --last, not both")
    opts = context_options(strategy=strategy, summary_model=summary_model)
    work = resolve_workdir(workdir)
    env = environment(ctx)
    out = env.console()
    err = env.console(err=True, soft_wrap=False)

    manager = open_existing_store(store_location())  # a preview must not create a database
    if manager is None:
        raise HarnessError("there are no sessions to compact")
    with manager:
        if session:
            sess = manager.open_session(manager.resolve_id(session))
        else:
            recent = manager.list_sessions(limit=1)
            if not recent:
                raise HarnessError("there are no sessions to compact")
            sess = manager.open_session(recent[0].id)
        # The model and window chat last used for this session, unless a flag says otherwise:
        # judged against another window, the session would compact at another point.
        stored = sess.model_settings()
        if stored is not None:
            model = model or stored[0]
            context_window = context_window or stored[1] or None
        settings = Settings.from_env(model=model, api_base=api_base, context_window=context_window)
        limits = get_model_limits(settings.model, override=settings.context_window)
        engine = build_engine(
            settings,
            opts,
            sess,
            work,
            limits.context_tokens,
            timeout=float(timeout or 120),
            sleep=env.sleep,
            blobs=manager.blob_store(),
            provider_opts=provider_options(),  # its max_tokens sets the threshold's head-room
            # Never run here; offered so the tool definitions measured are chat's.
            subagents=subagent_options(),
            children=manager,
        )
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
                env.echo(json.dumps(summary))
            else:
                from harness9.ui.compaction_plan import render_plan

                render_plan(out, view, plan, summary)
            return

        if opts.strategy in ("hybrid", "summarize"):
            from harness9.provider import LLMProvider

            LLMProvider(settings.model, settings.api_base).check_credentials()
        from harness9.engine import events as ev
        from harness9.engine.metering import record_usage
        from harness9.provider.pricing import call_cost

        status = err.status("compacting…", spinner="dots") if env.stderr_isatty else None

        def on_event(event: ev.Event) -> None:
            if isinstance(event, ev.ModelUsage):  # the summary's calls are billed: count them
                record_usage(manager, sess.session_id, event, call_cost)
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
            env.echo(
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
        from harness9.ui.status import compaction_notice

        if notice is None:
            from harness9.context.compaction import SlidingWindowCompactor

            comp = engine.policy.compactor
            window = comp.max_messages if isinstance(comp, SlidingWindowCompactor) else None
            out.print(_nothing_to_compact(plan, len(view.messages), force=force, window=window))
            return
        out.print(compaction_notice(notice))


def _nothing_to_compact(
    plan: CompactionPlan, messages: int, *, force: bool, window: int | None
) -> str:
    """Why a compaction folded nothing, in the units the strategy goes by."""
    from harness9.context.tokens import format_token_count

    under = (
        f"{format_token_count(plan.tokens_before)} tokens is under the "
        f"{format_token_count(plan.threshold)}-token threshold"
    )
    if window is not None:
        # The window keeps the last N messages, forced or not ("the last 100 messages").
        fits = (
            f"nothing to compact: {_plural(messages, 'message')} fit in the {window}-message window"
        )
        return f"{fits} and {under}" if plan.threshold > 0 else fits
    if force or plan.would_compact:
        return "nothing to compact: nothing left to fold"
    return f"nothing to compact: {under} (use --force to compact anyway)"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
