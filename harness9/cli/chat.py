"""``harness9 chat``: the REPL. Only this path (and ``compact``) ever loads litellm."""

from __future__ import annotations

import typer

from harness9.cli import options
from harness9.cli.env import environment
from harness9.errors import UsageError


def chat(
    ctx: typer.Context,
    model: options.Model = None,
    api_base: options.ApiBase = None,
    context_window: options.ContextWindow = None,
    resume: str | None = typer.Option(
        None,
        "--resume",
        "-r",
        metavar="ID",
        help="Continue the session with this id (a unique prefix is enough).",
    ),
    continue_: bool = typer.Option(
        False, "--continue", "-c", help="Continue the most recently updated session."
    ),
    yes: bool = typer.Option(
        False, "--yes", "-y", help="Run shell commands without asking for confirmation."
    ),
    workdir: options.Workdir = None,
    no_stream: bool = typer.Option(
        False, "--no-stream", help="Wait for whole replies instead of streaming them."
    ),
    timeout: options.Timeout = None,
    strategy: options.Strategy = None,
    summary_model: options.SummaryModel = None,
    auto_compact: bool | None = typer.Option(
        None,
        "--auto-compact/--no-auto-compact",
        help="Compact automatically when the context fills up (config: compaction.auto; default on).",
    ),
) -> None:
    """Chat with the agent. Sessions are saved as you go; resume them with --resume or /resume.

    With stdin not a terminal, each input line is one user turn, replies go to
    stdout and token lines to stderr: `printf 'hi\\n' | harness9 chat`.
    """
    from harness9.config import Settings, context_options, harness9_home, load_config_file
    from harness9.engine.setup import build_engine, resolve_workdir
    from harness9.provider import LLMProvider, get_model_limits, preload_in_background
    from harness9.store.retention import startup_retention
    from harness9.store.sqlite import open_manager
    from harness9.ui.repl import ChatIO, ChatLoop, readline_reader, stdin_reader

    if resume and continue_:
        raise UsageError("use either --resume ID or --continue, not both")
    settings = Settings.from_env(model=model, api_base=api_base, context_window=context_window)
    cfg = load_config_file()
    opts = context_options(cfg, strategy=strategy, summary_model=summary_model, auto=auto_compact)
    work = resolve_workdir(workdir)
    env = environment(ctx)
    interactive = env.interactive
    # One line naming the variable or flag to set, before any prompt.
    LLMProvider(settings.model, settings.api_base).check_credentials()

    limits = get_model_limits(settings.model, override=settings.context_window)
    # Piped output is for programs: never hard-wrap it at an imagined 80 columns.
    out = env.console(soft_wrap=not interactive)
    err = out if interactive else env.console(err=True, soft_wrap=True)
    from harness9.context.offload import remove_session_offloads

    with open_manager(on_session_deleted=remove_session_offloads) as manager:
        if resume:
            session = manager.open_session(manager.resolve_id(resume))
        elif continue_:
            recent = manager.list_sessions(limit=1)
            if not recent:
                raise UsageError("no session to continue; start one with `harness9 chat`")
            session = manager.open_session(recent[0].id)
        else:
            session = None
        note = startup_retention(manager, cfg, keep=[session.session_id] if session else [])
        if note:
            err.print(note, style="yellow", markup=False)
        if session is None:
            session = manager.new_session()
        started_empty = not resume and not continue_

        engine = build_engine(
            settings,
            opts,
            session,
            work,
            limits.context_tokens,
            stream=not no_stream,
            timeout=float(timeout or 120),
            sleep=env.sleep,
            confirm=env.confirm if interactive else None,
            assume_yes=yes,
        )
        if engine.policy.offload is not None:
            engine.policy.offload.clean_stale()
        reader = (
            readline_reader(str(harness9_home() / "history"))
            if interactive
            else stdin_reader(env.stdin)
        )
        loop = ChatLoop(
            engine,
            manager,
            ChatIO(out, err, reader, interactive),
            settings.model,
            # In a terminal the prompt is ready at once and litellm imports while the user types.
            on_ready=preload_in_background if interactive else None,
        )
        code = loop.run()
        # Do not leave an empty session behind for every chat that was opened and closed.
        current = engine.session
        if started_empty and current.session_id == session.session_id:
            manager.delete_if_empty(current.session_id)
    raise typer.Exit(code)
