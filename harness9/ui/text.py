"""Untrusted text made safe to print: the one ``inert`` every renderer uses.

Model replies (streamed or whole), tool output and stored content are whatever
a model or a program produced, so nothing of them may drive the user's
terminal: no escape sequences, no title changes, no bidi overrides that show
text in another order than it is stored.
"""

from __future__ import annotations

import re

# C0/C1 controls except tab and newline, DEL, plus the bidi embeddings, overrides and
# isolates (U+202A-U+202E, U+2066-U+2069) that reorder what is shown.
_UNSAFE_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: str) -> str:
    """``text`` with every character that could drive a terminal replaced by its escape."""
    return _UNSAFE_RE.sub(_escape, text)


def plural(n: int, word: str) -> str:
    """``1 message``, ``2 messages``: every count shown to a person goes through this."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def corrupt_row_warning(row_id: int, reason: str) -> str:
    """The line each command that read a damaged message row prints about it (on stderr)."""
    return f"warning: message row {row_id} is corrupt ({reason}); skipped"
