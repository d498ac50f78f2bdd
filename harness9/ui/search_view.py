"""Search hits as a numbered list: ``sessions search`` prints it, ``/search`` offers a pick.

Snippets and titles are stored content, so they are printed as ``Text`` with
control characters made visible; matches are shown in bold reverse video (and
stay plain text when the output is not a terminal).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from harness9.store.search import SearchHit, snippet_parts
from harness9.ui.listing import local_time
from harness9.ui.text import inert

MATCH_STYLE = "bold reverse"


def hit_heading(number: int, hit: SearchHit) -> Text:
    """``1. <session id>  <time>  <role> #<message id>  <title>``"""
    line = Text()
    line.append(f"{number}. ", style="bold")
    line.append(hit.session_id, style="cyan")
    line.append(f"  {local_time(hit.created_at)}  ", style="dim")
    line.append(inert(hit.role), style="bold")
    line.append(f" #{hit.message_id}", style="dim")
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
        # soft_wrap: one hit is two lines however narrow the console, so output stays greppable.
        console.print(hit_heading(number, hit), soft_wrap=True)
        console.print(hit_snippet(hit), soft_wrap=True)
