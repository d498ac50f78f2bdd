"""The session store on PostgreSQL: the same protocol as the SQLite store, for teams and fleets.

Imported only when a ``postgresql://`` URL is given (psycopg 3 is the optional
extra ``harness9[postgres]``). One PostgresManager owns one connection in
autocommit mode; every write is one ``conn.transaction()`` that rolls back on
any exception.

Concurrency. Every write to a session first locks the session's row (an
``UPDATE`` of ``sessions``, or ``SELECT ... FOR UPDATE``), so writers to one
session run one at a time and message ids are handed out in commit order, as
with SQLite's one writer. ``pop`` reads the newest message under that lock, so
two concurrent pops return two different messages. Deletes by age re-check the
age in their own statement: PostgreSQL re-evaluates the condition on a row a
concurrent writer just updated, so a session written to meanwhile is kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg

from harness9.schema import Message
from harness9.store import pg_index
from harness9.store.codec import encode_facts, message_values, select_checkpoints
from harness9.store.lineage import family
from harness9.store.pg_blobs import PostgresBlobStore
from harness9.store.pg_migrations import SEARCH_MAX_CHARS, PgSchemaError, migrate
from harness9.store.pg_search import parse, snippet, to_tsquery_text
from harness9.store.scope import read_scope
from harness9.store.scrub import map_message, scrub_surrogates
from harness9.store.search import SearchHit, clean_snippet
from harness9.store.session import (
    Checkpoint,
    OffloadLink,
    SessionNotFoundError,
    SessionSettings,
    StoredMessage,
    StoreError,
    check_session_id,
    offload_links,
)
from harness9.store.sessions import aged_sql
from harness9.store.sql_manager import SqlManagerBase
from harness9.store.sql_session import (
    REMEMBER_CONFLICT_SQL,
    REMEMBER_SQL,
    SqlSessionBase,
    settings_values,
)
from harness9.store.titles import first_title

CONNECT_TIMEOUT_S = 10

_COPY_MESSAGES = (
    "COPY messages (id, session_id, role, content, tool_calls, tool_call_id, offload_id, "
    "offload_tokens, metadata, created_at) FROM STDIN"
)
_NEXT_IDS = (
    "SELECT nextval(pg_get_serial_sequence('harness9.messages', 'id')) FROM generate_series(1, %s)"
)
# A write of a few rows (pg_index.EAGER_ROWS) computes their search documents as it writes:
# one statement, the rows as columns of arrays.
_INSERT_INDEXED = (
    "INSERT INTO messages (id, session_id, role, content, tool_calls, tool_call_id, offload_id, "
    "offload_tokens, metadata, created_at, search) SELECT v.id, v.session_id, v.role, "
    "v.content, v.tool_calls, v.tool_call_id, v.offload_id, v.offload_tokens, v.metadata, "
    "v.created_at, search_document(v.content, v.tool_calls) FROM unnest(%s::bigint[], "
    "%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::bigint[], "
    "%s::text[], %s::float8[]) AS v (id, session_id, role, content, tool_calls, tool_call_id, "
    "offload_id, offload_tokens, metadata, created_at)"
)
# A role that may not write (or a standby server) cannot catch the index up; its searches
# read the rows not yet indexed through their text instead.
_MAY_NOT_WRITE = (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction)


def redact(url: str) -> str:
    """The URL without its password: what error messages and listings may show."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://…"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _compaction_row(session_id: str, cp: Checkpoint) -> tuple[object, ...]:
    """The ``compactions`` columns after ``id``, in table order, for one checkpoint."""
    return (
        session_id,
        cp.last_message_id,
        _clean_text(cp.summary),
        cp.strategy,
        cp.tokens_before,
        cp.tokens_after,
        cp.messages_before,
        cp.messages_after,
        cp.created_at,
        encode_facts(cp.facts),
    )


def _write_rows(conn: psycopg.Connection, rows: Sequence[tuple[object, ...]]) -> None:
    """Insert ``rows`` (the ``_COPY_MESSAGES`` columns, ids included) in ``conn``'s
    transaction: a few with their search documents, more by ``COPY`` without them (the
    next search computes those, harness9.store.pg_index)."""
    if len(rows) <= pg_index.EAGER_ROWS:
        conn.execute(_INSERT_INDEXED, [list(column) for column in zip(*rows, strict=True)])
        return
    with conn.cursor().copy(_COPY_MESSAGES) as copy:
        for row in rows:
            copy.write_row(row)


