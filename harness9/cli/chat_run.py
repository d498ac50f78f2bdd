"""What ``harness9 chat`` does once its flags are parsed: open the session, build the
engine and the loop, run it, save, say how to come back."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness9.cli.env import Environment
from harness9.cli.session_settings import resolve_settings
from harness9.errors import UsageError
from harness9.ui.text import corrupt_row_warning, inert, plural

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from harness9.config import Settings
    from harness9.store.session import SessionSettings


@dataclass(slots=True)
class ChatFlags:
    """What ``chat`` was asked for, parsed; ``run_chat`` does the rest."""

    one_shot: str | None
    model: str | None
    api_base: str | None
    context_window: int | None
    # Which of model / api_base / context_window were typed as flags (not taken from the
    # environment): only those override the settings a resumed session was run with.
    explicit: frozenset[str]
    resume: str | None
    continue_: bool
    yes: bool
    plain: bool
    workdir: Path | None
    stream: bool
    timeout: float
    strategy: str | None
    summary_model: str | None
    cache_ttl: str | None
    max_output_tokens: int | None
    auto_compact: bool | None


def run_chat(env: Environment, flags: ChatFlags) -> int:
    """The chat command after parsing: set up, run the loop, save, return the exit code."""
    from harness9.cli.mcp import chat_mcp
    from harness9.config import (
        context_options,
        load_config_file,
        provider_options,
        store_location,
        subagent_options,
        tool_options,
    )
    from harness9.engine.setup import resolve_workdir
    from harness9.provider import LLMProvider
    from harness9.store.backend import open_store
    from harness9.tools.offload import remove_session_offloads
    from harness9.ui import hangup

    repl = env.interactive and flags.one_shot is None
    if repl:
        _import_line_editor_in_background()
    cfg = load_config_file()
    opts = context_options(
        cfg, strategy=flags.strategy, summary_model=flags.summary_model, auto=flags.auto_compact
    )
    if flags.one_shot is not None:
        # One turn, then the process exits: a summary prepared ahead is cancelled unused at
        # the exit, a model call paid for by every one-shot between the early mark and the
        # threshold (`chat -c -p` in a loop). The compaction at the threshold makes its own.
        opts = replace(opts, prepare_ahead=False)
    tools = tool_options(cfg)
    popts = provider_options(
        cfg, cache_ttl=flags.cache_ttl, max_output_tokens=flags.max_output_tokens
    )
    work = resolve_workdir(flags.workdir)
    # Piped output is for programs: never hard-wrap it at an imagined 80 columns.
    markdown = env.stdout_isatty and not flags.plain and not os.environ.get("NO_COLOR")
    out = env.console(soft_wrap=not (markdown or env.interactive))
    err = out if repl else env.console(err=True, soft_wrap=not env.stderr_isatty)
    with open_store(store_location(cfg), on_session_deleted=remove_session_offloads) as manager:
        session, resumed = _open_session(manager, flags, work, err)
        stored = session.model_settings() if session is not None else None
        settings = session_settings(flags, stored)
        # One line naming the variable or flag to set, before any prompt or new session.
        LLMProvider(settings.model, settings.api_base).check_credentials()
        note = _retention(manager, cfg, session)
        if note:
            err.print(note, style="yellow", markup=False)
        started: set[str] = set()
        if session is None:
            session = manager.new_session()
            started.add(session.session_id)
        run = ChatRun(env, flags, settings, opts, tools.auto_approve, work, manager, out, err)
        run.provider_opts = popts
        run.subagents = subagent_options(cfg)
        run.mcp = chat_mcp(
            env, work, cfg, err, ask=env.stdin_isatty and env.stderr_isatty, repl=repl
        )
        # The window a session already ran with was announced then: not again (once a session).
        announced = stored is not None and settings.context_window == stored.context_window
        loop = run.build_loop(session, repl, markdown=markdown, started=started, quiet=announced)
        loop.recap_on_start = resumed
        hangup.install()  # a closed terminal or a kill ends the chat as Ctrl-D does
        try:
            code = loop.run() if flags.one_shot is None else loop.run_once(flags.one_shot)
        finally:
            if run.mcp is not None:
                run.mcp.manager.close()  # every stdio server's process ends with the chat
        return run.finish(loop, code, repl=repl)


def _retention(manager: Any, cfg: dict[str, Any], session: Any) -> str | None:
    from harness9.config import retention_days
    from harness9.store.retention import startup_retention

    days = retention_days(cfg)
    return startup_retention(manager, days, keep=[session.session_id] if session else [])


def _open_session(manager: Any, flags: ChatFlags, work: Path, err: Console) -> tuple[Any, bool]:
    """The session --resume or --continue names (None: a new one), and whether it was resumed.

    --continue takes the most recent session that ran in the working directory, and the
    most recent of all (saying so) when none did."""
    if flags.resume:
        session = manager.open_session(manager.resolve_id(flags.resume))
    elif flags.continue_:
        # An empty session (a chat killed at its first prompt) is nothing to continue.
        recent = [i for i in manager.list_sessions() if i.message_count > 0]
        if not recent:
            raise UsageError("no session to continue; start one with `harness9 chat`")
        here = [info for info in recent if info.workdir == str(work)]
        picked = (here or recent)[0]
        if not here:  # the recap says which session; this says why that one
            where = inert(picked.workdir) or "an unknown directory"
            err.print(
                f"no session ran in {inert(str(work))}; continuing the most recent one, of {where}",
                style="dim",
                markup=False,
                highlight=False,
            )
        session = manager.open_session(picked.id)
    else:
        return None, False
    session.get_records()  # resuming: say which damaged rows the model will not see
    for row in session.corrupt_rows:
        err.print(
            corrupt_row_warning(row.id, row.reason),
            style="yellow",
            markup=False,
        )
    return session, True


def session_settings(flags: ChatFlags, stored: SessionSettings | None) -> Settings:
    return resolve_settings(
        stored,
        model=flags.model,
        api_base=flags.api_base,
        context_window=flags.context_window,
        explicit=flags.explicit,
    )


class ChatRun:
    """The parts of one chat that outlive set-up: the engine factory /model uses, the
    window question to a local server, and the end (save what is held, the exit hint)."""

    def __init__(
        self,
        env: Environment,
        flags: ChatFlags,
        settings: Settings,
        opts: Any,
        auto_approve: tuple[str, ...],
        work: Path,
        manager: Any,
        out: Console,
        err: Console,
    ) -> None:
        self.env, self.flags, self.settings, self.opts = env, flags, settings, opts
        self.auto_approve, self.work, self.manager = auto_approve, work, manager
        self.out, self.err = out, err
        self.approver = self._approver()
        self.probe: Any = None
        self.notes: list[Text] = []
        self.learnt = False  # the window is one the server named in an earlier chat
        self.loop: Any = None
        self.provider_opts: Any = None  # the provider's knobs (cache TTL, max output tokens)
        self.subagents: Any = None  # the `task` tool's settings (None: the defaults)
        self.mcp: Any = None  # the chat's MCP servers (harness9.tools.mcp.toolset.McpTools)

    def _approver(self) -> Any:
        """Approvals need someone to answer: a terminal on stdin. In one-shot mode the
        question goes to stderr, so stdout stays the reply."""
        from harness9.ui.approval import TerminalApprover, discard_type_ahead

        env, err = self.env, self.err
        if not (env.stdin_isatty and (env.stdout_isatty or self.flags.one_shot is not None)):
            return None
        return TerminalApprover(
            err,
            ask=lambda prompt: _ask_line(err, env.stdin, prompt),
            flush=lambda: discard_type_ahead(env.stdin),
        )

    def _window(self, repl: bool, *, quiet: bool) -> int:
        """The window to start with. A local server is asked once (only for a model no
        table knows); at a terminal the question goes in the background once the prompt
        shows (it needs litellm, seconds to import) and is settled before the first turn."""
        from harness9.provider.limits import (
            WindowProbe,
            chat_limits,
            get_model_limits,
            server_would_answer,
            window_source,
        )

        s = self.settings
        if quiet:
            limits = get_model_limits(s.model, override=s.context_window, api_base=s.api_base)
            return limits.context_tokens
        if repl and server_would_answer(s.model, override=s.context_window, api_base=s.api_base):
            self.probe = WindowProbe(s.model, s.api_base)
            limits = get_model_limits(s.model, api_base=s.api_base)
            source = window_source(s.model)
            self.notes = window_notes(s.model, s.api_base, s.context_window, limits, source)
        else:
            limits, source = chat_limits(s.model, s.api_base, override=s.context_window)
            notes = window_notes(s.model, s.api_base, s.context_window, limits, source)
            self.notes = once_per_model(notes, s.model, s.api_base, source)
        return self._learnt(source, limits.context_tokens)

    def _learnt(self, source: str, window: int) -> int:
        """``window``, or the smaller one this model's server named in an earlier chat when
        nothing better than the tables says otherwise (a flag, the server itself)."""
        from rich.text import Text

        from harness9.cli.learnt_windows import learnt_window
        from harness9.tokens import format_token_count

        s = self.settings
        learnt = None if source in ("override", "server") else learnt_window(s.model, s.api_base)
        if learnt is None or learnt >= window:
            return window
        self.learnt = True
        self.notes = [
            Text(
                f"the context window of {s.model} is {learnt:,} tokens, as its server said when "
                f"it refused a longer request (not {format_token_count(window)}); set "
                "--context-window N if it now runs with more.",
                style="dim",
            )
        ]
        return learnt

    def make_engine(self, model_name: str, window: int, session: Any) -> Any:
        """An engine for ``session`` on ``model_name``, counting as the server did the last
        time the session ran on that model and API base (before any reply of this chat)."""
        from harness9.cli.learnt_windows import remember_window
        from harness9.engine.setup import build_engine

        engine = build_engine(
            replace(self.settings, model=model_name),
            self.opts,
            session,
            self.work,
            window,
            stream=self.flags.stream,
            timeout=self.flags.timeout,
            sleep=self.env.sleep,
            confirm=self.approver,
            assume_yes=self.flags.yes,
            auto_approve=self.auto_approve,
            blobs=self.manager.blob_store(),
            provider_opts=self.provider_opts,
            subagents=self.subagents,
            children=self.manager,
            compactor_factory=self.env.compactor_factory,
            mcp=self.mcp,
        )
        engine.seed_count(session.model_settings())
        engine.on_window_named = partial(remember_window, model_name, self.settings.api_base)
        return engine

    def switch_model(self, name: str, window: int | None) -> tuple[Any, list[Text]]:
        """/model NAME [WINDOW]: the same session on another model, window recomputed."""
        from harness9.config import check_model_name
        from harness9.provider import LLMProvider
        from harness9.provider.limits import chat_limits

        check_model_name(name, "/model")
        api_base = self.settings.api_base
        provider = LLMProvider(name, api_base)
        provider.check_credentials()
        # As --model's first call would: a name litellm cannot route is refused before
        # the chat switches, not found out at the next turn.
        provider.check_routable()
        new_limits, source = chat_limits(name, api_base, override=window)
        new_engine = self.make_engine(name, new_limits.context_tokens, self.loop.engine.session)
        new_engine.set_session(self.loop.engine.session)
        notes = window_notes(name, api_base, window, new_limits, source)
        return new_engine, once_per_model(notes, name, api_base, source)

    def resumed_engine(self, session: Any) -> tuple[Any, str, list[Text]] | None:
        """/resume: an engine with the model, API base and window ``session`` last ran
        with, decided as ``--resume`` decides them (None: those are the ones in use)."""
        from harness9.provider import LLMProvider
        from harness9.provider.limits import chat_limits

        stored = session.model_settings()
        if stored is None:
            return None
        # Nothing counts as typed: the flags this chat started with were for its first
        # session. An API base the session did not record stays this chat's.
        settings = resolve_settings(
            stored,
            model=self.settings.model,
            api_base=self.settings.api_base,
            context_window=None,
            explicit=frozenset(),
        )
        if (settings.model, settings.api_base) == (self.settings.model, self.settings.api_base):
            window = self.loop.engine.context_window
            if settings.context_window in (None, window):
                return None
        LLMProvider(settings.model, settings.api_base).check_credentials()
        limits, source = chat_limits(
            settings.model, settings.api_base, override=settings.context_window
        )
        self.settings = replace(
            self.settings,
            model=settings.model,
            api_base=settings.api_base,
            context_window=settings.context_window,
        )
        engine = self.make_engine(settings.model, limits.context_tokens, session)
        engine.set_session(session)
        quiet = stored.context_window == limits.context_tokens  # announced when it ran
        if quiet:
            return engine, settings.model, []
        notes = window_notes(
            settings.model, settings.api_base, settings.context_window, limits, source
        )
        return (
            engine,
            settings.model,
            once_per_model(notes, settings.model, settings.api_base, source),
        )

    def settle_window(self) -> tuple[int | None, list[Text]]:
        """The window the server reported (None: keep the guess) and what to say."""
        from harness9.provider.limits import window_source

        s = self.settings
        reported = self.probe.result()
        if reported is None and self.learnt:  # the window the server named before stands
            return None, self.notes
        if reported is None:  # the guess stands: warn about it, once per model
            return None, once_per_model(self.notes, s.model, s.api_base, window_source(s.model))
        return reported.context_tokens, window_notes(s.model, s.api_base, None, reported, "server")

    def build_loop(
        self, session: Any, repl: bool, *, markdown: bool, started: set[str], quiet: bool
    ) -> Any:
        from harness9.config import harness9_home
        from harness9.provider import preload_in_background
        from harness9.provider.pricing import call_cost
        from harness9.ui.repl import ChatIO, ChatLoop, stdin_reader, terminal_reader

        engine = self.make_engine(self.settings.model, self._window(repl, quiet=quiet), session)
        if engine.offload is not None:
            engine.offload.clean_stale()
        reader = stdin_reader(self.env.stdin)
        prefill = None
        if repl:
            # litellm starts importing once the prompt is drawn and loads while the user
            # types; started earlier, the import would slow the first draw.
            shown = preload_in_background if self.probe is None else self.probe.start
            editor = terminal_reader(
                harness9_home() / "prompt_history", on_shown=self._on_shown(shown)
            )
            reader, prefill = editor, editor.prefill
        self.loop = ChatLoop(
            engine,
            self.manager,
            ChatIO(self.out, self.err, reader, repl, markdown=markdown, prefill=prefill),
            self.settings.model,
            pricing=call_cost,
            approver=self.approver,
            switch_model=self.switch_model,
            resumed_engine=self.resumed_engine,
            notes=self.notes if self.probe is None else [],
            settle_window=self.settle_window if self.probe is not None else None,
            started=started,
        )
        return self.loop

    def _on_shown(self, then: Any) -> Any:
        """Once the prompt is on the screen: start the MCP servers (five Python servers
        starting take seconds of CPU the first draw should not share), then ``then``."""
        mcp = self.mcp

        def shown() -> None:
            if mcp is not None:
                mcp.manager.start()
            then()

        return shown

    def finish(self, loop: Any, code: int, *, repl: bool) -> int:
        """Save what a locked database held back (one more patient try), apply the
        empty-session rule, and at a terminal say how to come back to the session."""
        from harness9.store.session import SessionNotFoundError, StoreError

        engine = loop.engine
        engine.close()  # a summary still being prepared is cancelled, its thread ended
        reason = f"the session database {self.manager.location} stayed locked by another process"
        try:
            unsaved = engine.flush_held()
        except StoreError as exc:  # e.g. the disk filled up while a lock held them back
            unsaved, reason = len(engine.session.held), str(exc)
        if unsaved:
            self.err.print(
                f"error: {plural(unsaved, 'message')} of this session could not be saved: {reason}",
                style="red",
                markup=False,
            )
            return code or 1
        loop.leave()  # the sessions this chat started and left empty are removed
        if repl:
            sid = engine.session.session_id
            try:
                self.manager.session_info(sid)
            except SessionNotFoundError:
                return code  # nothing was said: nothing to come back to
            self.err.print(
                f"resume this session with: harness9 chat --resume {sid[:8]}", style="dim"
            )
        return code


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
    served locally (an --api-base, or a local server's provider: it runs the model with
    whatever window it was started with); for a model no table knows the guess is then
    the small end, ``LOCAL_GUESS``. ``source`` is ``chat_limits``'s (None: the tables'). A
    window a server reported is said once (an Ollama server is then told to use it,
    as num_ctx); an OpenAI-compatible server is asked on its own routes
    (provider/discovery.py), and when none answers the user is told how to set it.
    """
    from rich.text import Text

    from harness9.provider import window_source
    from harness9.provider.limits import served_locally
    from harness9.provider.ollama import is_ollama
    from harness9.tokens import format_token_count

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
    local = served_locally(model, api_base)
    if source == "map" or (source == "family" and not local):
        return []
    if local and source == "default":
        return [
            Text(
                f"the context window of {model} is not known; assuming {window}, the small "
                "end of what local servers run. Set the real one with --context-window N (or "
                "HARNESS9_CONTEXT_WINDOW): a larger one compacts later, a smaller one keeps "
                "requests from overflowing.",
                style="yellow",
            )
        ]
    return [
        Text(
            f"the context window of {model} is not known; assuming {window}. If the model "
            "or server has less, set it with --context-window N (or HARNESS9_CONTEXT_WINDOW) "
            "so compaction starts in time.",
            style="yellow",
        )
    ]


def once_per_model(notes: list[Text], model: str, api_base: str | None, source: str) -> list[Text]:
    """``notes`` the first time a guessed window is warned about for this model and API
    base (harness9.cli.learnt_windows remembers it); [] after that. The three lines on
    every one-shot only repeated what the first said (and how to set the window). A window
    the server reported (``source`` "server") is not a guess; it is said as before."""
    from harness9.cli.learnt_windows import first_warning

    if not notes or source == "server":
        return notes
    return notes if first_warning(model, api_base) else []


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
