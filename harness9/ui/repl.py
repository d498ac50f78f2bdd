"""The chat loop: read a line, run a turn or a slash command, render the engine's events.

The loop is a function of injected parts (engine, store, consoles, a line
reader), so tests drive it by feeding lines. With stdin not a TTY it prints no
prompts and no colours, sends replies to stdout and token lines/notices to
stderr, and exits at EOF: ``printf 'hi\\n' | harness9 chat`` is scriptable.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, RenderableType
from rich.status import Status
from rich.table import Table
from rich.text import Text

from harness9.engine import events as ev
from harness9.engine.breakdown import ContextBreakdown
from harness9.engine.engine import AgentEngine
from harness9.engine.metering import record_usage
from harness9.errors import HarnessError
from harness9.schema import Usage
from harness9.store.session import OffloadLink, SessionNotFoundError, UsageTotals
from harness9.tokens import format_token_count
from harness9.tools.offload import RECALL_HINT_START
from harness9.ui import goback
from harness9.ui.compaction_plan import too_small_reason
from harness9.ui.hangup import stop_requested
from harness9.ui.markdown import MarkdownReply, PlainReply, ReplyWriter
from harness9.ui.picker import PAGE_SIZE, SessionPicker
from harness9.ui.recap import recap
from harness9.ui.search_view import IndexProgress, render_hits
from harness9.ui.status import (
    calls_line,
    compaction_notice,
    format_cost,
    input_breakdown,
    summaries_line,
    token_line,
    tool_call_line,
    tool_result_line,
)
from harness9.ui.subagents import SubAgentLines
from harness9.ui.text import inert, plural
from harness9.ui.tool_progress import ToolProgress
from harness9.ui.typing_ahead import keys_kept_quiet

if TYPE_CHECKING:
    from harness9.ui.line_editor import PromptReader


@dataclass(frozen=True, slots=True)
class SlashCommand:
    """One REPL command: the one table the loop parses, /help lists and Tab completes."""

    name: str
    usage: str  # as /help shows it, e.g. "/model [NAME [WINDOW]]"
    help: str
    handler: Callable[[ChatLoop, str], str | None]  # runs it, given the text after the name
    # How many words may follow: 0 (none), a number, or None (any text at all).
    max_words: int | None = 0
    required: bool = False  # at least one word must follow
    settles_window: bool = True  # waits for a local server's window answer first


def usage_error(command: SlashCommand, rest: str) -> str | None:
    """Why ``rest`` is not what ``command`` takes (one line), or None when it is."""
    words = rest.split()
    if command.required and not words:
        return f"usage: {command.usage} ({command.name} needs an argument); nothing was done"
    if command.max_words is not None and len(words) > command.max_words:
        takes = "no arguments" if command.max_words == 0 else f"at most {command.max_words}"
        return f"usage: {command.usage} ({command.name} takes {takes}); nothing was done"
    return None


@dataclass
class ChatIO:
    out: Console  # replies
    err: Console  # token lines, notices, errors (stderr when not interactive)
    read_line: Callable[[str], str]  # raises EOFError at the end, KeyboardInterrupt on Ctrl-C
    interactive: bool
    # Render replies as Markdown (a terminal, no NO_COLOR, no --plain); else the exact text.
    markdown: bool = False
    # Puts text in the next prompt, to send or edit (a line editor; None for a pipe).
    prefill: Callable[[str], None] | None = None


class EventRenderer:
    """Turns engine events into terminal output. One instance per chat.

    The token line is printed once per turn (the loop calls ``print_token_line``) and after a
    compaction, not after every model call: a ten-step turn prints one.
    """

    def __init__(
        self,
        io: ChatIO,
        model: str,
        session_id: Callable[[], str],
        on_usage: Callable[[ev.ModelUsage], None] | None = None,
        session_cost: Callable[[], float | None] | None = None,
        on_subagent_usage: Callable[[str, ev.ModelUsage], None] | None = None,
        window: Callable[[], int] | None = None,
    ) -> None:
        self.io = io
        # The window in use now (it shrinks when the server names a smaller one mid-turn);
        # None: the one the last token count came with.
        self.window = window
        self.model = model
        self.session_id = session_id
        self.on_usage = on_usage
        self.on_subagent_usage = on_subagent_usage
        # Sub-agents' events come from their worker threads: one event at a time.
        self._lock = threading.RLock()
        self.subagents = SubAgentLines(io.err, live=io.interactive)
        self.session_cost = session_cost or (lambda: None)
        self._status: Status | None = None
        self._estimate: tuple[int, int] | None = None
        self._actual: tuple[int, int] | None = None
        self._last_usage: Usage | None = None  # the last reply's, for the token line
        self._streamed = False  # did the current reply arrive as TextDeltas?
        self._reply: ReplyWriter = MarkdownReply(io.out) if io.markdown else PlainReply(io.out.file)
        self.last_result: ev.ToolFinished | None = None  # what /last shows
        self._progress: ToolProgress | None = None  # the running tool's live view
        # The tool running now and when it started (for the line an interrupt prints).
        self.running: tuple[str, float] | None = None
        self._preparing = False  # a summary is being prepared in the background

    # The engine calls this synchronously from the turn's thread (sub-agents' events: from
    # their worker threads, hence the lock).
    def __call__(self, event: ev.Event) -> None:
        with self._lock:
            self._handle(event)

    def _handle(self, event: ev.Event) -> None:
        match event:
            case ev.SubAgentActivity(session_id=sid, event=ev.ModelUsage() as used):
                if self.on_subagent_usage is not None:
                    self.on_subagent_usage(sid, used)
                self.subagents.handle(event)
            case (
                ev.SubAgentStarted()
                | ev.SubAgentActivity()
                | ev.SubAgentFinished()
                | ev.SubAgentAsking()
            ):
                self._stop_spin()
                self._end_line()
                self.subagents.handle(event)
            case ev.TokenUpdate(tokens=t, context_window=w, actual=False):
                self._estimate, self._actual = (t, w), None
                self._streamed = False
                self._spin(f"thinking… ctx ~{format_token_count(t)}/{format_token_count(w)}")
            case ev.TokenUpdate(tokens=t, context_window=w, actual=True):
                self._actual = (t, w)
            case ev.ModelUsage() as used:
                if not used.summary:
                    self._last_usage = used.usage
                if self.on_usage is not None:
                    self.on_usage(used)
            case ev.TextDelta(text=text):
                self._stop_spin()
                self._streamed = True
                self._reply.feed(text)
            case ev.AssistantReply(message=reply):
                self._stop_spin()
                if not self._streamed:  # --no-stream: the whole reply arrives here
                    self._reply.feed(reply.content)
                self._end_line()
            case ev.ToolStarted(call=call):
                self._stop_spin()
                self._end_line()
                self.running = (call.name, time.monotonic())
                self.io.err.print(tool_call_line(call.name, call.arguments))
            case ev.ToolOutput(call=call, text=text):
                if self._progress is None:  # it starts now: the time it waited to be approved
                    self.running = (call.name, time.monotonic())  # is not time it ran
                self._tool_output(call.name, text)
            case ev.ToolFinished(content=content, is_error=is_error, exit_code=code) as done:
                self._stop_spin()
                self._progress = None
                self.running = None
                self.last_result = done
                self.io.err.print(tool_result_line(content, is_error, exit_code=code))
            case ev.CompactionStarted(strategy=strategy):
                self._spin(f"compacting the context ({strategy})…")
            case ev.CompactionProgress(chunk=i, total=n):
                self._spin(f"compacting the context: summarising part {i} of {n}…")
            case ev.Compaction() as c:
                self._stop_spin()
                self._end_line()
                self.io.err.print(compaction_notice(c))
                window = (self._actual or self._estimate or (0, 0))[1]
                if window and self.window is not None:
                    window = self.window()
                if window:
                    self._estimate, self._actual = (c.tokens_after, window), None
                    self.print_token_line()
            case ev.Retrying(attempt=a, delay=d, reason=r):
                # One line each, kept on screen: a silent backoff looks like a hang.
                self._stop_spin()
                self._end_line()
                self.io.err.print(
                    Text(f"{inert(r)}; retrying in {d:.1f}s (retry {a})", style="yellow")
                )
                self._spin(f"waiting {d:.1f}s before retry {a}…")
            case ev.SummaryPreparing(active=active):
                self._preparing = active
            case ev.Notice(text=text):
                self._stop_spin()
                self._end_line()
                self.io.err.print(Text(inert(text), style="yellow"))
            case ev.Error(message=message):
                self.error(message)

    def _tool_output(self, name: str, text: str) -> None:
        """A running tool's live view: started by its first event, fed by the next ones."""
        if self._progress is None:
            self._progress = ToolProgress(name)
            self._spin(self._progress)
        self._progress.feed(text)

    def error(self, message: str) -> None:
        self._stop_spin()
        self._end_line()
        self.io.err.print(Text(f"error: {inert(message)}", style="bold red"))

    def stop(self) -> None:
        self.subagents.stop()
        self._stop_spin()
        self._end_line()

    def stopped_tool(self) -> Text | None:
        """After an interrupt: which tool was stopped and after how long (None: none ran)."""
        running, self.running = self.running, None
        if running is None:
            return None
        name, since = running
        what = "the command was ended" if name == "bash" else "it did not finish"
        seconds = int(time.monotonic() - since)
        return Text(f"stopped {inert(name)} after {seconds}s: {what}", style="yellow")

    def reset(self) -> None:
        """Forget the last turn's sizes (another session or model is now current)."""
        self._estimate = self._actual = None
        self._last_usage = None

    def print_token_line(self) -> None:
        if self._actual is not None:
            (tokens, window), estimated = self._actual, False
        elif self._estimate is not None:
            (tokens, window), estimated = self._estimate, True
        else:
            return
        self.io.err.print(
            token_line(
                self.model,
                self.session_id(),
                tokens,
                window,
                estimated=estimated,
                cost=self.session_cost(),
                usage=None if estimated else self._last_usage,
                preparing=self._preparing,
            )
        )

    def _end_line(self) -> None:
        self._reply.finish()

    def _spin(self, message: RenderableType) -> None:
        if not self.io.interactive:
            return
        self._end_line()  # one live display at a time: the reply's must end first
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
    # Sessions this chat started. The one rule for empty sessions: one of these that is
    # still empty when the user leaves it (/new, /resume, a /search pick, /exit, EOF) is
    # deleted, so opening and closing chats never litters `sessions list`. Sessions that
    # were resumed are never deleted, empty or not: another chat may be using them.
    started: set[str] = field(default_factory=set)
    # The price of one call's usage (None: unknown); None here: costs are not tracked.
    pricing: Callable[[str, Usage], float | None] | None = None
    # The tools' confirm callback when a person is at the terminal (its "always" answers
    # are forgotten when the session changes).
    approver: Any = None
    # Builds an engine for another model on the same session: (name, window or None) ->
    # (engine, notes to show). None: /model cannot switch.
    switch_model: Callable[[str, int | None], tuple[AgentEngine, list[Text]]] | None = None
    # The engine for a session /resume switches to, with the model, API base and window
    # it last ran with (as --resume takes them): (session) -> (engine, model name, notes),
    # None when they are the ones in use.
    resumed_engine: Callable[[Any], tuple[AgentEngine, str, list[Text]] | None] | None = None
    # Shown once before the first prompt (e.g. "the window is a guess").
    notes: list[Text] = field(default_factory=list)
    # Called once, before the first turn or command, when the model's window is still being
    # asked of its server: (the window to switch to, or None to keep this one; lines to show).
    settle_window: Callable[[], tuple[int | None, list[Text]]] | None = None
    # Show where the session left off before the first prompt (--resume, --continue).
    recap_on_start: bool = False
    renderer: EventRenderer = field(init=False)
    usage: UsageTotals = field(init=False)  # the sub-agents' calls included
    subagent_usage: UsageTotals = field(init=False)
    failed_turns: int = 0
    interrupted_turns: int = 0

    def __post_init__(self) -> None:
        self.renderer = EventRenderer(
            self.io,
            self.model,
            lambda: self.engine.session.session_id,
            on_usage=self._record_usage,
            session_cost=self.session_cost,
            on_subagent_usage=self._record_subagent_usage,
            window=lambda: self.engine.context_window,
        )
        self.engine.on_event = self.renderer
        self._load_usage(self.engine.session.session_id)

    # -- the loop ----------------------------------------------------------------

    def run(self) -> int:
        """Run until /exit or EOF. Returns the exit code (1 if a piped turn failed)."""
        if self.io.interactive:
            self._banner()
        self._start()
        if self.on_ready is not None:
            self.on_ready()
        prompt = "› " if self.io.interactive else ""
        while not stop_requested():  # the terminal closed: leave as at end of input
            try:
                line = self.io.read_line(prompt)
            except EOFError:
                if self.io.interactive:
                    self.io.out.print()
                break
            except KeyboardInterrupt:
                if stop_requested():
                    break
                # Ctrl-C at the prompt clears the line, as in a shell, and stops a summary
                # being prepared in the background.
                self.engine.cancel_background()
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

    def leave(self) -> None:
        """The chat is over: apply the empty-session rule to the current session.

        Called by the caller after its last save (a reply held back by a locked
        database must not make its session look empty)."""
        self._leave(self.engine.session.session_id)

    def run_once(self, text: str) -> int:
        """One turn, then return: 0, 1 when the turn failed, 130 when it was interrupted."""
        self._start()
        self.turn(text)
        self.renderer.stop()
        if self.interrupted_turns:
            return 130
        return 1 if self.failed_turns else 0

    def _start(self) -> None:
        for note in self.notes:
            self.io.err.print(note)
        if self.recap_on_start:
            self.print_recap()

    def turn(self, text: str) -> None:
        self._settle_window()
        # The per-turn error boundary: whatever fails, the chat (and what was saved) goes on.
        try:
            with keys_kept_quiet() if self.io.interactive else contextlib.nullcontext():
                result = self.engine.run_turn(text)
        except KeyboardInterrupt:
            result = None
        except SessionNotFoundError as exc:
            self.renderer.error(self._gone(exc))
            self.failed_turns += 1
            return
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
            self.interrupted_turns += 1
            if self.io.interactive:
                self.io.err.print()  # the terminal echoed ^C where the cursor was: end that line
            stopped = self.renderer.stopped_tool()
            if stopped is not None:
                self.io.err.print(stopped)
            self.io.err.print(
                Text("interrupted — the completed part of the turn is kept", style="yellow")
            )
            return
        if result.reply is not None:
            self.renderer.print_token_line()
        if result.error:
            self.failed_turns += 1

    def _gone(self, exc: SessionNotFoundError) -> str:
        """The turn's error when the chat's own session was deleted meanwhile (by
        ``sessions delete`` in another process): nothing more is saved to it, so say how
        to go on."""
        if exc.session_id != self.engine.session.session_id:
            return str(exc)
        return (
            f"session {exc.session_id[:8]} was deleted by another harness9, so this turn was "
            "not saved; /new starts a new session"
        )

    # -- usage and cost ------------------------------------------------------------

    def _record_usage(self, used: ev.ModelUsage) -> None:
        sid = self.engine.session.session_id
        record_usage(self.manager, sid, used, self.pricing)
        self._load_usage(sid)

    def _record_subagent_usage(self, child_id: str, used: ev.ModelUsage) -> None:
        """A sub-agent's call: stored on its own session, counted in this one's totals."""
        record_usage(self.manager, child_id, used, self.pricing)
        self._load_usage(self.engine.session.session_id)

    def _load_usage(self, session_id: str) -> None:
        """The session's totals, its sub-agents' included (and apart in ``subagent_usage``)."""
        self.subagent_usage = self.manager.subagent_usage(session_id)
        self.usage = self.manager.usage_totals(session_id).plus(self.subagent_usage)

    def session_cost(self) -> float | None:
        """The session's cost so far in dollars; None when no call had a known price."""
        return self.usage.cost_usd if self.usage.priced else None

    # -- slash commands ------------------------------------------------------------

    def _settle_window(self) -> None:
        settle, self.settle_window = self.settle_window, None
        if settle is None:
            return
        window, notes = settle()
        if window is not None and self.switch_model is not None:
            engine, _ = self.switch_model(self.model, window)
            engine.on_event = self.renderer
            self.engine = engine
        for note in notes:
            self.io.err.print(note)

    def handle_command(self, line: str) -> str | None:
        name, _, rest = line.partition(" ")
        rest = rest.strip()
        command = COMMANDS_BY_NAME.get(name)
        if command is None:
            self.renderer.error(f"unknown command {name}; /help lists the commands")
            return None
        problem = usage_error(command, rest)
        if problem is not None:
            self.renderer.error(problem)
            return None
        if command.settles_window:  # leaving never waits for the server
            self._settle_window()
        try:
            return command.handler(self, rest)
        except HarnessError as exc:
            self.renderer.error(str(exc))
        except KeyboardInterrupt:
            self.renderer.stop()
            self.io.err.print("cancelled")
        return None

    def cmd_exit(self, _rest: str) -> str:
        return "exit"

    def cmd_help(self, _rest: str) -> None:
        table = Table(show_header=False, box=None, pad_edge=False)
        for cmd in COMMANDS:
            if cmd.name in SLASH_COMMANDS:
                table.add_row(Text(cmd.usage, style="bold"), cmd.help)
        self.io.err.print(table)

    def cmd_new(self, _rest: str) -> None:
        session = self.manager.new_session()
        self.started.add(session.session_id)
        self._switch(session)
        self.io.err.print(Text(f"new session {session.session_id}", style="green"))

    def cmd_resume(self, rest: str) -> None:
        """/resume: a picker of the other sessions; /resume N picks from its first page;
        /resume ID-PREFIX resumes that session; /resume WORDS opens the picker filtered."""
        current = self.engine.session.session_id
        infos = [i for i in self.manager.list_sessions() if i.id != current]
        if not infos:
            self.io.err.print("no other sessions to resume")
            return
        target = self._resume_target(rest, infos)
        if target is None:
            picker = SessionPicker(
                infos,
                self.io.err,
                self.io.read_line,
                self.io.interactive,
                self.manager.fork_origins(),
            )
            target = picker.run(rest if rest and not rest.isdigit() else "")
        if target is None:
            self.io.err.print("resume cancelled")
            return
        self._resume(target)

    def _resume_target(self, rest: str, infos: list[Any]) -> str | None:
        """The session ``rest`` names on its own: a number of the first page or an id prefix."""
        if rest.isdigit() and 1 <= int(rest) <= min(len(infos), PAGE_SIZE):
            return str(infos[int(rest) - 1].id)
        if rest and " " not in rest:
            try:
                found = str(self.manager.resolve_id(rest))
            except SessionNotFoundError:
                return None  # not an id: words to filter by
            if found == self.engine.session.session_id:
                raise HarnessError(f"session {found[:8]} is the current one")
            return found
        return None

    def cmd_search(self, rest: str) -> None:
        if not rest:
            self.renderer.error('usage: /search WORDS (words are ANDed; "quoted phrases" work)')
            return
        with IndexProgress(self.io.err) as progress:
            hits = self.manager.number_hits(
                self.manager.search(rest, limit=10, on_progress=progress)
            )
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
            if msg.role == "user":
                break
        if removed == 0:
            self.io.err.print("nothing to undo")
        else:
            self.io.err.print(f"removed the last exchange ({plural(removed, 'message')})")

    def cmd_compact(self, rest: str) -> None:
        try:
            notice = self.engine.compact_now(instructions=rest or None)
        finally:
            self.renderer.stop()
        if notice is None:
            _, plan = self.engine.plan_compaction(force=True)
            if plan.too_small:  # declined before any summary was paid for
                self.io.err.print(f"nothing to compact: {too_small_reason(plan)}")
            else:
                self.io.err.print(nothing_left_to_fold(self.engine.context_breakdown()))

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
        rows[2:2] = mcp_context_rows(self.engine.registry)
        for label, tokens in rows:
            table.add_row(label, format_token_count(tokens))
        if b.served is not None:  # the rows above are estimates; the server counts this
            table.add_row("as the server counts", format_token_count(b.served))
        table.add_row("window", format_token_count(b.context_window))
        table.add_row("compaction threshold", format_token_count(b.threshold))
        if b.preparing or b.prepared_applied or b.prepared_discarded:
            table.add_row("summaries prepared ahead", prepared_line(b))
        u = self.usage
        if u.model_calls:
            table.add_row(
                f"session usage ({plural(u.model_calls, 'call')})",
                f"{input_breakdown(u.input_tokens, u.cached_tokens, u.cache_write_tokens)}, "
                f"out {format_token_count(u.output_tokens)}",
            )
            cost = self.session_cost()
            unpriced = f" ({plural(u.unpriced_calls, 'call')} unpriced)" if u.unpriced_calls else ""
            table.add_row(
                "session cost",
                (format_cost(cost) + unpriced) if cost is not None else "unknown for this model",
            )
            if u.summary_calls:
                table.add_row("of which summaries", summaries_line(u))
            if self.subagent_usage.model_calls:
                table.add_row("of which sub-agents", calls_line(self.subagent_usage))
        self.io.err.print(table)
        self.io.err.print(
            token_line(  # as the turns' token lines count it: the server's count once known
                self.model,
                self.engine.session.session_id,
                b.shown,
                b.context_window,
                estimated=True,
                cost=self.session_cost(),
            )
        )

    def cmd_mcp(self, _rest: str) -> None:
        """/mcp: the MCP servers, their state and tools."""
        from harness9.tools.mcp.toolset import mcp_toolset, server_rows
        from harness9.ui.mcp_table import NO_SERVERS, server_table

        toolset = mcp_toolset(self.engine.registry.sources)
        if toolset is None:
            self.io.err.print(NO_SERVERS)
            return
        self.io.err.print(server_table(server_rows(toolset.manager)))

    def cmd_last(self, _rest: str) -> None:
        """The last tool result in full (the screen showed its first lines)."""
        last = self.renderer.last_result
        if last is None:
            self.io.err.print("no tool has run in this chat yet")
            return
        self.io.err.print(tool_call_line(last.call.name, last.call.arguments))
        full = offloaded_text(self.engine, last.offload)
        if full is not None:
            self.io.err.print(Text(inert(full)), soft_wrap=True)
            return
        # The model's instruction to recall it is not the person's: drop it.
        shown = [x for x in last.content.splitlines() if not x.startswith(RECALL_HINT_START)]
        self.io.err.print(Text(inert("\n".join(shown))), soft_wrap=True)

    def cmd_model(self, rest: str) -> None:
        if not rest:
            b = self.engine.context_breakdown()
            self.io.err.print(
                f"model {self.model} · window {format_token_count(b.context_window)} · "
                f"compaction at {format_token_count(b.threshold)}",
                markup=False,
                highlight=False,
            )
            return
        name, _, window_text = rest.partition(" ")
        window = None
        if window_text.strip():
            from harness9.config import parse_context_window

            # The same rule as --context-window: no model works in less than the minimum.
            window = parse_context_window(window_text, "the window after /model NAME")
        if self.switch_model is None:
            self.renderer.error("switching models is not available here")
            return
        engine, notes = self.switch_model(name, window)
        self._use_engine(engine, name)
        b = engine.context_breakdown()
        self.io.err.print(
            Text(
                f"switched to {inert(name)} · window {format_token_count(b.context_window)} · "
                f"compaction at {format_token_count(b.threshold)}",
                style="green",
            )
        )
        for note in notes:
            self.io.err.print(note)

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
        self._own_settings(session)
        self.print_recap()

    def _own_settings(self, session: Any) -> None:
        """Go on with the model, API base and window the session last ran with, as
        ``--resume`` does; when that model cannot be used here, say so and keep this one."""
        if self.resumed_engine is None:
            return
        try:
            switched = self.resumed_engine(session)
        except HarnessError as exc:
            self.renderer.error(f"{exc}; going on with {self.model}")
            return
        if switched is None:
            return
        engine, name, notes = switched
        self._use_engine(engine, name)
        b = engine.context_breakdown()
        self.io.err.print(
            Text(
                f"as it last ran: {inert(name)} · window {format_token_count(b.context_window)}",
                style="dim",
            )
        )
        for note in notes:
            self.io.err.print(note)

    def _use_engine(self, engine: AgentEngine, name: str) -> None:
        if engine is not self.engine:
            self.engine.close()  # its summaries being prepared were for the old engine
        engine.on_event = self.renderer
        self.engine = engine
        self.model = self.renderer.model = name
        self.renderer.reset()

    def print_recap(self) -> None:
        """Which session this is and its last exchange (--resume, --continue, /resume)."""
        sid = self.engine.session.session_id
        info = self.manager.session_info(sid)
        b = self.engine.context_breakdown()
        for line in recap(info, self.engine.session.get_messages(), b.shown, b.context_window):
            self.io.err.print(line)

    def switch_to(self, session: Any) -> None:
        """Continue in ``session`` (a fork, a rewind), leaving the current one as it is."""
        self._switch(session)

    def put_back(self, text: str) -> None:
        """A message taken back (/rewind): into the next prompt, or shown when piped."""
        if self.io.prefill is not None:
            self.io.prefill(text)
            self.io.err.print(
                "your message is back in the prompt: Enter sends it again, or change it first",
                style="dim",
            )
            return
        self.io.err.print(
            Text("your message, taken back (the next line is sent in its place): ", style="dim")
            + Text(inert(text))
        )

    def _switch(self, session: Any) -> None:
        previous = self.engine.session
        self.engine.set_session(session)  # saves what the session being left still holds
        if previous.session_id != session.session_id and not previous.held:
            self._leave(previous.session_id)
        self.renderer.reset()
        self._load_usage(session.session_id)
        if self.approver is not None:
            self.approver.reset()
        if self.on_session_change is not None:
            self.on_session_change(session.session_id)

    def _leave(self, session_id: str) -> None:
        """Apply the empty-session rule (see ``started``) to a session being left."""
        if session_id in self.started:
            self.started.discard(session_id)
            self.manager.delete_if_empty(session_id)  # checked inside its own transaction

    def _banner(self) -> None:
        sid = self.engine.session.session_id
        self.io.err.print(
            Text.assemble(
                ("harness9", "bold"),
                f" · {self.model} · session {sid[:8]} · ",
                ("/help", "bold"),
                " for commands, Alt-Enter or a trailing \\ for a new line, Ctrl-D to leave",
            )
        )


