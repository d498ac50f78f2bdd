"""``harness9 chat``: the REPL. Only this path (and ``compact``) ever loads litellm."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import typer

from harness9.cli import options
from harness9.cli.env import environment
from harness9.errors import UsageError

if TYPE_CHECKING:
    from rich.text import Text


def chat(
    ctx: typer.Context,
    prompt_arg: str | None = typer.Argument(
        None,
        metavar="PROMPT",
        help="Ask this, print the reply and exit (one turn; the session is kept).",
        show_default=False,
    ),
    prompt_opt: str | None = typer.Option(
        None,
        "--prompt",
        "-p",
        metavar="TEXT",
        help="Same as the PROMPT argument: one turn, reply on stdout, then exit.",
    ),
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
        False,
        "--yes",
        "-y",
        help="Run shell commands and write files without asking for confirmation.",
    ),
    plain: bool = typer.Option(
        False,
        "--plain",
        help="Print replies as the model's exact text, not rendered Markdown (also NO_COLOR).",
    ),
    workdir: options.Workdir = None,
    no_stream: bool = typer.Option(
        False, "--no-stream", help="Wait for whole replies instead of streaming them."
    ),
    timeout: options.Timeout = None,
    strategy: options.Strategy = None,
    summary_model: options.SummaryModel = None,
    cache_ttl: options.CacheTtl = None,
    max_output_tokens: options.MaxOutputTokens = None,
    auto_compact: bool | None = typer.Option(
        None,
        "--auto-compact/--no-auto-compact",
        help="Compact automatically when the context fills up (config: compaction.auto; default on).",
    ),
) -> None:
    """Chat with the agent. Sessions are saved as you go; resume them with --resume or /resume.

    `harness9 chat "question"` (or -p) runs one turn and exits: the reply on
    stdout, token line and notices on stderr, exit code 1 if the turn failed.
    With stdin not a terminal, each input line is one user turn, replies go to
    stdout and token lines to stderr: `printf 'hi\\n' | harness9 chat`.
    In a terminal, Alt-Enter or a line ending in \\ continues the message on a
    new line, and a paste is sent as one message.
    """
    env = environment(ctx)
    if resume and continue_:
        raise UsageError("use either --resume ID or --continue, not both")
    if prompt_arg is not None and prompt_opt is not None:
        raise UsageError("give the prompt either as an argument or with --prompt, not both")
    one_shot = prompt_arg if prompt_arg is not None else prompt_opt
    if one_shot is not None and not one_shot.strip():
        raise UsageError("the prompt is empty")
    repl = env.interactive and one_shot is None
    if repl:
        _import_line_editor_in_background()

    from harness9.config import (
        Settings,
        context_options,
        harness9_home,
        load_config_file,
        provider_options,
        retention_days,
        store_location,
        subagent_options,
        tool_options,
    )
    from harness9.engine.setup import build_engine, resolve_workdir
    from harness9.provider import LLMProvider, preload_in_background
    from harness9.provider.limits import (
        WindowProbe,
        chat_limits,
        get_model_limits,
        server_would_answer,
        window_source,
    )
    from harness9.provider.pricing import call_cost
    from harness9.store.backend import open_store
    from harness9.store.retention import startup_retention
    from harness9.store.session import StoreError
    from harness9.ui import hangup
    from harness9.ui.approval import TerminalApprover, discard_type_ahead
    from harness9.ui.repl import ChatIO, ChatLoop, stdin_reader, terminal_reader

    settings = Settings.from_env(model=model, api_base=api_base, context_window=context_window)
    cfg = load_config_file()
    opts = context_options(cfg, strategy=strategy, summary_model=summary_model, auto=auto_compact)
    tools = tool_options(cfg)
    popts = provider_options(cfg, cache_ttl=cache_ttl, max_output_tokens=max_output_tokens)
    subagents = subagent_options(cfg)
    work = resolve_workdir(workdir)
    interactive = env.interactive
    # Markdown only for a person reading a terminal; pipes and NO_COLOR get the exact text.
    markdown = env.stdout_isatty and not plain and not os.environ.get("NO_COLOR")
    # One line naming the variable or flag to set, before any prompt.
    LLMProvider(settings.model, settings.api_base).check_credentials()

    # A local server is asked for the window once (only for a model no table knows). At a
    # terminal the question goes in the background once the prompt shows (it needs
    # litellm, seconds to import) and is settled before the first turn or command.
    probe = None
    if repl and server_would_answer(settings.model, override=settings.context_window):
        probe = WindowProbe(settings.model, settings.api_base)
        limits, window_from = get_model_limits(settings.model), window_source(settings.model)
    else:
        limits, window_from = chat_limits(
            settings.model, settings.api_base, override=settings.context_window
        )
    notes = window_notes(
        settings.model, settings.api_base, settings.context_window, limits, window_from
    )
    # Piped output is for programs: never hard-wrap it at an imagined 80 columns.
    out = env.console(soft_wrap=not (markdown or interactive))
    err = out if repl else env.console(err=True, soft_wrap=not env.stderr_isatty)
    # Approvals need someone to answer: a terminal on stdin. In one-shot mode the question
    # goes to stderr, so stdout stays the reply.
    approver = None
    if env.stdin_isatty and (env.stdout_isatty or one_shot is not None):
        approver = TerminalApprover(
            err,
            ask=lambda prompt: _ask_line(err, env.stdin, prompt),
            flush=lambda: discard_type_ahead(env.stdin),
        )
    from harness9.context.offload import remove_session_offloads

    with open_store(store_location(cfg), on_session_deleted=remove_session_offloads) as manager:
        if resume:
            session = manager.open_session(manager.resolve_id(resume))
        elif continue_:
            # An empty session (a chat killed at its first prompt) is nothing to continue.
            recent = [i for i in manager.list_sessions() if i.message_count > 0][:1]
            if not recent:
                raise UsageError("no session to continue; start one with `harness9 chat`")
            session = manager.open_session(recent[0].id)
        else:
            session = None
        if session is not None:
            session.get_records()  # resuming: say which damaged rows the model will not see
            for row in session.corrupt_rows:
                err.print(
                    f"warning: message row {row.id} is corrupt ({row.reason}); skipped",
                    style="yellow",
                    markup=False,
                )
        days = retention_days(cfg)
        note = startup_retention(manager, days, keep=[session.session_id] if session else [])
        if note:
            err.print(note, style="yellow", markup=False)
        started: set[str] = set()
        if session is None:
            session = manager.new_session()
            started.add(session.session_id)

        def make_engine(model_name: str, window: int) -> Any:
            return build_engine(
                replace(settings, model=model_name),
                opts,
                session,
                work,
                window,
                stream=not no_stream,
                timeout=float(timeout or 120),
                sleep=env.sleep,
                confirm=approver,
                assume_yes=yes,
                auto_approve=tools.auto_approve,
                blobs=manager.blob_store(),
                provider_opts=popts,
                subagents=subagents,
                children=manager,
            )

        engine = make_engine(settings.model, limits.context_tokens)
        if engine.policy.offload is not None:
            engine.policy.offload.clean_stale()

        def switch_model(name: str, window: int | None) -> tuple[Any, list[Text]]:
            """/model NAME [WINDOW]: the same session on another model, window recomputed."""
            LLMProvider(name, settings.api_base).check_credentials()
            new_limits, source = chat_limits(name, settings.api_base, override=window)
            new_engine = make_engine(name, new_limits.context_tokens)
            new_engine.set_session(loop.engine.session)
            return new_engine, window_notes(name, settings.api_base, window, new_limits, source)

        reader = stdin_reader(env.stdin)
        if repl:
            # litellm starts importing once the prompt is drawn and loads while the user
            # types; started earlier, the import would slow the first draw.
            reader = terminal_reader(
                harness9_home() / "prompt_history",
                on_shown=preload_in_background if probe is None else probe.start,
            )

        def settle_window() -> tuple[int | None, list[Text]]:
            """The window the server reported (None: keep the guess) and what to say."""
            assert probe is not None
            reported = probe.result()
            if reported is None:
                return None, notes
            return reported.context_tokens, window_notes(
                settings.model, settings.api_base, None, reported, "server"
            )

        loop = ChatLoop(
            engine,
            manager,
            ChatIO(out, err, reader, repl, markdown=markdown),
            settings.model,
            pricing=call_cost,
            approver=approver,
            switch_model=switch_model,
            notes=notes if probe is None else [],
            settle_window=settle_window if probe is not None else None,
            recap_on_start=bool(resume or continue_),
            started=started,
        )
        hangup.install()  # a closed terminal or a kill ends the chat as Ctrl-D does
        code = loop.run() if one_shot is None else loop.run_once(one_shot)
        # A reply held back by a locked database gets one more patient try before exit.
        reason = f"the session database {manager.location} stayed locked by another process"
        try:
            unsaved = engine.flush_held()
        except StoreError as exc:  # e.g. the disk filled up while a lock held them back
            unsaved, reason = len(engine.session.held), str(exc)
        if unsaved:
            what = "1 message" if unsaved == 1 else f"{unsaved} messages"
            err.print(
                f"error: {what} of this session could not be saved: {reason}",
                style="red",
                markup=False,
            )
            code = code or 1
        else:
            loop.leave()  # the sessions this chat started and left empty are removed
    raise typer.Exit(code)


def _ask_line(console: Any, stdin: Any, prompt: str) -> str:
    """The question on ``console``, one line of answer from ``stdin`` (EOFError at the end)."""
    console.print(prompt, end="", markup=False, highlight=False)
    console.file.flush()
    line = stdin.readline()
    if not line:
        raise EOFError
    return line


def window_notes(
    model: str,
    api_base: str | None,
    override: int | None,
    limits: Any,
    source: str | None = None,
) -> list[Text]:
    """A warning when the window is a guess: no override and no table that knows the model.

    A model only the name-based family table knows counts as a guess when it is
    served from an --api-base (a local server runs it with whatever window it was
    started with). ``source`` is ``chat_limits``'s (None: the tables' alone). A
    window a server reported is said once (an Ollama server is then told to use it,
    as num_ctx); litellm offers no public way to ask an OpenAI-compatible server,
    so for those the user is told how to set it instead.
    """
    from rich.text import Text

    from harness9.context.tokens import format_token_count
    from harness9.provider import window_source
    from harness9.provider.ollama import is_ollama

    if override is not None or source == "override":
        return []
    window = format_token_count(limits.context_tokens)
    if source == "server" and is_ollama(model):
        return [
            Text(
                f"the context window of {model} is {window}, as its server reports; it is "
                "sent as num_ctx with every request (set --context-window N for less, e.g. "
                "to save the server's memory).",
                style="dim",
            )
        ]
    if source == "server":
        return [
            Text(
                f"the context window of {model} is {window}, as its server reports; if the "
                "server runs it with less, set --context-window N (or HARNESS9_CONTEXT_WINDOW).",
                style="dim",
            )
        ]
    source = source or window_source(model)
    if source == "map" or (source == "family" and not api_base):
        return []
    return [
        Text(
            f"the context window of {model} is not known; assuming {window}. If the model "
            "or server has less, set it with --context-window N (or HARNESS9_CONTEXT_WINDOW) "
            "so compaction starts in time.",
            style="yellow",
        )
    ]


def _import_line_editor_in_background() -> None:
    """Start importing prompt_toolkit while the store opens and the engine is built.

    The import is ~0.1 s of the time to the first prompt; overlapped with the
    start-up's own file reads it shortened time-to-prompt by ~10 % in
    scripts/bench_startup.py-style runs. The line editor's own import waits for it.
    """
    import contextlib
    import threading

    def run() -> None:
        # Any failure resurfaces, with its traceback, at the real import.
        with contextlib.suppress(Exception):
            import prompt_toolkit  # noqa: F401

    threading.Thread(target=run, name="harness9-line-editor-import", daemon=True).start()
