"""The SQLite store's full-text queries: FTS5 with bm25 ranking, and CJK by trigrams.

``harness9.store.sqlite.Manager.search`` catches the index up (harness9.store.fts_index)
and then runs one of these. The query language and its errors are
harness9.store.search's, the same on PostgreSQL (harness9.store.postgres).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from harness9.store.scope import read_scope
from harness9.store.search import (
    ELLIPSIS,
    HIGHLIGHT_CLOSE,
    HIGHLIGHT_OPEN,
    SNIPPET_TOKENS,
    SearchHit,
    SearchQueryError,
    cjk_match,
    clean_snippet,
    has_cjk,
    query_terms,
    substring_snippet,
)

SEARCH_SQL = (
    # Text comes back as bytes, decoded leniently: one corrupt row must not break search.
    "SELECT m.session_id, m.id, CAST(m.role AS BLOB), m.created_at, CAST(s.title AS BLOB), "
    "CAST(snippet(messages_fts, 0, ?, ?, ?, ?) AS BLOB), bm25(messages_fts) "
    "FROM messages_fts JOIN messages AS m ON m.id = messages_fts.rowid "
    "JOIN sessions AS s ON s.id = m.session_id WHERE messages_fts MATCH ?"
)


class Reader(Protocol):
    """What a search needs of the store: one read of its connection (errors mapped)."""

    def read(self) -> AbstractContextManager[sqlite3.Connection]: ...


def search(
    store: Reader, query: str, expr: str, *, limit: int, session_id: str | None
) -> list[SearchHit]:
    """Messages matching ``query`` (``expr``: its FTS5 form), best bm25 match first;
    one session's (a fork's inherited messages too) when ``session_id`` is given."""
    if has_cjk(query):
        return _search_cjk(store, query, limit=limit, session_id=session_id)
    sql = SEARCH_SQL
    args: list[object] = [HIGHLIGHT_OPEN, HIGHLIGHT_CLOSE, ELLIPSIS, SNIPPET_TOKENS, expr]
    with store.read() as conn:
        if session_id is not None:
            mine, scoped = read_scope(conn, "?", session_id).where("?", "m.")
            sql += f" AND {mine}"
            args += scoped
        sql += " ORDER BY bm25(messages_fts), m.id DESC"
        if limit > 0:
            sql += " LIMIT ?"
            args.append(limit)
        try:
            rows = conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if "fts5" in str(exc) or "syntax error" in str(exc):
                raise SearchQueryError(f"cannot search for {query.strip()!r}: {exc}") from exc
            raise  # the store's read() names the file
    return _hits(rows, clean_snippet, session_id)


def _search_cjk(
    store: Reader, query: str, *, limit: int, session_id: str | None
) -> list[SearchHit]:
    """A query with CJK text: substring matches in the trigram index of CJK rows.

    bm25 ranks the hits when some term is 3+ characters (a trigram MATCH); with
    only shorter terms (LIKE) the newest come first.
    """
    terms = query_terms(query)
    match, likes = cjk_match(terms)
    conds: list[str] = []
    args: list[object] = []
    if match is not None:
        conds.append("messages_cjk MATCH ?")
        args.append(match)
    for pattern in likes:
        # `|| ''` keeps LIKE off the trigram index, which misses patterns under 3 chars.
        conds.append("(c.body || '') LIKE ? ESCAPE '\\'")
        args.append(pattern)
    rank = "bm25(messages_cjk)" if match is not None else "0.0"
    with store.read() as conn:
        if session_id is not None:
            mine, scoped = read_scope(conn, "?", session_id).where("?", "m.")
            conds.append(mine)
            args += scoped
        sql = (
            "SELECT m.session_id, m.id, CAST(m.role AS BLOB), m.created_at, "
            f"CAST(s.title AS BLOB), CAST(c.body AS BLOB), {rank} "
            "FROM messages_cjk AS c JOIN messages AS m ON m.id = c.rowid "
            "JOIN sessions AS s ON s.id = m.session_id "
            f"WHERE {' AND '.join(conds)} ORDER BY {rank}, m.id DESC"
        )
        if limit > 0:
            sql += " LIMIT ?"
            args.append(limit)
        rows = conn.execute(sql, args).fetchall()
    return _hits(rows, lambda body: substring_snippet(clean_snippet(body), terms), session_id)


def _hits(
    rows: Iterable[Sequence[Any]], snippet: Callable[[Any], str], session_id: str | None = None
) -> list[SearchHit]:
    """Search rows (session, id, role, time, title, text, score) as hits; ``snippet`` cuts the
    text. A search of one session reports its hits as that session's (a fork's inherited
    rows belong to its origin)."""
    return [
        SearchHit(
            session_id or sid,
            mid,
            clean_snippet(role),
            created,
            clean_snippet(title),
            snippet(text),
            float(score),
        )
        for sid, mid, role, created, title, text, score in rows
    ]