def _clean_text(text: str) -> str:
    # PostgreSQL text cannot hold NUL: it is stored as U+FFFD, as both stores do for a
    # lone surrogate (which is not valid UTF-8).
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _scrub_text(text: str) -> str:
    return scrub_surrogates(_clean_text(text))


def _clean_message(m: Message) -> Message:
    if "\x00" not in m.content and not any(
        "\x00" in c.arguments or "\x00" in c.name or "\x00" in c.id for c in m.tool_calls
    ):
        return m
    return map_message(m, _clean_text)


class PostgresManager(SqlManagerBase["PostgresSession"]):
    """Owner of one PostgreSQL connection; creates, opens, lists and deletes sessions.

    Safe to share between threads: every use of the connection holds one lock.
    """

    PARAM = "%s"
    # ``seq`` stands in for SQLite's rowid as the last tie-break.
    ORDER_SQL = " ORDER BY updated_at DESC, created_at DESC, seq DESC"
    # The prefix holds only hex digits and "-": nothing LIKE would read as a pattern.
    PREFIX_MATCH, PREFIX_WILDCARD = "LIKE", "%"

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: int = CONNECT_TIMEOUT_S,
        on_session_deleted: Callable[[str], None] | None = None,
    ) -> None:
        self.url = url
        # Called with each deleted session's id once the deletion is committed, as the
        # SQLite Manager does. Offloaded outputs here go with their rows (ON DELETE CASCADE).
        self.on_session_deleted = on_session_deleted
        self.location = redact(url)
        self.read_only = False  # the server decides what this role may write
        self._connect_timeout = connect_timeout
        self._lock = threading.RLock()
        self._conn: psycopg.Connection | None = None
        self._conn = self._connect()
        self._blobs = PostgresBlobStore(self)

    # -- plumbing ----------------------------------------------------------------

    def _connect(self) -> psycopg.Connection:
        try:
            conn = psycopg.connect(
                self.url,
                autocommit=True,
                connect_timeout=self._connect_timeout,
                application_name="harness9",
            )
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot connect to session database {self.location}: {_first_line(exc)}"
            ) from exc
        except Exception as exc:  # a malformed URL: psycopg raises ProgrammingError or ValueError
            raise StoreError(
                f"cannot use session database URL {self.location}: {_first_line(exc)}"
            ) from exc
        try:
            migrate(conn, time.time())
            conn.execute("SET search_path TO harness9")
        except PgSchemaError as exc:
            conn.close()
            raise StoreError(f"cannot open session database {self.location}: {exc}") from exc
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(
                f"cannot prepare session database {self.location}: {_first_line(exc)}"
            ) from exc
        return conn

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None:
            raise StoreError(f"session database {self.location} is closed")
        if self._conn.broken:  # the server restarted or the network dropped: one reconnect
            self._conn = self._connect()
        return self._conn

    @contextmanager
    def _errors_as(self, verb: str) -> Iterator[None]:
        """A driver error inside the block becomes one StoreError naming ``verb``."""
        try:
            yield
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot {verb} session database {self.location}: {_first_line(exc)}"
            ) from exc

    @contextmanager
    def read(self) -> Iterator[psycopg.Connection]:
        with self._lock, self._errors_as("read"):
            yield self.conn

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection]:
        """One write transaction; any exception rolls all of it back and propagates."""
        with self._lock:
            conn = self.conn
            with self._errors_as("write"), conn.transaction():
                yield conn

    @contextmanager
    def statement(self) -> Iterator[psycopg.Connection]:
        """One write that is a single statement: its own transaction, one round trip."""
        with self._lock, self._errors_as("write"):
            yield self.conn

    def blob_store(self) -> PostgresBlobStore:
        return self._blobs

    # -- sessions (the rest is SqlManagerBase's) -----------------------------------

    def _session(self, session_id: str) -> PostgresSession:
        return PostgresSession(self, session_id)

    def unindexed_count(self) -> int:
        """Messages written in bulk whose search documents the next search computes
        (harness9.store.pg_index); a search finds them before that all the same."""
        with self.read() as conn:
            return pg_index.backlog(conn)

    def search(
        self,
        query: str,
        *,
        limit: int = 20,
        session_id: str | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> list[SearchHit]:
        """Messages matching ``query`` (words ANDed, "phrases", prefix*), best ts_rank first.

        Same query language and errors as the SQLite store; ``rank`` is the negated
        ts_rank, so lower is better there too. First indexes what bulk writes left
        unindexed (``catch_up_index``, which calls ``on_progress``).
        """
        terms = parse(query)
        if session_id is not None:
            check_session_id(session_id)
        self.catch_up_index(on_progress)
        where = pg_index.MATCH_SQL
        args: list[object] = [to_tsquery_text(terms)]
        if session_id is not None:
            # A fork's inherited messages too (harness9.store.scope).
            with self.read() as conn:
                mine, scoped = read_scope(conn, "%s", session_id).where("%s", "m.")
            where += f" AND {mine}"
            args += scoped
        limit_sql = ""
        if limit > 0:
            limit_sql = " LIMIT %s"
            args.append(limit)
        sql = (
            "WITH q AS (SELECT to_tsquery('pg_catalog.simple', %s) AS q), "
            f"hits AS (SELECT m.id, {pg_index.RANK_SQL} AS rank FROM messages AS m, q "
            f"WHERE {where} ORDER BY rank DESC, m.id DESC{limit_sql}) "
            "SELECT m.session_id, m.id, m.role, m.created_at, s.title, "
            f"left(search_body(m.content, m.tool_calls), {SEARCH_MAX_CHARS}), hits.rank "
            "FROM hits JOIN messages AS m ON m.id = hits.id "
            "JOIN sessions AS s ON s.id = m.session_id ORDER BY hits.rank DESC, hits.id DESC"
        )
        with self.read() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [
            SearchHit(
                session_id or sid,  # one session's search: its hits, inherited ones too
                mid,
                role,
                created,
                clean_snippet(title),
                snippet(body or "", terms),
                -float(rank),
            )
            for sid, mid, role, created, title, body, rank in rows
        ]

    def catch_up_index(self, on_progress: Callable[[int, int], None] | None = None) -> int:
        """Compute the search documents bulk writes left out, for every message stored
        before this call; return how many were computed here.

        In steps of about pg_index.STEP_TARGET_S, each its own transaction. A role that may
        not write computes none (its searches read those rows through their text).
        ``on_progress(done, total)`` is called before the first step and after each one
        when there is anything to index.
        """
        with self.read() as conn:
            upto = pg_index.newest_unindexed(conn)
            if upto is None:
                return 0
            total = pg_index.backlog(conn, upto) if on_progress is not None else 0
        if on_progress is not None:
            on_progress(0, total)
        size, done, after = pg_index.FIRST_STEP, 0, 0
        while True:
            started = time.monotonic()
            with self._lock, self._errors_as("index"):
                try:
                    step = pg_index.step(self.conn, after, upto, size)
                except _MAY_NOT_WRITE:
                    return done
            done += step.indexed
            if on_progress is not None:
                on_progress(min(done, total), total)
            if step.finished:
                return done
            size = pg_index.next_size(size, step.indexed, time.monotonic() - started)
            after = step.last_id

    def _delete_aged(self, ids: list[str], cutoff: float) -> list[str]:
        """Delete those of ``ids`` still last updated before ``cutoff``, in one transaction.

        A session written to since it was listed is kept: the ``updated_at`` condition
        is re-evaluated on the row a concurrent writer committed, inside this transaction.
        """
        deleted: list[str] = []
        removed: list[str] = []  # with the sub-agents' sessions
        with self.transaction() as conn:
            for sid in ids:
                kids = family(conn, "%s", [sid])[1:]
                # Messages, todos, compactions and blobs go by ON DELETE CASCADE.
                if conn.execute(
                    f"DELETE FROM sessions WHERE id = %s AND {aged_sql('%s')}",
                    (sid, cutoff, cutoff),
                ).rowcount:
                    deleted.append(sid)
                    removed += [sid, *self._delete_all(conn, kids)]
        self._deleted(removed)
        return deleted

    def _delete_all(self, conn: psycopg.Connection, ids: list[str]) -> list[str]:
        if ids:
            conn.execute("DELETE FROM sessions WHERE id = ANY(%s)", (ids,))
        return ids

    def delete_sessions_older_than(
        self, cutoff_unix: float, *, keep: Iterable[str] = ()
    ) -> list[str]:
        """Delete every session last updated before ``cutoff_unix`` (except ``keep``).

        One statement: choosing and deleting cannot be torn apart by another writer.
        Returns the deleted ids, most recently updated first.
        """
        spared = list(set(self.with_parents(keep)))  # a kept sub-agent's keeps its family
        # A family (a session and its sub-agents' sessions) goes as one: only top-level
        # sessions are chosen, by the family's latest update; their children follow.
        family_old = (
            "NOT EXISTS (SELECT 1 FROM subagent_sessions AS l WHERE l.session_id = sessions.id) "
            "AND NOT EXISTS (SELECT 1 FROM subagent_sessions AS k JOIN sessions AS c "
            "ON c.id = k.session_id WHERE k.parent_id = sessions.id AND c.updated_at >= %s)"
        )
        with self.transaction() as conn:
            links = conn.execute("SELECT session_id, parent_id FROM subagent_sessions").fetchall()
            rows = conn.execute(
                f"WITH gone AS (DELETE FROM sessions WHERE {aged_sql('%s')} "
                f"AND NOT (id = ANY(%s)) AND {family_old} "
                "RETURNING id, updated_at, created_at, seq) "
                "SELECT id FROM gone" + self.ORDER_SQL,
                (cutoff_unix, cutoff_unix, spared, cutoff_unix),
            ).fetchall()
            ids = [r[0] for r in rows]
            removed = list(ids)
            level = set(ids)
            while level:  # their sub-agents' sessions, level by level
                level = {kid for kid, parent in links if parent in level}
                removed += self._delete_all(conn, sorted(level))
        self._deleted(removed)
        return ids

    # -- the driver's half of checkpoints and moving sessions ---------------------------

    def _stored_text(self, text: str) -> str:
        return _clean_text(text)

    def _insert_checkpoint(self, conn: psycopg.Connection, session_id: str, cp: Checkpoint) -> int:
        columns = (
            "session_id, last_message_id, summary, strategy, tokens_before, tokens_after, "
            "messages_before, messages_after, created_at, facts"
        )
        values = _compaction_row(session_id, cp)
        if cp.id:  # a restore that keeps its ids
            columns, values = "id, " + columns, (cp.id, *values)
        marks = ", ".join(["%s"] * len(values))
        row = conn.execute(
            f"INSERT INTO compactions ({columns}) VALUES ({marks}) RETURNING id", values
        ).fetchone()
        return int(row[0]) if row is not None else 0

    @contextmanager
    def _snapshot_read(self) -> Iterator[psycopg.Connection]:
        with self.transaction() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield conn

    def ids_reusable(self, conn: psycopg.Connection, table: str, ids: list[int]) -> bool:
        """Whether ``ids`` were all handed out by the table's sequence already and are free now.

        Such ids can never be handed out again, so writing them explicitly cannot collide
        with a concurrent writer; ids above the sequence would (it knows nothing of them).
        An export of this store re-imports exactly.
        """
        if not ids:
            return True
        row = conn.execute(f"SELECT last_value, is_called FROM {_SEQUENCES[table]}").fetchone()
        handed_out = int(row[0]) if row and row[1] else 0
        if max(ids) > handed_out or min(ids) <= 0:
            return False
        sql = f"SELECT 1 FROM {table} WHERE id = ANY(%s) LIMIT 1"
        return conn.execute(sql, (ids,)).fetchone() is None

    def restore_messages(
        self, conn: psycopg.Connection, session_id: str, records: list[StoredMessage], keep: bool
    ) -> dict[int, int]:
        if not records:
            return {}
        if keep:
            ids = [r.id for r in records]
        else:
            ids = sorted(r[0] for r in conn.execute(_NEXT_IDS, (len(records),)))
        rows = [
            (rid, session_id, *message_values(_clean_message(r.message), r.offload), r.created_at)
            for rid, r in zip(ids, records, strict=True)
        ]
        _write_rows(conn, rows)
        return {r.id: rid for r, rid in zip(records, ids, strict=True)}

    def _copy_blobs(self, conn: psycopg.Connection, origin: str, fork: str) -> None:
        conn.execute(
            "INSERT INTO blobs (session_id, blob_id, chunk, data, written_at) "
            "SELECT %s, blob_id, chunk, data, written_at FROM blobs WHERE session_id = %s",
            (fork, origin),
        )

    def discard_unfinished_imports(self) -> list[str]:
        """Nothing to discard: an import is one transaction, which a failure rolls back."""
        return []


_SEQUENCES = {"messages": "messages_id_seq", "compactions": "compactions_id_seq"}


# A session's checkpoints with their data, as the SQLite store reads them.
_SELECT_CHECKPOINTS = select_checkpoints("%s")


_ADD_ONE = (
    "WITH s AS (UPDATE sessions SET updated_at = %s, message_count = message_count + 1, "
    "title = CASE WHEN title = '' THEN %s ELSE title END WHERE id = %s RETURNING id) "
    "INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, offload_id, "
    "offload_tokens, metadata, created_at, search) SELECT s.id, v.role, v.content, "
    "v.tool_calls, v.tool_call_id, v.offload_id, v.offload_tokens, v.metadata, v.created_at, "
    "search_document(v.content, v.tool_calls) FROM s, (VALUES (%s::text, %s::text, %s::text, "
    "%s::text, %s::text, %s::bigint, %s::text, %s::float8)) AS v (role, content, tool_calls, "
    "tool_call_id, offload_id, offload_tokens, metadata, created_at) RETURNING id"
)


class PostgresSession(SqlSessionBase):
    """One session's history in the PostgreSQL store (see the Session protocol)."""

    PARAM = "%s"
    SELECT_CHECKPOINTS = _SELECT_CHECKPOINTS
    _m: PostgresManager

    # -- reads -------------------------------------------------------------------

    def remember_model(self, settings: SessionSettings) -> None:
        """Record how the session runs (does not count as activity)."""
        with self._m.transaction() as conn:
            conn.execute(
                REMEMBER_SQL + " SELECT %s, %s, %s, %s, %s, %s "
                "WHERE EXISTS (SELECT 1 FROM sessions WHERE id = %s)" + REMEMBER_CONFLICT_SQL,
                (self._id, *settings_values(settings), self._id),
            )

    # -- writes (each one transaction) ------------------------------------------------

    def add_messages(
        self, msgs: list[Message], offloads: Sequence[OffloadLink | None] = ()
    ) -> list[int]:
        """Append ``msgs`` in one transaction; return their new ids, in order."""
        if not msgs:
            return []
        links = offload_links(msgs, offloads)
        clean = [_clean_message(m) for m in msgs]
        try:
            return self._add(clean, links)
        except UnicodeEncodeError:
            return self._add([map_message(m, _scrub_text) for m in clean], links)

    def _add(self, msgs: list[Message], links: list[OffloadLink | None]) -> list[int]:
        now = time.time()
        sid = self._id
        rows = [(sid, *message_values(m, o), now) for m, o in zip(msgs, links, strict=True)]
        if len(rows) == 1:
            # One statement, one round trip (a chat writes messages one at a time), with
            # its search document. The UPDATE runs first, since the INSERT reads its
            # output: it locks the session's row before nextval, so ids are handed out in
            # commit order, and a deleted session inserts nothing.
            with self._m.statement() as conn:
                row = conn.execute(_ADD_ONE, (now, first_title(msgs), sid, *rows[0][1:])).fetchone()
            if row is None:
                raise SessionNotFoundError(sid, "it was deleted")
            return [int(row[0])]
        with self._m.transaction() as conn:
            # First: it locks the session's row, so ids are handed out in commit order,
            # and a deleted session fails before anything is inserted.
            self._touch(conn, now, len(rows), title=first_title(msgs))
            ids = sorted(r[0] for r in conn.execute(_NEXT_IDS, (len(rows),)))
            _write_rows(conn, [(rid, *row) for rid, row in zip(ids, rows, strict=True)])
        return ids

    def _hand_over(self, conn: psycopg.Connection) -> str | None:
        row = conn.execute("SELECT hand_over_shared(%s)", (self._id,)).fetchone()
        return str(row[0]) if row is not None and row[0] is not None else None

    def _lock_session(self, conn: psycopg.Connection) -> None:
        # The row lock makes concurrent pops (and appends) of this session queue: each
        # pop then reads the newest message as the previous writer left it.
        conn.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (self._id,))
