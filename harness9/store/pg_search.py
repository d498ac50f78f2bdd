"""Search on the PostgreSQL store: the SQLite store's query language, as a ``tsquery``.

The user's text is read exactly as the SQLite store reads it (``to_fts_query``),
so the same queries are accepted and the same bad input gives the same one-line
error. Words are split, lower-cased and accent-folded the way the stored text is
(see harness9.store.pg_migrations, migration 2); a term's words must be adjacent
and in order (``<->``), a trailing ``*`` makes its last word a prefix, and terms
are ANDed. Snippets are cut here, like FTS5's ``snippet()``: 16 words around the
first match, matches wrapped in the highlight markers, "…" where text was cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness9.store.pg_migrations import ACCENTED, UNACCENTED
from harness9.store.search import (
    ELLIPSIS,
    HIGHLIGHT_CLOSE,
    HIGHLIGHT_OPEN,
    SNIPPET_TOKENS,
    clean_snippet,
    to_fts_query,
)

_FOLD = str.maketrans(ACCENTED, UNACCENTED)
_QUOTED_TERM_RE = re.compile(r'"((?:[^"]|"")*)"( \*)?')
_WORD_RE = re.compile(r"[^\W_]+")
_MARKERS_RE = re.compile(f"[{HIGHLIGHT_OPEN}{HIGHLIGHT_CLOSE}]")


def fold(word: str) -> str:
    return word.lower().translate(_FOLD)


@dataclass(slots=True)
class Term:
    words: list[str]  # folded, in order
    prefix: bool  # the last word is a prefix


def parse(query: str) -> list[Term]:
    """The query's terms; SearchQueryError exactly where the SQLite store raises it."""
    terms: list[Term] = []
    for match in _QUOTED_TERM_RE.finditer(to_fts_query(query)):
        words = [fold(w) for w in _WORD_RE.findall(match.group(1).replace('""', '"'))]
        if words:
            terms.append(Term(words, bool(match.group(2))))
    return terms


def to_tsquery_text(terms: list[Term]) -> str:
    """The text for ``to_tsquery('simple', ...)``: words are letters and digits only."""
    out: list[str] = []
    for t in terms:
        lexemes = [f"'{w}'" for w in t.words]
        if t.prefix:
            lexemes[-1] += ":*"
        out.append(f"({' <-> '.join(lexemes)})" if len(lexemes) > 1 else lexemes[0])
    return " & ".join(out)


def _matches(word: str, terms: list[Term]) -> bool:
    for t in terms:
        for i, w in enumerate(t.words):
            if word == w or (t.prefix and i == len(t.words) - 1 and word.startswith(w)):
                return True
    return False


def snippet(text: str, terms: list[Term], size: int = SNIPPET_TOKENS) -> str:
    """One line of ``size`` words around the first match, matches highlighted."""
    text = _MARKERS_RE.sub(" ", text)  # stored markers must never read as highlights
    tokens = [(m.start(), m.end(), fold(m.group())) for m in _WORD_RE.finditer(text)]
    if not tokens:
        return clean_snippet(text)
    hits = [i for i, (_, _, w) in enumerate(tokens) if _matches(w, terms)]
    first = hits[0] if hits else 0
    start = max(0, min(first - (size - 1) // 2, len(tokens) - size))
    end = min(len(tokens), start + size)
    hit_set = set(hits)
    parts: list[str] = []
    pos = tokens[start][0]
    for i in range(start, end):
        a, b, _ = tokens[i]
        parts.append(text[pos:a])
        word = text[a:b]
        parts.append(f"{HIGHLIGHT_OPEN}{word}{HIGHLIGHT_CLOSE}" if i in hit_set else word)
        pos = b
    if end == len(tokens):
        parts.append(text[pos:])  # trailing punctuation, as FTS5 keeps it
    body = clean_snippet("".join(parts))
    return (ELLIPSIS if start > 0 else "") + body + (ELLIPSIS if end < len(tokens) else "")
