"""Full-text search over stored messages: the query language and the hit record.

The user's query is never handed to FTS5 as written: FTS5's own syntax turns
ordinary text such as ``foo.py``, ``-x`` or ``AND`` into syntax errors. Instead
every bare word becomes a quoted FTS5 string (the tokenizer then splits it the
way it split the indexed text, so ``foo.py`` matches "foo" followed by "py"),
"quoted phrases" stay phrases, a trailing ``*`` asks for a prefix, and all
terms are ANDed. Only text that has no such reading (an unbalanced quote, a
query with no words) is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness9.errors import UsageError

# snippet() wraps each matched token in these; the index blanks them out of the text.
HIGHLIGHT_OPEN = "\x02"
HIGHLIGHT_CLOSE = "\x03"
SNIPPET_TOKENS = 16  # tokens of context snippet() shows around the match
ELLIPSIS = "…"

# What unicode61 keeps as token characters: letters, digits (not "_" or punctuation).
_TOKEN_CHAR_RE = re.compile(r"[^\W_]")
_SPACE_RE = re.compile(r"\s+")


class SearchQueryError(UsageError):
    """The search text has no reading as a query (unbalanced quote, nothing to search)."""


@dataclass(slots=True)
class SearchHit:
    session_id: str
    message_id: int
    role: str
    created_at: float  # Unix seconds, when the message was stored
    title: str  # the session's title
    snippet: str  # one line; matches wrapped in HIGHLIGHT_OPEN ... HIGHLIGHT_CLOSE
    rank: float  # bm25: lower is a better match
    # The message's number in its session, as `sessions show` numbers them (#1 first);
    # 0 until the store's ``number_hits`` fills it in.
    number: int = 0


def _fts_string(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _has_token(text: str) -> bool:
    return _TOKEN_CHAR_RE.search(text) is not None


def to_fts_query(text: str) -> str:
    """The FTS5 MATCH expression for a user's search text (see the module docstring).

    Raises SearchQueryError for an unbalanced quote or a query with no words.
    """
    terms: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if ch == '"':
            end = text.find('"', i + 1)
            if end < 0:
                raise SearchQueryError(f"search query has an unbalanced quote: {text.strip()!r}")
            phrase = text[i + 1 : end]
            if _has_token(phrase):
                terms.append(_fts_string(phrase))
            i = end + 1
            continue
        j = i
        while j < n and not text[j].isspace() and text[j] != '"':
            j += 1
        word = text[i:j]
        i = j
        prefix = word.endswith("*")
        stem = word.rstrip("*") if prefix else word
        if _has_token(stem):
            terms.append(_fts_string(stem) + (" *" if prefix else ""))
    if not terms:
        raise SearchQueryError(f"search query has no words to search for: {text.strip()!r}")
    return " AND ".join(terms)


# The scripts the trigram index serves (see migration index_cjk_trigram's CJK_ROW).
_CJK_RE = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
SNIPPET_CHARS = 40  # characters of context either side of a CJK match


def has_cjk(text: str) -> bool:
    return _CJK_RE.search(text) is not None


def query_terms(text: str) -> list[str]:
    """The terms of a search text (words and "phrases", a trailing * dropped), as written.

    For the substring (trigram) search of CJK queries, where every term is a substring
    to find and a prefix ``*`` means nothing more. Raises SearchQueryError as
    to_fts_query does.
    """
    to_fts_query(text)  # the same errors for the same texts
    terms: list[str] = []
    for m in re.finditer(r'"([^"]*)"|([^\s"]+)', text):
        term = m.group(1) if m.group(1) is not None else m.group(2).rstrip("*")
        term = _SPACE_RE.sub(" ", term).strip()
        if _has_token(term):
            terms.append(term)
    return terms


def cjk_match(terms: list[str]) -> tuple[str | None, list[str]]:
    """(trigram MATCH expression or None, LIKE patterns) for substring terms.

    The trigram index matches substrings of 3 or more characters; a shorter term
    (most two-character CJK words) is matched with LIKE over the same rows.
    """
    long_terms = [_fts_string(t) for t in terms if len(t) >= 3]
    likes = [
        "%" + t.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        for t in terms
        if len(t) < 3
    ]
    return (" AND ".join(long_terms) or None), likes


def substring_snippet(body: str, terms: list[str]) -> str:
    """A one-line snippet around the first match, every term occurrence highlighted."""
    lowered = body.lower()
    spans: list[tuple[int, int]] = []
    for term in terms:
        t = term.lower()
        start = lowered.find(t)
        while start >= 0 and t:
            spans.append((start, start + len(t)))
            start = lowered.find(t, start + len(t))
    if not spans:
        return clean_snippet(body[: 2 * SNIPPET_CHARS])
    spans.sort()
    first = spans[0][0]
    lo = max(0, first - SNIPPET_CHARS)
    hi = min(len(body), first + SNIPPET_CHARS + max(len(t) for t in terms))
    out, pos = [], lo
    for a, b in spans:
        if a < pos or b > hi:
            continue
        out += [body[pos:a], HIGHLIGHT_OPEN, body[a:b], HIGHLIGHT_CLOSE]
        pos = b
    out.append(body[pos:hi])
    text = ("…" if lo > 0 else "") + "".join(out) + ("…" if hi < len(body) else "")
    return clean_snippet(text)


def clean_snippet(raw: bytes | str | None) -> str:
    """snippet() output as one line: undecodable bytes replaced, whitespace runs collapsed."""
    if raw is None:
        return ""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return _SPACE_RE.sub(" ", text).strip()


def snippet_parts(snippet: str) -> list[tuple[str, bool]]:
    """Split a snippet into (text, is_match) runs, for renderers."""
    parts: list[tuple[str, bool]] = []
    for k, chunk in enumerate(re.split(f"[{HIGHLIGHT_OPEN}{HIGHLIGHT_CLOSE}]", snippet)):
        if chunk:
            parts.append((chunk, k % 2 == 1))
    return parts


def plain_snippet(snippet: str) -> str:
    return snippet.replace(HIGHLIGHT_OPEN, "").replace(HIGHLIGHT_CLOSE, "")
