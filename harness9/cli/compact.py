"""``harness9 compact``: preview (--dry-run) or perform a compaction of a stored session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from harness9.cli import options
from harness9.cli.env import Environment, environment
from harness9.cli.session_settings import given_on_command_line, resolve_settings
from harness9.errors import HarnessError, UsageError
from harness9.ui.text import plural

if TYPE_CHECKING:
    from harness9.config import ContextOptions, Settings
    from harness9.context.pipeline import CompactionPlan


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
    The session's own model, API base and window (as chat last ran it) are used
    unless a flag says otherwise. Exit code 1 when the summary asked for failed.
    """
    from harness9.config import context_options, store_location
    from harness9.engine.setup import resolve_workdir
    from harness9.store.backend import open_existing_store

    if session and last:
        raise UsageError("use either --session ID or --last, not both")
    opts = context_options(strategy=strategy, summary_model=summary_model)
    work = resolve_workdir(workdir)
    env = environment(ctx)
    explicit = given_on_command_line(ctx, "model", "api_base", "context_window")
    manager = open_existing_store(store_location())  # a preview must not create a database
    if manager is None:
        raise HarnessError("there are no sessions to compact")
    with manager:
        sess = _target(manager, session)
        # Judged against another window or sent to another server, the session would
        # compact at another point, or leave the machine: what chat last used, unless told.
        stored = sess.model_settings()
        settings = resolve_settings(
            stored,
            model=model,
            api_base=api_base,
            context_window=context_window,
            explicit=explicit,
        )
        engine = _engine(
            env, manager, sess, settings, opts, work, float(timeout or options.DEFAULT_TIMEOUT_S)
        )
        engine.seed_count(stored)  # its figures are the server's count, as chat showed them
        if dry_run:
            _dry_run(env, engine, sess.session_id, as_json=as_json, force=force)
            return
        code = _compact(env, manager, engine, opts.strategy, as_json=as_json, force=force)
    raise typer.Exit(code)


def _target(manager: Any, prefix: str | None) -> Any:
    if prefix:
        return manager.open_session(manager.resolve_id(prefix))
    recent = manager.list_sessions(limit=1)
    if not recent:
        raise HarnessError("there are no sessions to compact")
    return manager.open_session(recent[0].id)


def _engine(
    env: Environment,
    manager: Any,
    sess: Any,
    settings: Settings,
    opts: ContextOptions,
    work: Path,
    timeout: float,
) -> Any:
    from harness9.config import provider_options, subagent_options
    from harness9.engine.setup import build_engine
    from harness9.provider import get_model_limits

    limits = get_model_limits(
        settings.model, override=settings.context_window, api_base=settings.api_base
    )
    return build_engine(
        settings,
        opts,
        sess,
        work,
        limits.context_tokens,
        timeout=timeout,
        sleep=env.sleep,
        blobs=manager.blob_store(),
        provider_opts=provider_options(),  # its max_tokens sets the threshold's head-room
        # Never run here; offered so the tool definitions measured are chat's.
        subagents=subagent_options(),
        children=manager,
    )


def _dry_run(env: Environment, engine: Any, session_id: str, *, as_json: bool, force: bool) -> None:
    view, plan = engine.plan_compaction(force=force)
    summary = {
        "session": session_id,
        "would_compact": plan.would_compact,
        "strategy": plan.strategy,
        "tokens_before": plan.tokens_before,
        "tokens_after": plan.tokens_after if plan.would_compact else plan.tokens_before,
        # It would fold, but save too little to be worth making.
        "too_small": plan.too_small,
        "messages_to_summarize": plan.cut - 1 if plan.would_compact else 0,
        "messages_kept": len(view.messages) - (plan.cut if plan.would_compact else 1),
        "context_window": engine.context_window,
        "threshold": plan.threshold,
    }
    if as_json:
        env.echo(json.dumps(summary))
        return
    from harness9.ui.compaction_plan import render_plan

    # Rows are named by their #N in the session, as `sessions show` numbers them.
    numbers = {rec.id: n for n, rec in enumerate(engine.session.get_records(), start=1)}
    render_plan(env.console(), view, plan, summary, numbers)