COMMANDS: tuple[SlashCommand, ...] = (
    SlashCommand("/help", "/help", "show this help", ChatLoop.cmd_help, settles_window=False),
    SlashCommand("/new", "/new", "start a new session", ChatLoop.cmd_new),
    SlashCommand(
        "/resume",
        "/resume [NUMBER|ID-PREFIX|WORDS]",
        "pick a session to continue (words filter titles, ids and directories), or resume "
        "the one an id prefix names",
        ChatLoop.cmd_resume,
        max_words=None,
    ),
    SlashCommand(
        "/undo",
        "/undo",
        "remove the last exchange (your last message and everything after it)",
        ChatLoop.cmd_undo,
    ),
    SlashCommand(
        "/compact",
        "/compact [FOCUS]",
        "compact the context now; optional focus instructions follow the command",
        ChatLoop.cmd_compact,
        max_words=None,
    ),
    SlashCommand(
        "/context",
        "/context",
        "show what the next request would carry, in tokens, and the session's cost",
        ChatLoop.cmd_context,
    ),
    SlashCommand(
        "/model",
        "/model [NAME [WINDOW]]",
        "show the model, or switch to another one",
        ChatLoop.cmd_model,
        max_words=2,
    ),
    SlashCommand(
        "/search",
        "/search WORDS",
        'search past sessions (words ANDed, "a phrase" works); pick a hit to resume it',
        ChatLoop.cmd_search,
        max_words=None,
        required=True,
    ),
    SlashCommand(
        "/last",
        "/last",
        "show the last tool result in full",
        ChatLoop.cmd_last,
    ),
    SlashCommand(
        "/pin",
        "/pin TEXT",
        "keep a note in every request of this session, until /unpin",
        goback.cmd_pin,
        max_words=None,
        required=True,
    ),
    SlashCommand("/mcp", "/mcp", "list the MCP servers and their tools", ChatLoop.cmd_mcp),
    SlashCommand("/pins", "/pins", "list the pinned notes", goback.cmd_pins),
    SlashCommand(
        "/unpin", "/unpin N", "remove pinned note N", goback.cmd_unpin, max_words=1, required=True
    ),
    SlashCommand(
        "/fork",
        "/fork [N]",
        "continue in a copy of this session (up to message N with /fork N)",
        goback.cmd_fork,
        max_words=1,
    ),
    SlashCommand(
        "/rewind",
        "/rewind [N]",
        "list your recent messages; /rewind N continues from message N in a fork",
        goback.cmd_rewind,
        max_words=1,
    ),
    SlashCommand(
        "/exit", "/exit", "leave (Ctrl-D works too)", ChatLoop.cmd_exit, settles_window=False
    ),
    SlashCommand(
        "/quit", "/quit", "leave (same as /exit)", ChatLoop.cmd_exit, settles_window=False
    ),
)
COMMANDS_BY_NAME = {c.name: c for c in COMMANDS}
# name -> help, as /help lists them (/quit is /exit's alias and not listed).
SLASH_COMMANDS: dict[str, str] = {c.name: c.help for c in COMMANDS if c.name != "/quit"}


