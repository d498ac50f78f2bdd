"""Asking the user before a tool acts: run this command? write or edit this file (here is
the diff)?

Answers are y (yes, this once), n (no, the default; "n, reason" tells the model
why) and a (always: this command, or this path, for the rest of the session; a
path's covers its edits and whole writes alike, and its diff is still shown each
time). Keys typed ahead while the model was working are discarded before the
question, so a stray Enter or "y" typed for the previous prompt cannot answer it;
the decision is printed under it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.text import Text

from harness9.tools.base import Approval, ApprovalAnswer, Declined
from harness9.ui.text import inert, plural
from harness9.ui.typing_ahead import answering

# The default (Enter) is the capital: no.
ANSWERS = "[y/N/a]"
_REASON_RE = re.compile(r"^(no|n)\s*[,:;—-]?\s+|^(no|n)\s*[,:;—-]\s*", re.IGNORECASE)


def split_answer(answer: str) -> tuple[str, str]:
    """``("n", "use staging")`` from ``"n, use staging"``; ``("y", "")`` from ``"Y"``.

    Only a no carries a reason; anything else is one word (or not an answer)."""
    match = _REASON_RE.match(answer)
    if match and answer[match.end() :].strip():
        return "n", answer[match.end() :].strip()
    return answer.lower(), ""


_WHAT = {"bash": "command", "write_file": "path", "edit_file": "path"}
# "Always" for a path covers every change to that file, whole writes and edits alike.
_SAME_ANSWER = {"edit_file": "write_file"}


def discard_type_ahead(stream: TextIO | None = None) -> None:
    """Throw away keys already typed on a terminal (default stdin; nothing for a pipe),
    those the line editor read ahead included (a "y" typed right after Enter)."""
    from harness9.ui.line_editor import discard_type_ahead as discard_read_ahead

    discard_read_ahead()
    stream = stream if stream is not None else sys.stdin
    try:
        if not stream.isatty():
            return
        import termios

        termios.tcflush(stream.fileno(), termios.TCIFLUSH)
    except (ImportError, OSError, ValueError):
        pass  # no termios (Windows) or stdin closed: nothing was typed ahead that we can see


def preview_text(preview: str, max_lines: int) -> Text:
    """A diff or a file's head, coloured by line kind, inert, cut to ``max_lines``."""
    lines = preview.splitlines()
    shown, hidden = lines[:max_lines], len(lines) - max_lines
    text = Text()
    for line in shown:
        if line.startswith(("+++", "---")):
            style = "bold"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        elif line.startswith("@@"):
            style = "cyan"
        else:
            style = ""
        text.append(inert(line) + "\n", style=style)
    if hidden > 0:
        text.append(f"… {plural(hidden, 'more line')}\n", style="dim")
    return text


class TerminalApprover:
    """The ``confirm`` callback for tools when a person is at the terminal."""

    def __init__(
        self,
        console: Console,
        ask: Callable[[str], str] | None = None,
        flush: Callable[[], None] = discard_type_ahead,
    ) -> None:
        self.console = console
        self.ask = ask or (lambda prompt: console.input(prompt, markup=False))
        self.flush = flush
        self.always: set[tuple[str, str]] = set()

    def reset(self) -> None:
        """Forget the "always" answers (a new or resumed session starts asking again)."""
        self.always.clear()

    def __call__(self, approval: Approval) -> ApprovalAnswer:
        key = (_SAME_ANSWER.get(approval.tool, approval.tool), approval.subject)
        subject = inert(approval.subject)
        if approval.preview:  # shown for an "always" path too: the user sees every change
            room = max(12, self.console.size.height - 8)
            self.console.print(preview_text(approval.preview, room), end="")
        if key in self.always:
            self._decision(f"✓ allowed: {subject} (always, this session)", "green")
            return True
        self.flush()
        while True:
            try:
                with answering():
                    answer = self.ask(f"{inert(approval.question)} {ANSWERS} ").strip()
            except EOFError:
                answer = "n"
            except KeyboardInterrupt:
                self.console.print()  # the question's line ends at the ^C, not what follows
                raise
            word, reason = split_answer(answer)
            if word in ("y", "yes"):
                self._decision(f"✓ allowed once: {subject}", "green")
                return True
            if word in ("a", "always"):
                self.always.add(key)
                what = _WHAT.get(
                    approval.tool, "tool" if approval.tool.startswith("mcp__") else "action"
                )
                self._decision(
                    f"✓ allowed: {subject} (always for this {what}, this session)", "green"
                )
                return True
            if word in ("n", "no", ""):
                told = f" — the model is told: {inert(reason)}" if reason else ""
                self._decision(f"✗ declined: {subject}{told}", "red")
                return Declined(reason)
            self.console.print(
                'answer y (yes), n (no; "n, reason" tells the model why) or a (always)',
                style="yellow",
            )

    def _decision(self, line: str, style: str) -> None:
        self.console.print(Text(f"  {line}", style=style))
