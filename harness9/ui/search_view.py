"""Search hits as a numbered list: ``sessions search`` prints it, ``/search`` offers a pick.

Snippets and titles are stored content, so they are printed as ``Text`` with
control characters made visible; matches are shown in bold reverse video (and
stay plain text when the output is not a terminal).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from harness9.store.search import SearchHit, snippet_parts
from harness9.ui.listing import local_time
from harness9.ui.text import inert

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

MATCH_STYLE = "bold reverse"


def hit_heading(number: int, hit: SearchHit) -> Text:
    """``1. <session id>  <time>  <role> #<message id>  <title>``"""
    line = Text()
    line.append(f"{number}. ", style="bold")
    line.append(hit.session_id, style="cyan")
    line.append(f"  {local_time(hit.created_at)}  ", style="dim")
    line.append(inert(hit.role), style="bold")
    # The number `sessions show` gives the message (a row id only if the store gave none).
    line.append(f" #{hit.number}" if hit.number else f" row {hit.message_id}", style="dim")
    if hit.title:
        line.append(f"  {inert(hit.title)}")
    return line


def hit_snippet(hit: SearchHit) -> Text:
    text = Text("   ")
    for chunk, is_match in snippet_parts(hit.snippet):
        text.append(inert(chunk), style=MATCH_STYLE if is_match else None)
    return text


def render_hits(console: Console, hits: Sequence[SearchHit]) -> None:
    """Number the hits from 1, each a heading line and its highlighted snippet."""
    if not hits:
        console.print("No matches.")
        return
    for number, hit in enumerate(hits, start=1):
        if not console.is_terminal:
            # One hit is two lines however long, so piped output stays greppable.
            console.print(hit_heading(number, hit), soft_wrap=True)
            console.print(hit_snippet(hit), soft_wrap=True)
            continue
        # A person's terminal: the heading cut to one line, the snippet wrapped between words
        # (the terminal's own wrapping would cut them anywhere).
        console.print(hit_heading(number, hit), no_wrap=True, overflow="ellipsis")
        console.print(hit_snippet(hit))


# A catch-up this long (about a second or more) is announced; shorter ones pass unnoticed.
LONG_CATCH_UP = 20_000


class IndexProgress:
    """The progress callback a search is given: says once that indexing will take a while.

    The store calls it with (done, total) for each bounded step of its catch-up. For a
    long one it prints ``indexing 300,000 messages…`` once on ``console`` (stderr), and
    on a terminal also draws a progress bar, removed when done. Use as a context
    manager so the bar is stopped even when the search fails.
    """

    def __init__(self, console: Console, threshold: int = LONG_CATCH_UP) -> None:
        self.console = console
        self.threshold = threshold
        self.announced = False
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __call__(self, done: int, total: int) -> None:
        if total < self.threshold:
            return
        if not self.announced:
            self.announced = True
            self.console.print(f"indexing {total:,} messages…", markup=False, highlight=False)
            if self.console.is_terminal:
                from rich.progress import BarColumn, Progress, TaskProgressColumn

                self._progress = Progress(
                    BarColumn(), TaskProgressColumn(), console=self.console, transient=True
                )
                self._progress.start()
                self._task = self._progress.add_task("indexing", total=total)
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=done)
            if done >= total:
                self.close()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> IndexProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
