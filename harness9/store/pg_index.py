"""Search documents of bulk writes, computed at the next search (the PostgreSQL store).

Computing a message's search document (``search_document``: to_tsvector over its
text, ~65 µs a message) was 700 ms of the 830 a 10,000-message batch took (issue 23),
and most of a 50,000-message import. So only a write of at most ``EAGER_ROWS``
messages (a chat saving a reply, or one turn's tool results) computes the documents as
it writes; a larger one (a batch, an import) stores its rows with ``search`` NULL, and
the partial index ``messages_unindexed`` lists them (migration
index_bulk_writes_at_the_next_search). SQLite's store defers all of its indexing the
same way (harness9.store.fts_index).

Search stays exact throughout:

- before each search, ``step`` runs until every row unindexed when the search began
  is indexed (a row committed meanwhile with a lower id is left to the next one):
  bounded statements, each its own transaction, so no row stays locked for
  long (a pop of one waits at most one step), and an interrupted catch-up keeps what it
  did;
- the query itself (``MATCH_SQL``, ``RANK_SQL``) reads a row still unindexed through
  its text, computing the very document the catch-up would store. Such rows are those
  another machine committed meanwhile, or all of them when this role may not write
  (a read-only role, a standby server): they are found and ranked exactly as indexed
  rows, only more slowly.

Two searches catching up at once do not index a row twice: a step re-checks
``search IS NULL`` on the row version the other one committed, and skips it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

# A write of this many messages or fewer computes their documents as it writes: a chat's
# saves stay searchable by the index at once, and a fleet of chats leaves no backlog.
EAGER_ROWS = 100
# One catch-up step aims to take about this long (its size follows the measured rate).
STEP_TARGET_S = 0.2
FIRST_STEP = 256
MAX_STEP = 20_000

DOCUMENT_SQL = "search_document(m.content, m.tool_calls)"
# ``q.q`` is the query's tsquery. The GIN index serves the first arm, messages_unindexed
# the second (a BitmapOr), so the text of indexed rows is never read to match.
MATCH_SQL = f"(m.search @@ q.q OR (m.search IS NULL AND {DOCUMENT_SQL} @@ q.q))"
RANK_SQL = f"ts_rank(coalesce(m.search, {DOCUMENT_SQL}), q.q)"

# Each step starts after the last id the one before chose: the rows it indexed leave dead
# entries in messages_unindexed until a vacuum, which a scan from the start would re-read.
_STEP_SQL = (
    "WITH todo AS (SELECT id FROM messages WHERE search IS NULL AND id > %s AND id <= %s "
    "ORDER BY id LIMIT %s), "
    "done AS (UPDATE messages AS m SET search = "
    f"{DOCUMENT_SQL} FROM todo WHERE m.id = todo.id AND m.search IS NULL RETURNING 1) "
    "SELECT (SELECT count(*) FROM todo), (SELECT max(id) FROM todo), (SELECT count(*) FROM done)"
)


def newest_unindexed(conn: psycopg.Connection) -> int | None:
    """The id of the newest message without its document, or None when there is none."""
    row = conn.execute("SELECT max(id) FROM messages WHERE search IS NULL").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def backlog(conn: psycopg.Connection, upto: int | None = None) -> int:
    """How many messages (with ids up to ``upto``, if given) have no document yet."""
    if upto is None:
        row = conn.execute("SELECT count(*) FROM messages WHERE search IS NULL").fetchone()
    else:
        row = conn.execute(
            "SELECT count(*) FROM messages WHERE search IS NULL AND id <= %s", (upto,)
        ).fetchone()
    return int(row[0]) if row is not None else 0


@dataclass(slots=True)
class Step:
    """What one catch-up step did."""

    indexed: int  # documents computed
    last_id: int  # the last id it looked at: the next step starts after it
    finished: bool  # nothing unindexed was left up to its ``upto``


def step(conn: psycopg.Connection, after: int, upto: int, size: int) -> Step:
    """Index up to ``size`` of the unindexed messages with ids in (``after``, ``upto``],
    oldest first, in one statement (autocommit: its own transaction)."""
    row = conn.execute(_STEP_SQL, (after, upto, size)).fetchone()
    chosen, last, indexed = row if row is not None else (0, None, 0)
    return Step(int(indexed), after if last is None else int(last), int(chosen) < size)


def next_size(size: int, indexed: int, took_s: float) -> int:
    """The next step's size: about STEP_TARGET_S at the rate just measured."""
    if not indexed:
        return size
    rate = indexed / max(took_s, 0.001)
    return max(1, min(int(rate * STEP_TARGET_S), size * 4, MAX_STEP))
