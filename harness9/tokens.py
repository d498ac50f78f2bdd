"""Zero-dependency token arithmetic.

The estimate counts UTF-8 *bytes*, not characters: CJK text is about three bytes a character
and close to one token each, so characters/4 would under-count it by a factor of four, while
bytes/4 stays within the 20 % head-room the compaction threshold keeps. ``ServerCount``
learns how a server's count differs from it, either way.
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


class ServerCount:
    """The one model of how the server counts a request, learnt from the input tokens each
    reply reports against the request's estimate (bytes / 4 of the messages plus the tool
    definitions): ``count = ratio * estimate + fixed``, fitted by least squares over the
    last ``SAMPLES`` calls. Both parts may take the count below the estimate as well as
    above it: a chat template that drops the tool definitions (a negative fixed part), a
    denser tokenizer or CJK text (a ratio under 1), a tokenizer that splits more, framing.

    A request smaller than the one before starts a new run of calls (a compaction, an
    undo): its messages are fewer for their size, so a server that counts a little per
    message counts it lower than the calls before at the same estimate. The ratio is the
    runs' common slope and the fixed part the latest run's level, so the calls from before
    a compaction neither tilt the slope nor lift the level after it.

    Until the calls differ enough in size to tell the two parts apart, the count is the
    larger of the two one-part readings (``ratio`` alone, ``fixed`` alone): each is exact
    for its own kind of server, and the larger never under-counts a growing context for
    either. With no call reported yet, the count is the estimate itself.
    """

    SAMPLES = 8
    RATIO_MIN = 0.25
    RATIO_MAX = 4.0
    # Estimates closer than this share of their mean cannot tell a ratio from a fixed part.
    MIN_SPREAD = 0.1

    def __init__(self) -> None:
        self._samples: deque[tuple[int, int]] = deque(maxlen=self.SAMPLES)
        self.ratio, self.fixed = 1.0, 0.0
        self._one_part: tuple[float, float] | None = None  # (ratio alone, fixed alone)

    @property
    def known(self) -> bool:
        """Whether a server has reported any count yet."""
        return bool(self._samples)

    def samples(self) -> tuple[tuple[int, int], ...]:
        """The (estimate, reported) pairs the fit stands on, oldest first: what a session
        stores so the next process counts as this one does (``seed``)."""
        return tuple(self._samples)

    def seed(self, samples: Iterable[tuple[int, int]]) -> None:
        """Take up stored ``samples`` (as ``samples`` hands them out) by replaying them in
        order through ``observe``: the fit is the one that learnt them."""
        for estimated, actual in list(samples)[-self.SAMPLES :]:
            self.observe(estimated, actual)

    def observe(self, estimated: int, actual: int) -> None:
        """One reply's reported input tokens (``actual``) for a request of ``estimated``."""
        if estimated <= 0 or actual <= 0:
            return  # no request, or a server that reports no usage
        self._samples.append((estimated, actual))
        samples = list(self._samples)
        mean_e = sum(e for e, _ in samples) / len(samples)
        runs = _runs(samples)
        # The runs apart; when none spreads enough, all the calls as one run.
        for grouped in (runs, [samples]) if len(runs) > 1 else (runs,):
            fitted = self._fit(grouped, self.MIN_SPREAD * mean_e)
            if fitted is not None:
                (self.ratio, self.fixed), self._one_part = fitted, None
                return
        mean_a = sum(a for _, a in samples) / len(samples)
        ratio = self._clamp(mean_a / mean_e)
        self._one_part = (ratio, mean_a - mean_e)
        self.ratio, self.fixed = ratio, 0.0

    def _fit(
        self, runs: list[list[tuple[int, int]]], min_spread: float
    ) -> tuple[float, float] | None:
        """(ratio, fixed): the slope the runs share, at the latest run's level; None when
        no run spreads over ``min_spread`` tokens of estimate."""
        var = cov = 0.0
        widest = 0
        for run in runs:
            mean_e, mean_a = _means(run)
            var += sum((e - mean_e) ** 2 for e, _ in run)
            cov += sum((e - mean_e) * (a - mean_a) for e, a in run)
            widest = max(widest, max(e for e, _ in run) - min(e for e, _ in run))
        if widest < min_spread or var == 0:
            return None
        ratio = self._clamp(cov / var)
        mean_e, mean_a = _means(runs[-1])
        return ratio, mean_a - ratio * mean_e

    def _clamp(self, ratio: float) -> float:
        return min(self.RATIO_MAX, max(self.RATIO_MIN, ratio))

    def count(self, estimated: int) -> int:
        """The server's expected count of a request whose estimate is ``estimated``."""
        if not self._samples:
            return estimated
        if self._one_part is not None:
            ratio, fixed = self._one_part
            return max(0, round(max(ratio * estimated, estimated + fixed)))
        return max(0, round(self.ratio * estimated + self.fixed))


def _runs(samples: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """``samples`` split where a request is smaller than the one before."""
    runs = [samples[:1]]
    for before, sample in zip(samples, samples[1:], strict=False):
        if sample[0] < before[0]:
            runs.append([])
        runs[-1].append(sample)
    return runs


def _means(run: list[tuple[int, int]]) -> tuple[float, float]:
    return sum(e for e, _ in run) / len(run), sum(a for _, a in run) / len(run)
