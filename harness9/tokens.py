"""Zero-dependency token arithmetic.

The estimate counts UTF-8 *bytes*, not characters: CJK text is about three bytes a character
and close to one token each, so characters/4 would under-count it by a factor of four, while
bytes/4 stays within the 20 % head-room the compaction threshold keeps. ``ServerCount``
learns how a server's count differs from it, either way.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable

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
    definitions) and its number of messages:
    ``count = ratio * estimate + per_message * messages + fixed``, fitted by least squares
    over the last ``SAMPLES`` calls. The ratio and the fixed part may take the count below
    the estimate as well as above it: a chat template that drops the tool definitions (a
    negative fixed part), a denser tokenizer or CJK text (a ratio under 1), a tokenizer
    that splits more. The part per message is the framing each message carries (roles,
    separators, call ids): a view of a few large messages, left by a compaction, carries
    less of it than one of many small ones with the same estimate, which a ratio alone
    would count as the many.

    Of the three fits (ratio and fixed part; one part per message beside a ratio of 1;
    all three) the one that predicts each sample best from the others (leave-one-out)
    counts, so a part the samples cannot tell apart from the others (a conversation that
    only grew) is not trusted. Until the calls differ enough in size to tell a ratio from
    a fixed part, the count is the larger of the two one-part readings (``ratio`` alone,
    ``fixed`` alone): each is exact for its own kind of server, and the larger never
    under-counts a growing context for either. With no call reported yet, the count is
    the estimate itself. A count asked for without the number of messages uses the ratio
    and fixed part alone.
    """

    SAMPLES = 8
    RATIO_MIN = 0.25
    RATIO_MAX = 4.0
    # Estimates closer than this share of their mean cannot tell a ratio from a fixed part.
    MIN_SPREAD = 0.1

    def __init__(self) -> None:
        self._samples: deque[tuple[int, int, int]] = deque(maxlen=self.SAMPLES)
        self.ratio, self.fixed = 1.0, 0.0  # the fit on the estimate alone
        # The fit with a part per message: (ratio, per message, fixed); None: not trusted.
        self.framed: tuple[float, float, float] | None = None
        self._one_part: tuple[float, float] | None = None  # (ratio alone, fixed alone)

    @property
    def known(self) -> bool:
        """Whether a server has reported any count yet."""
        return bool(self._samples)

    def observe(self, estimated: int, actual: int, messages: int = 0) -> None:
        """One reply's reported input tokens (``actual``) for a request of ``estimated``
        in ``messages`` messages (0: not known)."""
        if estimated <= 0 or actual <= 0:
            return  # no request, or a server that reports no usage
        self._samples.append((estimated, max(0, messages), actual))
        samples = list(self._samples)
        n = len(samples)
        mean_e = sum(e for e, _, _ in samples) / n
        mean_a = sum(a for _, _, a in samples) / n
        spread = max(e for e, _, _ in samples) - min(e for e, _, _ in samples)
        self.framed = None
        if spread < self.MIN_SPREAD * mean_e:
            ratio = min(self.RATIO_MAX, max(self.RATIO_MIN, mean_a / mean_e))
            self._one_part = (ratio, mean_a - mean_e)
            self.ratio, self.fixed = ratio, 0.0
            return
        self._one_part = None
        fit = _fit_ratio(samples)
        assert fit is not None  # the spread above is a variance
        ratio, _, self.fixed = fit
        self.ratio = min(self.RATIO_MAX, max(self.RATIO_MIN, ratio))
        if ratio != self.ratio:
            self.fixed = mean_a - self.ratio * mean_e
        if all(m > 0 for _, m, _ in samples):
            self.framed = _best_framed(samples)

    def count(self, estimated: int, messages: int | None = None) -> int:
        """The server's expected count of a request whose estimate is ``estimated`` (in
        ``messages`` messages, when known)."""
        if not self._samples:
            return estimated
        if self._one_part is not None:
            ratio, fixed = self._one_part
            return max(0, round(max(ratio * estimated, estimated + fixed)))
        if messages is not None and self.framed is not None:
            ratio, per_message, fixed = self.framed
            return max(0, round(ratio * estimated + per_message * messages + fixed))
        return max(0, round(self.ratio * estimated + self.fixed))


