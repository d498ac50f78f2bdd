"""Topic isolation (off by default): where a new topic starts, at the least similar point
where the term vectors of adjacent windows of ``min_segment_size`` messages drop under
``cosine_threshold``. Every segment but the newest has ``min_segment_size`` messages.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain

from harness9.schema import ROLE_SYSTEM, ROLE_TOOL, Message

_TERM_RE = re.compile(r"[a-z][a-z0-9_]+|[\u3400-\u4dbf\u4e00-\u9fff]")
_STOPWORD_TEXT = """a an and are as at be been but by can could did do does for from had has have how i if in
    into is it its just let me my no not of on or our so some that the their them then there
    these they this to too up us was we were what when where which while who why will with would
    you your yes ok okay please thanks thank also now here should all any get got use using
    的 了 是 在 我 你 他 她 它 们 这 那 和 也 就 都 不 有 一 个 吗 呢 吧 啊 把 被 与 及 或"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


@dataclass(slots=True)
class TopicSegment:
    id: str
    start_idx: int  # index into the messages passed to detect()
    end_idx: int  # exclusive, like a slice
    keywords: list[str] = field(default_factory=list)

    @property
    def message_count(self) -> int:
        return self.end_idx - self.start_idx


def terms(text: str) -> list[str]:
    """Lowercase words (2+ characters) and single CJK characters, minus stopwords."""
    return [t for t in _TERM_RE.findall(text.lower()) if t not in STOPWORDS]


def _vector(m: Message) -> Counter[str]:
    text = m.content + " " + " ".join(f"{tc.name} {tc.arguments}" for tc in m.tool_calls)
    return Counter(terms(text))


def cosine(a: Counter[str], b: Counter[str]) -> float:
    if not a or not b:
        return 1.0  # no evidence of a shift (e.g. "ok", an empty tool result)
    dot = sum(v * b.get(k, 0) for k, v in a.items())
    na = math.sqrt(sum(v * v for v in a.values()))
    nb = math.sqrt(sum(v * v for v in b.values()))
    return dot / (na * nb)


def _sum(vecs: Sequence[Counter[str]]) -> Counter[str]:
    return Counter(chain.from_iterable(v.elements() for v in vecs))


@dataclass(slots=True)
class TopicDetector:
    cosine_threshold: float = 0.3
    min_segment_size: int = 3

    def detect(self, msgs: Sequence[Message]) -> list[TopicSegment]:
        start = 1 if msgs and msgs[0].role == ROLE_SYSTEM else 0
        n = len(msgs)
        if n <= start:
            return []
        vecs = [_vector(m) for m in msgs]
        w = max(1, self.min_segment_size)

        def sim(seg_start: int, i: int) -> float:
            return cosine(_sum(vecs[max(seg_start, i - w) : i]), _sum(vecs[i : i + w]))

        bounds = [start]
        i = start + w
        while i < n:
            # A segment never opens with a tool result: it belongs to its call.
            if msgs[i].role == ROLE_TOOL or sim(bounds[-1], i) >= self.cosine_threshold:
                i += 1
                continue
            options = [j for j in range(i, min(i + w, n)) if msgs[j].role != ROLE_TOOL]
            best = min(options, key=lambda j: (sim(bounds[-1], j), j))
            bounds.append(best)
            i = best + w
        bounds.append(n)
        segments = []
        for k, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
            counts = sorted(_sum(vecs[a:b]).items(), key=lambda kv: (-kv[1], kv[0]))
            segments.append(TopicSegment(f"topic-{k + 1}", a, b, [t for t, _ in counts[:5]]))
        return segments
