"""A session's title: the one line ``sessions list`` shows, taken from its first user message."""

from __future__ import annotations

import re
from collections.abc import Iterable

from harness9.schema import ROLE_USER, Message

TITLE_MAX_CHARS = 60

_WHITESPACE_RE = re.compile(r"\s+")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def make_title(content: str) -> str:
    """One line of at most TITLE_MAX_CHARS characters: what ``sessions list`` shows."""
    head = content[:512]  # enough for the title unless it is mostly whitespace
    text = _WHITESPACE_RE.sub(" ", _CONTROL_RE.sub(" ", head)).strip()
    if len(text) <= TITLE_MAX_CHARS + 1 and len(content) > len(head):
        text = _WHITESPACE_RE.sub(" ", _CONTROL_RE.sub(" ", content)).strip()
    if len(text) > TITLE_MAX_CHARS:
        text = text[: TITLE_MAX_CHARS - 1].rstrip() + "…"
    return text


def first_title(msgs: Iterable[Message]) -> str:
    """The title of the first user message that has one; "" when none does."""
    for m in msgs:
        if m.role == ROLE_USER:
            title = make_title(m.content)
            if title:
                return title
    return ""
