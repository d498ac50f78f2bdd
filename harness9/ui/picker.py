"""The /resume picker: the other sessions, a page at a time, filtered by what is typed.

Each line shows the session's id prefix, when it was last updated, its size, the
directory it ran in and its title. A number resumes that session; Enter shows the
next page; words filter the list (id, title and directory, case-insensitive: the
messages are /search's, and the picker says so); ``q`` or end of input cancels.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from rich.console import Console

from harness9.store.session import ForkOrigin, SessionInfo
from harness9.ui.listing import local_time, marked_title
from harness9.ui.text import inert, plural

PAGE_SIZE = 10


def short_dir(workdir: str) -> str:
    """The directory with the home directory as ``~``; "" when none was recorded."""
    if not workdir:
        return ""
    home = str(Path.home())
    if workdir == home or workdir.startswith(home + "/"):
        return "~" + workdir[len(home) :]
    return workdir


def matches(info: SessionInfo, words: Sequence[str]) -> bool:
    haystack = f"{info.id} {info.title} {info.workdir}".lower()
    return all(w.lower() in haystack for w in words)


class SessionPicker:
    def __init__(
        self,
        sessions: Sequence[SessionInfo],
        console: Console,
        read_line: Callable[[str], str],
        interactive: bool,
        origins: Mapping[str, ForkOrigin] | None = None,
    ) -> None:
        self.sessions = list(sessions)
        self.origins = origins or {}
        self.console = console
        self.read_line = read_line
        self.interactive = interactive

    def run(self, words: str = "") -> str | None:
        """The id of the session picked, or None when cancelled."""
        shown = [i for i in self.sessions if matches(i, words.split())]
        start = 0
        while True:
            if not shown:
                self.console.print(
                    f"no session's title, id or directory matches {inert(words)!r}; "
                    f"/search {inert(words)} looks in what was said",
                    markup=False,
                    highlight=False,
                )
                return None
            page = shown[start : start + PAGE_SIZE]
            self._print_page(page, start, len(shown), words)
            more = start + PAGE_SIZE < len(shown)
            answer = self._ask(more)
            if answer.isdigit() and 1 <= int(answer) <= len(shown):
                return shown[int(answer) - 1].id
            if not answer:
                if not more:
                    return None
                start += PAGE_SIZE
            elif answer.lower() in ("q", "quit"):
                return None
            else:
                words, start = answer, 0
                shown = [i for i in self.sessions if matches(i, words.split())]

    def _ask(self, more: bool) -> str:
        cancel = "Enter for more, q cancels" if more else "Enter or q cancels"
        prompt = f"number to resume, words to filter, {cancel}: "
        try:
            return self.read_line(prompt if self.interactive else "").strip()
        except (EOFError, KeyboardInterrupt):
            return "q"

    def _print_page(self, page: Sequence[SessionInfo], start: int, total: int, words: str) -> None:
        end = start + len(page)
        # Words filter the listing only: say so, and where the messages are searched.
        which = (
            f" whose title, id or directory matches {inert(words)!r} (/search looks in what "
            "was said)"
            if words
            else ""
        )
        self.console.print(
            f"Sessions{which} ({start + 1}-{end} of {total}):", markup=False, highlight=False
        )
        # One line per session: cut to the terminal's width, never wrapped for a pipe.
        fit: dict = {"no_wrap": True, "overflow": "ellipsis"} if self.interactive else {}
        for n, info in enumerate(page, start + 1):
            where = inert(short_dir(info.workdir)) or "-"
            title = inert(marked_title(info.title, self.origins.get(info.id))) or "(empty)"
            self.console.print(
                f"  [{n}] {info.id[:8]}  {local_time(info.updated_at)}  "
                f"{plural(info.message_count, 'message')}  {where}  {title}",
                markup=False,
                highlight=False,
                soft_wrap=not self.interactive,
                **fit,
            )