def terminal_reader(
    history_file: Path | None = None, on_shown: Callable[[], Any] | None = None
) -> PromptReader:
    """The line editor for a terminal: paste-safe, multi-line, history, Tab completion."""
    from harness9.ui.line_editor import prompt_reader

    return prompt_reader([c.name for c in COMMANDS], history_file, on_shown=on_shown)


def stdin_reader(stream: Any) -> Callable[[str], str]:
    """One line per call from a non-TTY stdin; EOFError at the end."""

    def read(_prompt: str) -> str:
        line = stream.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")

    return read


def offloaded_text(engine: AgentEngine, link: OffloadLink | None) -> str | None:
    """The whole output behind an offloaded result, for /last: the model was shown a
    summary ending in an instruction for it (``use offload_recall(…)``), not for a person.
    None when the result was not offloaded or its output cannot be read any more."""
    if link is None:
        return None
    offload_id = link.offload_id
    store = engine.offload
    if store is None or not store.valid_id(offload_id):
        return None
    try:
        stream = store.blobs.read(engine.session.session_id, offload_id)
    except HarnessError:
        return None
    if stream is None:
        return None
    with stream:
        return stream.read().decode("utf-8", "replace")


def mcp_context_rows(registry: Any) -> list[tuple[str, int]]:
    """/context: the MCP definitions' share, those sent and those deferred ([]: no MCP)."""
    from harness9.tools.mcp.toolset import mcp_toolset

    toolset = mcp_toolset(registry.sources)
    if toolset is None:
        return []
    sent, deferred = toolset.share()
    return [("  MCP definitions sent", sent), ("  MCP definitions deferred", deferred)]


def prepared_line(b: ContextBreakdown) -> str:
    """``2 applied, 1 thrown away, one being prepared`` (/context)."""
    parts = [f"{b.prepared_applied} applied", f"{b.prepared_discarded} thrown away"]
    if b.preparing:
        parts.append("one being prepared")
    return ", ".join(parts)


def nothing_left_to_fold(b: ContextBreakdown) -> str:
    """Why /compact folded nothing and, when the context is still over the threshold,
    what would help."""
    if b.shown <= b.threshold:
        return "nothing to compact: the context is already as small as compaction can make it"
    return (
        f"nothing to compact: the context ({format_token_count(b.shown)} tokens) is over the "
        f"{format_token_count(b.threshold)}-token threshold and nothing but its newest message "
        "is left; /new starts a fresh session, or a larger --context-window (a model with a "
        "bigger window) would help"
    )
