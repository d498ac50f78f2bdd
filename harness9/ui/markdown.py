"""Model replies on the terminal: Markdown rendered block by block, or the exact text.

A reply streams in small pieces. In a terminal the block being written shows as
word-wrapped plain text in a live region at the bottom; as soon as a block is
finished (a blank line outside a code fence, or a closing fence) it is printed
rendered: headings, lists, tables, fenced code with syntax highlighting. Rich
wraps on word boundaries, so prose never breaks in the middle of a word.

For a pipe, ``NO_COLOR`` or ``--plain`` the text is written exactly as it came.
Either way model text passes through ``inert`` first: an escape sequence in a
reply can never drive the terminal, and Markdown links are shown, not made live.
"""

from __future__ import annotations

import re
from typing import IO, TYPE_CHECKING, Any, Protocol

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.text import Text

from harness9.ui.text import inert

if TYPE_CHECKING:
    from rich.live import Live
    from rich.markdown import Markdown

# rich.markdown (markdown-it) and rich.live are imported on the first reply, not at start-up:
# the prompt must appear quickly, and by the first reply the model call has cost far more.

CODE_THEME = "monokai"
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


class ReplyWriter(Protocol):
    """Where a reply's text goes as it arrives; ``finish`` ends the reply."""

    def feed(self, text: str) -> None: ...

    def finish(self) -> None: ...


def split_blocks(text: str, *, final: bool = False) -> tuple[list[str], str]:
    """``(finished blocks, the unfinished rest)`` of Markdown source that may still grow.

    A block ends at a blank line outside a code fence once the next line has
    begun unindented (an indented line may continue a list item), and at a
    closing fence. ``final`` treats the end of the text as the end of the last block.
    """
    lines = text.split("\n")
    # Only complete lines are decided on; the last piece may still be growing.
    complete, tail = lines[:-1], lines[-1]
    blocks: list[str] = []
    start = 0
    fence: str | None = None
    for i, line in enumerate(complete):
        m = _FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
                continue
            if line.strip() or i == start:
                continue
            # A blank line: the block before it is done when what follows is not indented.
            nxt = complete[i + 1] if i + 1 < len(complete) else (tail if tail else None)
            if nxt is None and not final:
                break
            if nxt is not None and (not nxt.strip() or nxt[:1] in (" ", "\t")):
                continue
            blocks.append("\n".join(complete[start:i]))
            start = i + 1
        elif (
            m
            and m.group(1)[0] == fence[0]
            and len(m.group(1)) >= len(fence)
            and line.strip() == m.group(1)  # a closing fence carries no info string
        ):
            fence = None
            blocks.append("\n".join(complete[start : i + 1]))
            start = i + 1
    rest = "\n".join(complete[start:] + [tail])
    if final:
        if rest.strip():
            blocks.append(rest.strip("\n"))
        rest = ""
    return [b for b in blocks if b.strip()], rest


def render_markdown(source: str) -> Markdown:
    """One finished block, safe to print: control characters made visible, links inert."""
    from rich.markdown import Markdown

    return Markdown(inert(source), code_theme=CODE_THEME, hyperlinks=False)


class _Tail:
    """The last lines of a text as the console would wrap it (the live region's content)."""

    def __init__(self, text: str, max_lines: int) -> None:
        self.text = Text(text)
        self.max_lines = max(1, max_lines)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # Wrapped one column short of the terminal: a line that filled it would leave the
        # cursor waiting to wrap, so the ^C the terminal echoes on Ctrl-C would land on a
        # new line the live region does not know about, and it would erase one line too
        # few (the reply's first wrapped line then showed twice).
        narrower = options.update(height=None, width=max(1, options.max_width - 1))
        lines = console.render_lines(self.text, narrower, pad=False)
        for line in lines[-self.max_lines :]:
            yield from line
            yield Segment.line()


class _Trimmed:
    """A renderable without its leading and trailing blank lines.

    Rich pads code blocks and tables with an empty line above and below; printed
    block by block, with one blank line between blocks, that padding would double up.
    """

    def __init__(self, renderable: Any) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.renderable, options, pad=False)

        def blank(line: list[Segment]) -> bool:
            return not "".join(seg.text for seg in line).strip()

        while lines and blank(lines[0]):
            lines.pop(0)
        while lines and blank(lines[-1]):
            lines.pop()
        for line in lines:
            yield from line
            yield Segment.line()


class MarkdownReply:
    """Renders one streamed reply as Markdown on a terminal console."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._buffer = ""
        self._printed = 0  # blocks printed so far in this reply
        self._live: Live | None = None

    def feed(self, text: str) -> None:
        if not text:
            return
        self._buffer += text
        blocks, self._buffer = split_blocks(self._buffer)
        for block in blocks:
            self._print_block(block)
        # Printing above the live region redraws it, so it must hold the new rest at once;
        # otherwise the region's own timer redraws it a few times a second.
        self._show_pending(refresh=bool(blocks))

    def finish(self) -> None:
        blocks, self._buffer = split_blocks(self._buffer, final=True)
        self._stop_live()
        for block in blocks:
            self._print_block(block)
        self._printed = 0

    def _print_block(self, block: str) -> None:
        if self._live is not None:
            # Empty the live region first, so the block does not show twice while printing.
            self._live.update(Text(""), refresh=True)
        if self._printed:
            self.console.print()
        self.console.print(_Trimmed(render_markdown(block)))
        self._printed += 1

    def _show_pending(self, *, refresh: bool) -> None:
        pending = self._buffer.strip("\n")
        if not pending:
            if self._live is not None:
                self._live.update(Text(""), refresh=refresh)
            return
        # Leave room for the lines above; a long block shows its newest lines.
        # The blank line that will separate it from the block above, shown already.
        lead = "\n" if self._printed else ""
        view = _Tail(lead + inert(pending), self.console.size.height - 2)
        if self._live is None:
            from rich.live import Live

            self._live = Live(
                view,
                console=self.console,
                transient=True,
                auto_refresh=True,
                refresh_per_second=10,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        else:
            self._live.update(view, refresh=refresh)

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


class PlainReply:
    """The model's exact text (control characters made visible) for pipes and plain mode."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self._mid_line = False

    def feed(self, text: str) -> None:
        if not text:
            return
        self.stream.write(inert(text))
        self.stream.flush()
        self._mid_line = not text.endswith("\n")

    def finish(self) -> None:
        if self._mid_line:
            self.stream.write("\n")
            self.stream.flush()
            self._mid_line = False
