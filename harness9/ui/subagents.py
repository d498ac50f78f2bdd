"""The sub-agents' lines while `task` calls run: one live line each, then one line done.

At a terminal each running sub-agent has a line that Rich redraws a few times a
second: its description, the time it has run, the tool it is in. Piped, only the
line each prints as it ends is written. Events arrive from the sub-agents' worker
threads; ``EventRenderer`` calls in here under its lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from harness9.engine import events as ev
from harness9.ui.text import inert, plural

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


@dataclass(slots=True)
class _Line:
    description: str
    started: float
    doing: str = "thinking"
    model_calls: int = 0


def elapsed_text(seconds: float) -> str:
    """``4.2s``, ``1m05s``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def finished_line(description: str, outcome: str, elapsed: float, calls: int) -> Text:
    """``  ↳ find the config loader: done in 3.2s (4 model calls)``."""
    style = "green" if outcome == "done" else "yellow"
    what = plural(calls, "model call")
    text = Text("  ↳ ", style=style)
    text.append(inert(description), style=f"bold {style}")
    text.append(f": {outcome} in {elapsed_text(elapsed)} ({what})", style=style)
    return text


class SubAgentLines:
    """The running sub-agents' lines (a Rich renderable) and the Live that draws them."""

    def __init__(
        self,
        console: Console,
        live: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console
        self.live_enabled = live
        self.clock = clock
        self._lines: dict[str, _Line] = {}
        self._live: Live | None = None

    @property
    def running(self) -> int:
        return len(self._lines)

    def __rich__(self) -> Group:
        now = self.clock()
        frame = SPINNER[int(now * 10) % len(SPINNER)]
        rows = []
        for line in self._lines.values():
            text = Text(f"  {frame} ", style="cyan")
            text.append(inert(line.description), style="bold")
            text.append(f" · {elapsed_text(now - line.started)} · ", style="dim")
            text.append(inert(line.doing), style="cyan")
            rows.append(text)
        return Group(*rows)

    def handle(self, event: ev.Event) -> None:
        match event:
            case ev.SubAgentStarted(call_id=cid, description=d):
                self._lines[cid] = _Line(d, self.clock())
                self._show()
            case ev.SubAgentActivity(call_id=cid, event=inner):
                self._activity(cid, inner)
            case ev.SubAgentFinished(call_id=cid, description=d, outcome=o, elapsed=t):
                line = self._lines.pop(cid, None)
                if not self._lines:
                    self.pause()
                if line is not None:  # None: the turn was stopped and its lines cleared
                    self.console.print(finished_line(d, o, t, line.model_calls))
            case ev.SubAgentAsking(asking=True):
                self.pause()
            case ev.SubAgentAsking(asking=False):
                self._show()

    def _activity(self, call_id: str, inner: ev.Event) -> None:
        line = self._lines.get(call_id)
        if line is None:
            return
        match inner:
            case ev.ToolStarted(call=call):
                line.doing = " ".join(f"{call.name} {call.arguments}".split())[:60]
            case ev.TokenUpdate(actual=False):
                line.doing = "thinking"
            case ev.ModelUsage(summary=False):
                line.model_calls += 1
            case ev.CompactionStarted():
                line.doing = "compacting its context"
            case ev.Retrying(attempt=a):
                line.doing = f"retrying (retry {a})"

    def _show(self) -> None:
        if not self.live_enabled or not self._lines or self._live is not None:
            return
        self._live = Live(self, console=self.console, refresh_per_second=8, transient=True)
        self._live.start()

    def pause(self) -> None:
        """Stop drawing (a question for the user, or nothing left to draw)."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    def stop(self) -> None:
        self.pause()
        self._lines.clear()
