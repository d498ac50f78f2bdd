"""The chat loop: read a line, run a turn or a slash command, render the engine's events.

The loop is a function of injected parts (engine, store, consoles, a line
reader), so tests drive it by feeding lines. With stdin not a TTY it prints no
prompts and no colours, sends replies to stdout and token lines/notices to
stderr, and exits at EOF: ``printf 'hi\\n' | harness9 chat`` is scriptable.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.status import Status
from rich.table import Table
from rich.text import Text

from harness9.context.tokens import format_token_count
from harness9.engine import events as ev
from harness9.engine.engine import AgentEngine
from harness9.errors import HarnessError
from harness9.ui.search_view import render_hits
from harness9.ui.status import (
    compaction_notice,
    token_line,
    tool_call_line,
    tool_result_line,
)
from harness9.ui.text import inert

SLASH_COMMANDS: dict[str, str] = {
    "/help": "show this help",
    "/new": "start a new session",
    "/resume": "pick one of the 10 most recent sessions to continue",
    "/undo": "remove the last exchange (your last message and everything after it)",
    "/compact": "compact the context now; optional focus instructions follow the command",
    "/context": "show what the next request would carry, in tokens",
    "/search": 'search past sessions (/search WORDS or "a phrase"); pick a hit to resume it',
    "/exit": "leave (Ctrl-D works too)",
}


@dataclass
class ChatIO:
    out: Console  # replies
    err: Console  # token lines, notices, errors (stderr when not interactive)
    read_line: Callable[[str], str]  # raises EOFError at the end, KeyboardInterrupt on Ctrl-C
    interactive: bool


class EventRenderer:
    """Turns engine events into terminal output. One instance per chat."""

    def __init__(self, io: ChatIO, model: str, session_id: Callable[[], str]) -> None:
        self.io = io
        self.model = model
        self.session_id = session_id
        self._status: Status | None = None
        self._mid_line = False
        self._estimate: tuple[int, int] | None = None
        self._actual: tuple[int, int] | None = None
        self._streamed = False  # did the current reply arrive as TextDeltas?

    # The engine calls this synchronously from the turn's thread.
    def __call__(self, event: ev.Event) -> None:
        match event:
            case ev.TokenUpdate(tokens=t, context_window=w, actual=False):
                self._estimate, self._actual = (t, w), None
                self._streamed = False
                self._spin(f"thinking… ctx ~{format_token_count(t)}/{format_token_count(w)}")
            case ev.TokenUpdate(tokens=t, context_window=w, actual=True):
                self._actual = (t, w)
            case ev.TextDelta(text=text):
                self._stop_spin()
                self._streamed = True
                self._write(text)
            case ev.AssistantReply(message=reply):
                self._stop_spin()
                if not self._streamed:  # --no-stream: the whole reply arrives here
                    self._write(reply.content)
                self._end_line()
                self._print_token_line()
            case ev.ToolStarted(call=call):
                self._stop_spin()
                self._end_line()
                self.io.err.print(tool_call_line(call.name, call.arguments))
            case ev.ToolFinished(content=content, is_error=is_error):
                self.io.err.print(tool_result_line(content, is_error))
            case ev.CompactionStarted(strategy=strategy):
                self._spin(f"compacting the context ({strategy})…")
            case ev.CompactionProgress(chunk=i, total=n):
                self._spin(f"compacting the context: summarising part {i} of {n}…")
            case ev.Compaction() as c:
                self._stop_spin()
                self._end_line()
                self.io.err.print(compaction_notice(c))
            case ev.Retrying(attempt=a, delay=d, reason=r):
                self._spin(f"{inert(r)}: retrying in {d:.1f}s (attempt {a})…")
            case ev.Notice(text=text):
                self._stop_spin()
                self._end_line()
                self.io.err.print(Text(inert(text), style="yellow"))
            case ev.Error(message=message):
                self.error(message)

    def error(self, message: str) -> None:
        self._stop_spin()
        self._end_line()
        self.io.err.print(Text(f"error: {inert(message)}", style="bold red"))

    def stop(self) -> None:
        self._stop_spin()
        self._end_line()

    def _print_token_line(self) -> None:
        if self._actual is not None:
            (tokens, window), estimated = self._actual, False
        elif self._estimate is not None:
            (tokens, window), estimated = self._estimate, True
        else:
            return
        self.io.err.print(
            token_line(self.model, self.session_id(), tokens, window, estimated=estimated)
        )

    def _write(self, text: str) -> None:
        if not text:
            return
        out = self.io.out.file
        out.write(inert(text))
        out.flush()
        self._mid_line = not text.endswith("\n")

    def _end_line(self) -> None:
        if self._mid_line:
            self.io.out.file.write("\n")
            self.io.out.file.flush()
            self._mid_line = False

    def _spin(self, message: str) -> None:
        if not self.io.interactive:
            return
        if self._status is None:
            self._status = self.io.err.status(message, spinner="dots")
            self._status.start()
        else:
            self._status.update(message)

    def _stop_spin(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


@dataclass
class ChatLoop:
    engine: AgentEngine
    manager: Any  # harness9.store.sqlite.Manager
    io: ChatIO
    model: str
    on_session_change: Callable[[str], None] | None = None
    # Called once the first prompt is about to show (chat starts loading litellm there, so
    # the import does not compete with start-up for the interpreter lock).
    on_ready: Callable[[], object] | None = None
    renderer: EventRenderer = field(init=False)
    failed_turns: int = 0

    def __post_init__(self) -> None:
        self.renderer = EventRenderer(self.io, self.model, lambda: self.engine.session.session_id)
        self.engine.on_event = self.renderer

    # -- the loop ----------------------------------------------------------------

    def run(self) -> int:
        """Run until /exit or EOF. Returns the exit code (1 if a piped turn failed)."""
        if self.io.interactive:
            self._banner()
        if self.on_ready is not None:
            self.on_ready()
        prompt = "› " if self.io.interactive else ""
        while True:
            try:
                line = self.io.read_line(prompt)
            except EOFError:
                if self.io.interactive:
                    self.io.out.print()
                break
            except KeyboardInterrupt:
                # Ctrl-C at the prompt clears the line, as in a shell.
                self.io.out.print("^C", style="dim")
                continue
            line = line.strip()
            if not line:
                continue
            if line.startswith("/"):
                if self.handle_command(line) == "exit":
                    break
                continue
            self.turn(line)
        self.renderer.stop()
        return 1 if (self.failed_turns and not self.io.interactive) else 0

    def turn(self, text: str) -> None:
        # The per-turn error boundary: whatever fails, the chat (and what was saved) goes on.
        try:
            result = self.engine.run_turn(text)
        except KeyboardInterrupt:
            result = None
        except HarnessError as exc:
            self.renderer.error(str(exc))
            self.failed_turns += 1
            return
        except Exception as exc:  # noqa: BLE001 - shown as one line, the REPL continues
            self.renderer.error(f"internal error: {type(exc).__name__}: {exc}")
            self.failed_turns += 1
            return
        finally:
            self.renderer.stop()
        if result is None or result.interrupted:
            self.io.err.print(
                Text("interrupted — the completed part of the turn is kept", style="yellow")
            )
            return
        if result.error:
            self.failed_turns += 1

    # -- slash commands ------------------------------------------------------------

    def handle_command(self, line: str) -> str | None:
        name, _, rest = line.partition(" ")
        rest = rest.strip()
        handler = {
            "/help": self.cmd_help,
            "/new": self.cmd_new,
            "/resume": self.cmd_resume,
            "/undo": self.cmd_undo,
            "/compact": self.cmd_compact,
            "/context": self.cmd_context,
            "/search": self.cmd_search,
        }.get(name)
        if name in ("/exit", "/quit"):
            return "exit"
        if handler is None:
            self.renderer.error(f"unknown command {name}; /help lists the commands")
            return None
        try:
            handler(rest)
        except HarnessError as exc:
            self.renderer.error(str(exc))
        except KeyboardInterrupt:
            self.renderer.stop()
            self.io.err.print("cancelled")
        return None

    def cmd_help(self, _rest: str) -> None:
        table = Table(show_header=False, box=None, pad_edge=False)
        for cmd, text in SLASH_COMMANDS.items():
            table.add_row(Text(cmd, style="bold"), text)
        self.io.err.print(table)

    def cmd_new(self, _rest: str) -> None:
        session = self.manager.new_session()
        self._switch(session)
        self.io.err.print(Text(f"new session {session.session_id}", style="green"))

    def cmd_resume(self, rest: str) -> None:
        infos = [
            i
            for i in self.manager.list_sessions(limit=11)
            if i.id != self.engine.session.session_id
        ][:10]
        if not infos:
            self.io.err.print("no other sessions to resume")
            return
        if not rest:
            self.io.err.print(f"Sessions ({len(infos)}):")
            # One line per session: cut to the terminal's width, never wrapped for a pipe.
            fit = (
                {"no_wrap": True, "overflow": "ellipsis"}
                if self.io.interactive
                else {"soft_wrap": True}
            )
            for n, info in enumerate(infos, 1):
                when = _dt.datetime.fromtimestamp(info.updated_at).strftime("%Y-%m-%d %H:%M")
                title = inert(info.title) or "(empty)"
                self.io.err.print(
                    f"  [{n}] {info.id}  {when}  {info.message_count} messages  {title}",
                    markup=False,
                    highlight=False,
                    **fit,
                )
        picked = self._pick(rest, len(infos), "number (anything else cancels): ")
        if picked is None:
            self.io.err.print("resume cancelled")
            return
        self._resume(infos[picked - 1].id)

    def cmd_search(self, rest: str) -> None:
        if not rest:
            self.renderer.error('usage: /search WORDS (words are ANDed; "quoted phrases" work)')
            return
        hits = self.manager.search(rest, limit=10)
        if not hits:
            self.io.err.print("no matches")
            return
        render_hits(self.io.err, hits)
        n = self._pick("", len(hits), "number to resume (anything else cancels): ")
        if n is None:
            self.io.err.print("search closed")
            return
        self._resume(hits[n - 1].session_id)

    def cmd_undo(self, _rest: str) -> None:
        session = self.engine.session
        removed = 0
        while True:
            msg = session.pop_message()
            if msg is None:
                break
            removed += 1
            if msg.role == "user" and not msg.is_summary:
                break
        if removed == 0:
            self.io.err.print("nothing to undo")
        else:
            self.io.err.print(f"removed the last exchange ({removed} messages)")

    def cmd_compact(self, rest: str) -> None:
        try:
            notice = self.engine.compact_now(instructions=rest or None)
        finally:
            self.renderer.stop()
        if notice is None:
            self.io.err.print(
                "nothing to compact: the context is already as small as compaction can make it"
            )

    def cmd_context(self, _rest: str) -> None:
        b = self.engine.context_breakdown()
        table = Table(title="context", show_header=False, box=None)
        rows = [
            ("system prompt", b.system),
            ("tool definitions", b.tools),
            ("summary", b.summary),
            (f"messages ({b.message_count})", b.messages),
            ("total", b.total),
        ]
        for label, tokens in rows:
            table.add_row(label, format_token_count(tokens))
        table.add_row("window", format_token_count(b.context_window))
        table.add_row("compaction threshold", format_token_count(b.threshold))
        self.io.err.print(table)
        self.io.err.print(
            token_line(
                self.model,
                self.engine.session.session_id,
                b.total,
                b.context_window,
                estimated=True,
            )
        )

    # -- helpers --------------------------------------------------------------------

    def _pick(self, given: str, count: int, prompt: str) -> int | None:
        """A number from 1 to count, from ``given`` or asked for; None for anything else."""
        choice = given
        if not choice:
            try:
                choice = self.io.read_line(prompt if self.io.interactive else "")
            except (EOFError, KeyboardInterrupt):
                choice = ""
        choice = choice.strip()
        if choice.isdigit() and 1 <= int(choice) <= count:
            return int(choice)
        return None

    def _resume(self, session_id: str) -> None:
        session = self.manager.open_session(session_id)
        self._switch(session)
        count = len(session.get_messages())
        self.io.err.print(
            Text(f"resumed session {session.session_id} ({count} messages)", style="green")
        )

    def _switch(self, session: Any) -> None:
        self.engine.set_session(session)
        if self.on_session_change is not None:
            self.on_session_change(session.session_id)

    def _banner(self) -> None:
        sid = self.engine.session.session_id
        self.io.err.print(
            Text.assemble(
                ("harness9", "bold"),
                f" · {self.model} · session {sid[:8]} · ",
                ("/help", "bold"),
                " for commands, Ctrl-D to leave",
            )
        )


def readline_reader(history_file: str | None = None) -> Callable[[str], str]:
    """``input()`` with readline: history and Tab completion of slash commands."""
    try:
        import readline
    except ImportError:  # not on every platform; plain input still works
        return input

    commands = sorted(SLASH_COMMANDS) + ["/quit"]

    def complete(text: str, state: int) -> str | None:
        buffer = readline.get_line_buffer()
        if not buffer.startswith("/") or " " in buffer:
            return None
        matches = [c for c in commands if c.startswith(text)]
        return matches[state] if state < len(matches) else None

    readline.set_completer(complete)
    readline.set_completer_delims(" \t\n")
    if "libedit" in (readline.__doc__ or ""):
        readline.parse_and_bind("bind ^I rl_complete")
    else:
        readline.parse_and_bind("tab: complete")
    if history_file:
        with contextlib.suppress(OSError):
            readline.read_history_file(history_file)
        import atexit

        readline.set_history_length(1000)
        atexit.register(_save_history, readline, history_file)
    return input


def _save_history(readline: Any, path: str) -> None:
    with contextlib.suppress(OSError):
        readline.write_history_file(path)


def stdin_reader(stream: Any) -> Callable[[str], str]:
    """One line per call from a non-TTY stdin; EOFError at the end."""

    def read(_prompt: str) -> str:
        line = stream.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")

    return read
