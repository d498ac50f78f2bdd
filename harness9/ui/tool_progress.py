"""What a running tool shows at a terminal: a spinner, the time it has run, and the last
few lines of its output, redrawn in place (bounded: never more than ``LINES`` lines).

The whole output stays what the tool returns; /last prints the last result in full.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from rich.cells import cell_len, set_cell_size
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
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

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        # As wide as the text, and never to the terminal's last column: a line that fills
        # it leaves the cursor waiting to wrap, so the ^C the terminal echoes on Ctrl-C
        # lands on a new line the live view does not know about; it would then erase one
        # line too few and leave "running bash… 2s" on the screen.
        cut = max(10, options.max_width - 3)
        shown = [min(cell_len(_visible(x)), cut) + 2 for x in self.lines()]
        longest = max([cell_len(self._head()) + 4, *shown])  # room for the seconds to grow
        width = max(1, min(longest, options.max_width - 1))
        return Measurement(width, width)

    def _head(self) -> str:
        return f"running {self.name}… {int(self.clock() - self.started)}s"

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        text = Text(self._head(), style="cyan")
        width = max(10, options.max_width - 2)
        for line in self.lines():
            shown = _visible(line)
            if cell_len(shown) > width:
                shown = set_cell_size(shown, width - 1) + "…"
            text.append("\n  " + shown, style="dim")
        yield text


def _visible(line: str) -> str:
    return inert(line).expandtabs(4)


def _last_redraw(line: str) -> str:
    """A progress bar redraws its line with \\r: what is on screen is the last version."""
    return line.rsplit("\r", 1)[-1] if "\r" in line.rstrip("\r") else line.rstrip("\r")
