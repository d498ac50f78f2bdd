"""Deferred full-text indexing: a message is indexed by the first search after its write.

Writes happen on every chat message and searches rarely, so writing a message
does not touch the FTS5 index (migration 5). Each deferred index has a mark, a
column of the one-row ``fts_state`` table: the index holds exactly the messages
with ``id <= mark``. Before each search the store catches every index up to the
highest id stored when the search started, in *bounded steps*: ``step`` indexes
the next few hundred messages above the lowest mark and raises that mark, in
its caller's short write transaction, and the caller releases the lock between
steps so that other writers (a chat saving its reply) never wait behind a long
catch-up. AUTOINCREMENT puts every new message above the marks; the one writer
that can restore older ids, import, calls ``index_restored`` in its own
transaction. Deletes are removed from each index at once by its trigger, so
nothing deleted is ever found.

Indexing at write time instead was measured (plain sqlite3, the same FTS5 insert
in a trigger): a 10,000-message batch add took 5.4x as long and single adds 4.3x,
against the store benchmark's 2x target for writes. Hence deferred, but bounded.

Another index rides on the same catch-up by appending a ``DeferredIndex`` to
``INDEXES``; its migration creates the table, adds its mark column to
``fts_state`` with DEFAULT 0 (by rebuilding the table: see migration
index_cjk_trigram for why not ALTER TABLE) and does no back-fill: the bounded
catch-up fills it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from harness9.store.migrations import CJK_ROW, FTS_BODY


@dataclass(frozen=True, slots=True)
class DeferredIndex:
    """An index over ``messages`` that is filled by the catch-up, not at write time."""

    table: str  # the FTS5 table; rowid = messages.id
    mark: str  # its column in fts_state: the highest message id the table has caught up to
    body: str  # SQL expression of a messages row aliased ``new``: the text indexed
    rows: str = "1"  # SQL condition on ``new``: which messages the table holds (all: "1")


INDEXES: list[DeferredIndex] = [
    DeferredIndex("messages_fts", "indexed_upto", FTS_BODY),
    # Only rows with CJK text, with the trigram tokenizer (migration index_cjk_trigram).
    DeferredIndex("messages_cjk", "cjk_indexed_upto", FTS_BODY, CJK_ROW),
]


def top_id(conn: sqlite3.Connection) -> int:
    """The highest message id stored (0 for none): what a search must have indexed."""
    (top,) = conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()
    return int(top)


def _mark(conn: sqlite3.Connection, index: DeferredIndex) -> int:
    (upto,) = conn.execute(f"SELECT {index.mark} FROM fts_state").fetchone()
    return int(upto)


def is_behind(conn: sqlite3.Connection, target: int | None = None) -> bool:
    """Whether some message up to ``target`` (default: all) is not indexed yet. Cheap."""
    top = top_id(conn) if target is None else target
    return any(_mark(conn, index) < top for index in INDEXES)


def backlog(conn: sqlite3.Connection, target: int) -> int:
    """How many messages up to ``target`` some index has still to take in (each counted once)."""
    lowest = min(_mark(conn, index) for index in INDEXES)
    (n,) = conn.execute(
        "SELECT count(*) FROM messages WHERE id > ? AND id <= ?", (lowest, target)
    ).fetchone()
    return int(n)


def step(conn: sqlite3.Connection, target: int, limit: int) -> tuple[int, bool]:
    """Take at most ``limit`` messages up to ``target`` into the indexes furthest behind.

    Every index whose mark is the lowest advances over the same range of messages, so
    indexes that are level (the usual case) cost one pass, and a message is counted
    once however many indexes take it in (an index may hold only some rows: ``rows``).
    Call inside a write transaction: under its lock no message can be added below the
    new mark meanwhile. Returns (messages passed, whether every index has reached
    ``target``). A mark never goes down: ids above it may yet be deleted.
    """
    behind = [(upto, index) for index in INDEXES if (upto := _mark(conn, index)) < target]
    if not behind:
        return 0, True
    upto = min(mark for mark, _ in behind)
    (count, last) = conn.execute(
        "SELECT count(*), max(id) FROM (SELECT id FROM messages WHERE id > ? AND id <= ? "
        "ORDER BY id LIMIT ?)",
        (upto, target, max(1, limit)),
    ).fetchone()
    new_mark = target if last is None else int(last)  # None: the rest was deleted
    for mark, index in behind:
        if mark != upto:
            continue
        # By the invariant nothing above the mark is indexed; clearing the range anyway
        # costs one rowid-range lookup and means a hand-made stray row can never wedge
        # every search on a duplicate-rowid error.
        conn.execute(f"DELETE FROM {index.table} WHERE rowid > ? AND rowid <= ?", (upto, new_mark))
        conn.execute(
            f"INSERT INTO {index.table} (rowid, body) SELECT new.id, {index.body} "
            f"FROM messages AS new WHERE new.id > ? AND new.id <= ? AND ({index.rows})",
            (upto, new_mark),
        )
        conn.execute(f"UPDATE fts_state SET {index.mark} = ?", (new_mark,))
    done = all(_mark(conn, i) >= target for i in INDEXES)
    return int(count), done


def index_restored(
    conn: sqlite3.Connection, session_id: str, *, first_id: int = 0, last_id: int | None = None
) -> int:
    """Index ``session_id``'s messages whose ids lie at or below each mark; return how many.

    For a writer that inserts explicit (possibly old) ids, i.e. import: the catch-up
    only looks above the marks, so rows below them are indexed here, in the writer's own
    transaction. Rows above a mark are left to the catch-up, which indexes them once.
    A writer working in batches passes each batch's id range (``first_id``..``last_id``),
    so no row is indexed twice.
    """
    total = 0
    upto = 2**63 - 1 if last_id is None else last_id
    for index in INDEXES:
        cur = conn.execute(
            f"INSERT INTO {index.table} (rowid, body) SELECT new.id, {index.body} "
            f"FROM messages AS new WHERE new.session_id = ? AND new.id >= ? AND new.id <= ? "
            f"AND new.id <= (SELECT {index.mark} FROM fts_state) AND ({index.rows})",
            (session_id, first_id, upto),
        )
        total += max(cur.rowcount, 0)
    return total
