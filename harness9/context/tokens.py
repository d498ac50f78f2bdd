"""Zero-dependency token arithmetic.

The estimate counts UTF-8 *bytes*, not characters: CJK text is about three bytes a character
and close to one token each, so characters/4 would under-count it by a factor of four, while
bytes/4 stays within the 20 % head-room the compaction threshold keeps. ``ServerExcess``
learns what a server counts beyond it.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable

from harness9.schema import Message, ToolDefinition

BYTES_PER_TOKEN = 4


def utf8_len(text: str) -> int:
    # isascii() is O(1) in CPython (a flag of the string) and most text is
    # ASCII: this skips the encode that would otherwise dominate compaction.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def message_bytes(msg: Message) -> int:
    """UTF-8 bytes of everything in a message that reaches the model."""
    # The content is measured inline: this runs once per message of every history the
    # compactors look at, so call overhead counts.
    text = msg.content
    n = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if msg.tool_call_id:
        n += utf8_len(msg.tool_call_id)
    for tc in msg.tool_calls:
        n += utf8_len(tc.id) + utf8_len(tc.name) + utf8_len(tc.arguments)
    return n


def estimate_message_tokens(msg: Message) -> int:
    return message_bytes(msg) // BYTES_PER_TOKEN


def estimate_tokens(msgs: Iterable[Message]) -> int:
    """Bytes of all messages summed, then divided by four (one rounding, not one per message)."""
    return sum(message_bytes(m) for m in msgs) // BYTES_PER_TOKEN


def estimate_tool_tokens(tools: Iterable[ToolDefinition]) -> int:
    """Name + description + compact JSON of the parameter schema, in bytes / 4."""
    total = 0
    for t in tools:
        schema = json.dumps(t.parameters, separators=(",", ":"), ensure_ascii=False)
        total += utf8_len(t.name) + utf8_len(t.description) + utf8_len(schema)
    return total // BYTES_PER_TOKEN


def format_token_count(n: int) -> str:
    """500 -> "500", 45200 -> "45.2K", 1200000 -> "1.2M"."""
    if n < 0:
        return "-" + format_token_count(-n)
    if n < 1000:
        return str(n)
    value, suffix = (n / 1000, "K") if n < 1_000_000 else (n / 1_000_000, "M")
    text = f"{value:.1f}".removesuffix(".0")
    if suffix == "K" and text == "1000":  # 999_950..999_999 would read "1000K"
        return "1M"
    return text + suffix


class ServerExcess:
    """What the server counts beyond the estimate, learnt from each call's reported input:
    a fixed part (the tool definitions as the server serialises them, its tokenizer's
    difference on the system message) plus a part per message (roles, call ids,
    separators), fitted by least squares over the last ``SAMPLES`` calls. Until those
    calls differ in length, all of it counts per message.

    One share per message misjudged a fixed difference: learnt on a 3-message view after a
    compaction, 330 tokens of tool schemas became 110 a message, which a 16-message view
    then counted as 1,760.
    """

    SAMPLES = 8

    def __init__(self) -> None:
        self._samples: deque[tuple[int, int]] = deque(maxlen=self.SAMPLES)
        self.fixed = 0.0
        self.per_message = 0.0

    def observe(self, messages: int, excess: int) -> None:
        self._samples.append((max(1, messages), excess))
        samples = list(self._samples)
        mean_n = sum(n for n, _ in samples) / len(samples)
        mean_e = sum(e for _, e in samples) / len(samples)
        var = sum((n - mean_n) ** 2 for n, _ in samples)
        if var == 0:
            self.fixed, self.per_message = 0.0, max(0.0, excess / max(1, messages))
            return
        cov = sum((n - mean_n) * (e - mean_e) for n, e in samples)
        self.per_message = max(0.0, cov / var)
        self.fixed = max(0.0, mean_e - self.per_message * mean_n)

    def tokens(self, messages: int) -> int:
        """The excess expected of a request of ``messages`` messages."""
        return int(self.fixed + self.per_message * messages)
