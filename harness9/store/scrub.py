"""Text a store cannot hold as it is: one mapping over a message's strings, one scrubber."""

from __future__ import annotations

import re
from collections.abc import Callable

from harness9.schema import Message, ToolCall

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def scrub_surrogates(text: str) -> str:
    # A model's JSON can carry a lone "\ud800": not valid UTF-8, so no store can hold it.
    return _SURROGATE_RE.sub("\ufffd", text)


def map_message(m: Message, fix: Callable[[str], str]) -> Message:
    """``m`` with ``fix`` applied to every string it holds (role, content, calls, call id)."""
    return Message(
        fix(m.role),
        fix(m.content),
        [ToolCall(fix(c.id), fix(c.name), fix(c.arguments)) for c in m.tool_calls],
        fix(m.tool_call_id),
        metadata=m.metadata,  # numbers and flags: nothing to fix
    )