Sample = tuple[int, int, int]  # (estimate, messages, reported count)
Fit = tuple[float, float, float]  # (ratio, per message, fixed)


def _fit_ratio(samples: list[Sample]) -> Fit | None:
    """``count = ratio * estimate + fixed`` by least squares (None: estimates all equal)."""
    n = len(samples)
    mean_e = sum(e for e, _, _ in samples) / n
    mean_a = sum(a for _, _, a in samples) / n
    var = sum((e - mean_e) ** 2 for e, _, _ in samples)
    if var == 0:
        return None
    ratio = sum((e - mean_e) * (a - mean_a) for e, _, a in samples) / var
    return ratio, 0.0, mean_a - ratio * mean_e


def _fit_per_message(samples: list[Sample]) -> Fit | None:
    """``count = estimate + per_message * messages + fixed`` (None: the message counts are
    all equal, or the fit has a negative part per message, which no framing has)."""
    n = len(samples)
    mean_m = sum(m for _, m, _ in samples) / n
    mean_x = sum(a - e for e, _, a in samples) / n
    var = sum((m - mean_m) ** 2 for _, m, _ in samples)
    if var == 0:
        return None
    per = sum((m - mean_m) * (a - e - mean_x) for e, m, a in samples) / var
    return (1.0, per, mean_x - per * mean_m) if per >= 0 else None


def _fit_both(samples: list[Sample]) -> Fit | None:
    """``count = ratio * estimate + per_message * messages + fixed`` (None: estimate and
    message count move together too closely to be told apart, or the fit is not a
    server's: a ratio out of bounds, a negative part per message)."""
    n = len(samples)
    me = sum(e for e, _, _ in samples) / n
    mm = sum(m for _, m, _ in samples) / n
    ma = sum(a for _, _, a in samples) / n
    see = sum((e - me) ** 2 for e, _, _ in samples)
    smm = sum((m - mm) ** 2 for _, m, _ in samples)
    sem = sum((e - me) * (m - mm) for e, m, _ in samples)
    sea = sum((e - me) * (a - ma) for e, _, a in samples)
    sma = sum((m - mm) * (a - ma) for _, m, a in samples)
    det = see * smm - sem * sem
    if det <= 1e-9 * see * smm:  # (nearly) collinear
        return None
    ratio = (sea * smm - sma * sem) / det
    per = (sma * see - sea * sem) / det
    if per < 0 or not ServerCount.RATIO_MIN <= ratio <= ServerCount.RATIO_MAX:
        return None
    return ratio, per, ma - ratio * me - per * mm


def _loo_error(samples: list[Sample], fit: Callable[[list[Sample]], Fit | None]) -> float | None:
    """The squared error of predicting each sample from a fit on the others (None: some
    subset cannot be fitted)."""
    total = 0.0
    for i, (e, m, a) in enumerate(samples):
        part = fit(samples[:i] + samples[i + 1 :])
        if part is None:
            return None
        ratio, per, fixed = part
        total += (ratio * e + per * m + fixed - a) ** 2
    return total


def _best_framed(samples: list[Sample]) -> Fit | None:
    """The fit with a part per message when it predicts the samples left out better than
    the ratio and fixed part alone; None otherwise."""
    if len(samples) < 4:
        return None
    plain = _loo_error(samples, _fit_ratio)
    best: tuple[float, Fit] | None = None
    for make in (_fit_per_message, _fit_both):
        score, fit = _loo_error(samples, make), make(samples)
        if score is None or fit is None or (plain is not None and score >= plain):
            continue
        if best is None or score < best[0]:
            best = (score, fit)
    return best[1] if best is not None else None
