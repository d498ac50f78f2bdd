"""``harness9 chat``: the REPL. Only this path (and ``compact``) ever loads litellm."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from harness9.errors import UsageError


def chat(
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="Model to talk to, as litellm names it (env LLM_MODEL; default openai/gpt-4o-mini).",
    ),
    api_base: str | None = typer.Option(
        None,
        "--api-base",
        help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1 (env LLM_API_BASE).",
    ),
    context_window: int | None = typer.Option(
        None,
        "--context-window",
        min=1,
        help="Context window in tokens; overrides the model map (env HARNESS9_CONTEXT_WINDOW).",
    ),
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
    workdir: Path | None = typer.Option(
        None,
        "--workdir",
        "-C",
        help="Directory the agent works in; file tools cannot leave it (default: current).",
    ),
    no_stream: bool = typer.Option(
        False, "--no-stream", help="Wait for whole replies instead of streaming them."
    ),
    timeout: int | None = typer.Option(
        None,
        "--timeout",
        min=1,
        metavar="SECONDS",
        help="Give up on a model call after this long, then retry (env HARNESS9_TIMEOUT; default 120).",
    ),
    strategy: str | None = typer.Option(
        None,
        "--strategy",
        help="Compaction: hybrid (default; alias phase2), summarize, budget, window or evict "
        "(config: compaction.strategy).",
    ),
    summary_model: str | None = typer.Option(
        None, "--summary-model", help="A cheaper model for summaries (config: compaction.model)."
    ),
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
    interactive = sys.stdin.isatty() and sys.stdout.isatty()

    if timeout is None and os.environ.get("HARNESS9_TIMEOUT"):
        raw = os.environ["HARNESS9_TIMEOUT"]
        if not raw.strip().isdigit() or int(raw) < 1:
            raise UsageError(f"HARNESS9_TIMEOUT must be a whole number of seconds, got {raw!r}")
        timeout = int(raw)
    # One line naming the variable or flag to set, before any prompt.
    LLMProvider(settings.model, settings.api_base).check_credentials()

    limits = get_model_limits(settings.model, override=settings.context_window)
    # Piped output is for programs: never hard-wrap it at an imagined 80 columns.
    from rich.console import Console

    out = Console(highlight=False, soft_wrap=not interactive)
    err = out if interactive else Console(stderr=True, highlight=False, soft_wrap=True)
    with open_manager() as manager:
        if resume:
            session = manager.open_session(manager.resolve_id(resume))
        elif continue_:
            recent = manager.list_sessions(limit=1)
            if not recent:
                raise UsageError("no session to continue; start one with `harness9 chat`")
            session = manager.open_session(recent[0].id)
        else:
            session = None
        note = startup_retention(manager, keep=[session.session_id] if session else [])
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
            confirm=_tty_confirm if interactive else None,
            assume_yes=yes,
        )
        if engine.policy.offload is not None:
            engine.policy.offload.clean_stale()
        reader = (
            readline_reader(str(harness9_home() / "history"))
            if interactive
            else stdin_reader(sys.stdin)
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


def _tty_confirm(question: str) -> bool:
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")