def _compact(
    env: Environment, manager: Any, engine: Any, strategy: str, *, as_json: bool, force: bool
) -> int:
    """Run the compaction, showing progress and retries on stderr; the result on stdout."""
    view, plan = engine.plan_compaction(force=force)
    from harness9.context.pipeline import MODEL_FREE_STRATEGIES

    if strategy not in MODEL_FREE_STRATEGIES:
        from harness9.provider import LLMProvider

        LLMProvider(engine.provider.model, engine.provider.api_base).check_credentials()
    err = env.console(err=True)  # a pipe gets whole lines, a terminal wrapped ones
    status = err.status("compacting…", spinner="dots") if env.stderr_isatty else None
    engine.on_event = _progress(manager, engine.session.session_id, err, status)
    if status is not None:
        status.start()
    try:
        notice = engine.compact_now(force=force)
    finally:
        if status is not None:
            status.stop()
    return _show_result(env, err, engine, notice, plan, view, as_json=as_json, force=force)


def _show_result(
    env: Environment,
    err: Any,
    engine: Any,
    notice: Any,
    plan: CompactionPlan,
    view: Any,
    *,
    as_json: bool,
    force: bool,
) -> int:
    """What the compaction did (or why it did nothing); exit code 1 when a summary asked
    for could not be made and what was kept is a truncation."""
    from rich.text import Text

    from harness9.ui.status import compaction_notice

    code = 1 if notice is not None and notice.fallback_reason else 0
    if as_json:
        env.echo(json.dumps(_result_json(engine.session.session_id, notice, plan, view)))
    elif notice is None:
        from harness9.context.pipeline import Pipeline

        comp = engine.policy.compactor
        steps = comp.steps if isinstance(comp, Pipeline) else None
        window = steps.max_messages if steps is not None and steps.cut == "window" else None
        env.console().print(
            _nothing_to_compact(plan, len(view.messages), force=force, window=window)
        )
    else:
        env.console().print(compaction_notice(notice))
    if code:
        err.print(Text("error: the summary failed; the session was truncated instead", style="red"))
    return code


def _progress(manager: Any, session_id: str, err: Any, status: Any) -> Any:
    """The engine's event sink while compacting: bill the summary's calls, show progress,
    and one line per retry (a silent backoff looks like a hang), as chat does."""
    from rich.text import Text

    from harness9.engine import events as ev
    from harness9.engine.metering import record_usage
    from harness9.provider.pricing import call_cost
    from harness9.ui.text import inert

    def on_event(event: ev.Event) -> None:
        if isinstance(event, ev.ModelUsage):  # the summary's calls are billed: count them
            record_usage(manager, session_id, event, call_cost)
        elif isinstance(event, ev.Retrying):
            line = f"{inert(event.reason)}; retrying in {event.delay:.1f}s (retry {event.attempt})"
            err.print(Text(line, style="yellow"))
        elif isinstance(event, ev.CompactionProgress) and status is not None:
            status.update(f"summarising part {event.chunk} of {event.total}…")

    return on_event


def _result_json(session_id: str, notice: Any, plan: Any, view: Any) -> dict[str, Any]:
    return {
        "session": session_id,
        "compacted": notice is not None,
        "strategy": notice.strategy if notice else plan.strategy,
        "tokens_before": notice.tokens_before if notice else plan.tokens_before,
        "tokens_after": notice.tokens_after if notice else plan.tokens_before,
        "messages_before": notice.msgs_before if notice else len(view.messages),
        "messages_after": notice.msgs_after if notice else len(view.messages),
        "fallback_reason": notice.fallback_reason if notice else None,
    }


def _nothing_to_compact(
    plan: CompactionPlan, messages: int, *, force: bool, window: int | None
) -> str:
    """Why a compaction folded nothing, in the units the strategy goes by."""
    from harness9.tokens import format_token_count

    if plan.too_small:
        from harness9.ui.compaction_plan import too_small_reason

        return f"nothing to compact: {too_small_reason(plan)}"
    tokens = f"{format_token_count(plan.tokens_before)} tokens"
    threshold = f"the {format_token_count(plan.threshold)}-token threshold"
    under = f"{tokens} is under {threshold}"
    if window is not None:
        # The window keeps the last N messages, forced or not ("the last 100 messages").
        fits = (
            f"nothing to compact: {plural(messages, 'message')} fit in the {window}-message window"
        )
        return f"{fits} and {under}" if plan.threshold > 0 else fits
    if force or plan.would_compact:
        return "nothing to compact: nothing left to fold"
    if plan.tokens_before > plan.threshold > 0:
        from harness9.ui.compaction_plan import FOLDS_NOTHING

        return f"nothing to compact: {tokens} is over {threshold}, but {FOLDS_NOTHING}"
    return f"nothing to compact: {under} (use --force to compact anyway)"
