"""What a running tool shows at a terminal: a spinner, the time it has run, and the last
few lines of its output, redrawn in place (bounded: never more than ``LINES`` lines).

The whole output stays what the tool returns; /last prints the last result in full.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from harness9.ui.text import inert

LINES = 5  # lines of output the live view keeps


class ToolProgress:
    """A Rich renderable; each redraw (the status refreshes it) recomputes the elapsed time."""

    def __init__(
        self, name: str, *, clock: Callable[[], float] = time.monotonic, lines: int = LINES
    ) -> None:
        self.name = name
        self.clock = clock
        self.started = clock()
        self.tail: deque[str] = deque(maxlen=lines)
        self._partial = ""

    def feed(self, text: str) -> None:
        *complete, self._partial = (self._partial + text).split("\n")
        for line in complete:
            self.tail.append(_last_redraw(line))

    def lines(self) -> list[str]:
        shown = list(self.tail)
        if self._partial:
            shown = [*shown, _last_redraw(self._partial)][-(self.tail.maxlen or LINES) :]
        return shown

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        elapsed = int(self.clock() - self.started)
        text = Text(f"running {self.name}… {elapsed}s", style="cyan")
        width = max(10, options.max_width - 4)
        for line in self.lines():
            shown = inert(line).expandtabs(4)
            if len(shown) > width:
                shown = shown[: width - 1] + "…"
            text.append("\n  " + shown, style="dim")
        yield text


def _last_redraw(line: str) -> str:
    """A progress bar redraws its line with \\r: what is on screen is the last version."""
    return line.rsplit("\r", 1)[-1] if "\r" in line.rstrip("\r") else line.rstrip("\r")
