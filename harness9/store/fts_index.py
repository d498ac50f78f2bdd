"""Deferred full-text indexing: a message is indexed by the first search after its write.

Writes happen on every chat message and searches rarely, so writing a message
does not touch the FTS5 index (migration 5). ``fts_state.indexed_upto`` marks
how far the index has caught up: messages_fts holds exactly the messages with
``id <= indexed_upto``. Before each search the store calls ``catch_up``, which
indexes everything above the mark in one write transaction. AUTOINCREMENT puts
every new message above the mark; the one writer that can restore older ids,
import, calls ``index_restored`` in its own transaction. Deletes are removed
from the index at once by a trigger, so nothing deleted is ever found.
"""

from __future__ import annotations

import sqlite3

from harness9.store.migrations import CJK_ROW, FTS_BODY

_BEHIND_SQL = (
    "SELECT (SELECT indexed_upto FROM fts_state) < (SELECT coalesce(max(id), 0) FROM messages)"
)


def is_behind(conn: sqlite3.Connection) -> bool:
    """Whether some message is not indexed yet (two index lookups: cheap enough per search)."""
    (behind,) = conn.execute(_BEHIND_SQL).fetchone()
    return bool(behind)


def catch_up(conn: sqlite3.Connection) -> int:
    """Index every message above the mark and raise the mark; return how many were indexed.

    Call inside a write transaction: under its lock no message can be added meanwhile,
    so the new mark (the highest id) covers exactly what was indexed.
    """
    (upto,) = conn.execute("SELECT indexed_upto FROM fts_state").fetchone()
    (top,) = conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()
    if top <= upto:  # the mark never goes down: ids above it may yet be deleted
        return 0
    # By the invariant nothing above the mark is indexed; clearing the range anyway costs
    # one rowid-range lookup and means a hand-made stray row can never wedge every search
    # on a duplicate-rowid error.
    conn.execute("DELETE FROM messages_fts WHERE rowid > ?", (upto,))
    conn.execute("DELETE FROM messages_cjk WHERE rowid > ?", (upto,))
    cur = conn.execute(
        f"INSERT INTO messages_fts (rowid, body) SELECT new.id, {FTS_BODY} "
        "FROM messages AS new WHERE new.id > ?",
        (upto,),
    )
    index_cjk(conn, "new.id > ?", (upto,))
    conn.execute("UPDATE fts_state SET indexed_upto = ?", (top,))
    return cur.rowcount


def index_cjk(conn: sqlite3.Connection, where: str, args: tuple[object, ...]) -> None:
    """Add the CJK rows matching ``where`` (over ``messages AS new``) to the trigram index.

    Called wherever messages_fts is filled, with the same row selection, so both
    indexes always cover the same messages (migration index_cjk_trigram).
    """
    conn.execute(
        f"INSERT INTO messages_cjk (rowid, body) SELECT new.id, {FTS_BODY} "
        f"FROM messages AS new WHERE ({where}) AND {CJK_ROW}",
        args,
    )


def index_restored(conn: sqlite3.Connection, session_id: str) -> int:
    """Index ``session_id``'s messages whose ids lie at or below the mark; return how many.

    For a writer that inserts explicit (possibly old) ids, i.e. import: the catch-up
    only looks above the mark, so rows below it are indexed here, in the writer's own
    transaction. Rows above the mark are left to the catch-up, which indexes them once.
    """
    cur = conn.execute(
        f"INSERT INTO messages_fts (rowid, body) SELECT new.id, {FTS_BODY} "
        "FROM messages AS new WHERE new.session_id = ? "
        "AND new.id <= (SELECT indexed_upto FROM fts_state)",
        (session_id,),
    )
    index_cjk(
        conn,
        "new.session_id = ? AND new.id <= (SELECT indexed_upto FROM fts_state)",
        (session_id,),
    )
    return cur.rowcount
