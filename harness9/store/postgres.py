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
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import psycopg

from harness9.schema import Message
from harness9.store.codec import (
    CHECKPOINT_FIELDS,
    CorruptValueError,
    calls_from_text,
    calls_to_text,
    checkpoint_details,
)
from harness9.store.pg_blobs import PostgresBlobStore
from harness9.store.pg_migrations import SEARCH_MAX_CHARS, PgSchemaError, migrate
from harness9.store.pg_search import parse, snippet, to_tsquery_text
from harness9.store.rows import (
    USAGE_COLUMNS,
    records_from_rows,
    usage_insert_sql,
    usage_row,
    usage_upsert_sql,
    usage_values,
)
from harness9.store.scrub import map_message, scrub_surrogates
from harness9.store.search import SearchHit, clean_snippet
from harness9.store.session import (
    Checkpoint,
    SessionInfo,
    SessionNotFoundError,
    StoredMessage,
    StoreError,
    UsageTotals,
)
from harness9.store.sql_session import SqlSessionBase
from harness9.store.sqlite import is_session_id, resolve_prefix
from harness9.store.titles import first_title

if TYPE_CHECKING:
    from harness9.store.export import SessionSnapshot

CONNECT_TIMEOUT_S = 10

_INFO_SQL = "SELECT id, created_at, updated_at, message_count, title FROM sessions"
_ORDER_SQL = " ORDER BY updated_at DESC, created_at DESC, seq DESC"
_COPY_MESSAGES = (
    "COPY messages (id, session_id, role, content, tool_calls, tool_call_id, created_at) FROM STDIN"
)
_NEXT_IDS = (
    "SELECT nextval(pg_get_serial_sequence('harness9.messages', 'id')) FROM generate_series(1, %s)"
)


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


def _compaction_row(
    session_id: str, cp: Checkpoint, last_message_id: int, created_at: float
) -> tuple[object, ...]:
    """The ``compactions`` columns after ``id``, in table order, for one checkpoint."""
    return (
        session_id,
        last_message_id,
        _clean_text(cp.summary),
        cp.strategy,
        cp.tokens_before,
        cp.tokens_after,
        cp.messages_before,
        cp.messages_after,
        created_at,
    )


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


class PostgresManager:
    """Owner of one PostgreSQL connection; creates, opens, lists and deletes sessions.

    Safe to share between threads: every use of the connection holds one lock.
    """

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

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> PostgresManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def blob_store(self) -> PostgresBlobStore:
        return self._blobs

    # -- sessions ----------------------------------------------------------------

    def new_session(self) -> PostgresSession:
        sid = str(uuid.uuid4())
        now = time.time()
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO sessions (id, created_at, updated_at) VALUES (%s, %s, %s)",
                (sid, now, now),
            )
        return PostgresSession(self, sid)

    def open_session(self, session_id: str) -> PostgresSession:
        if not is_session_id(session_id):
            raise SessionNotFoundError(str(session_id), "not a session id")
        with self.read() as conn:
            if (
                conn.execute("SELECT 1 FROM sessions WHERE id = %s", (session_id,)).fetchone()
                is None
            ):
                raise SessionNotFoundError(session_id)
        return PostgresSession(self, session_id)

    def resolve_id(self, prefix: str) -> str:
        """The full id of the one session whose id starts with ``prefix`` (any case)."""
        return resolve_prefix(prefix, self._ids_starting)

    def _ids_starting(self, text: str) -> list[str]:
        with self.read() as conn:
            # The prefix holds only hex digits and "-": nothing LIKE would read as a pattern.
            rows = conn.execute(
                "SELECT id FROM sessions WHERE id LIKE %s ORDER BY id LIMIT 4", (text + "%",)
            ).fetchall()
        return [r[0] for r in rows]

    def list_sessions(self, limit: int = 0) -> list[SessionInfo]:
        """Most recently updated first; ties go to the most recently created."""
        sql, args = _INFO_SQL + _ORDER_SQL, tuple[int, ...]()
        if limit > 0:
            sql, args = sql + " LIMIT %s", (limit,)
        with self.read() as conn:
            return [SessionInfo(*row) for row in conn.execute(sql, args)]

    def sessions_older_than(self, cutoff_unix: float) -> list[SessionInfo]:
        with self.read() as conn:
            rows = conn.execute(_INFO_SQL + " WHERE updated_at < %s" + _ORDER_SQL, (cutoff_unix,))
            return [SessionInfo(*row) for row in rows]

    def session_info(self, session_id: str) -> SessionInfo:
        if not is_session_id(session_id):
            raise SessionNotFoundError(str(session_id), "not a session id")
        with self.read() as conn:
            row = conn.execute(_INFO_SQL + " WHERE id = %s", (session_id,)).fetchone()
        if row is None:
            raise SessionNotFoundError(session_id)
        return SessionInfo(*row)

    def add_usage(
        self,
        session_id: str,
        *,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
        cost_usd: float | None = None,
        summary: bool = False,
    ) -> None:
        """Add one model call's usage to the session's totals (``cost_usd`` None: unpriced;
        ``summary``: a compaction summary's call, also counted apart)."""
        values = usage_values(
            session_id,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_tokens=cached_tokens,
            cost_usd=cost_usd,
            summary=summary,
        )
        with self.statement() as conn:
            conn.execute(usage_upsert_sql("%s", "session_usage AS u", "u."), values)

    def usage_totals(self, session_id: str) -> UsageTotals:
        """The session's summed usage; all zero for a session that made no model call."""
        with self.read() as conn:
            row = conn.execute(
                f"SELECT {', '.join(USAGE_COLUMNS)} FROM session_usage WHERE session_id = %s",
                (session_id,),
            ).fetchone()
        return UsageTotals(*row) if row is not None else UsageTotals()

    def usage_by_session(self) -> dict[str, UsageTotals]:
        """Every session's summed usage that has any (for listings)."""
        with self.read() as conn:
            rows = conn.execute(
                f"SELECT session_id, {', '.join(USAGE_COLUMNS)} FROM session_usage"
            ).fetchall()
        return {row[0]: UsageTotals(*row[1:]) for row in rows}

    def unindexed_count(self) -> int:
        """Always 0: every message's search vector is computed as it is written."""
        return 0

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
        ts_rank, so lower is better there too. ``on_progress`` is never called: nothing is
        indexed late here.
        """
        terms = parse(query)
        if session_id is not None and not is_session_id(session_id):
            raise SessionNotFoundError(str(session_id), "not a session id")
        where = "m.search @@ q.q"
        args: list[object] = [to_tsquery_text(terms)]
        if session_id is not None:
            where += " AND m.session_id = %s"
            args.append(session_id)
        limit_sql = ""
        if limit > 0:
            limit_sql = " LIMIT %s"
            args.append(limit)
        sql = (
            "WITH q AS (SELECT to_tsquery('pg_catalog.simple', %s) AS q), "
            "hits AS (SELECT m.id, ts_rank(m.search, q.q) AS rank FROM messages AS m, q "
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
                sid,
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
        """Nothing to catch up: a message is indexed in the transaction that stores it."""
        return 0

    def delete_session(self, session_id: str) -> None:
        self.delete_sessions([session_id])

    def delete_if_empty(self, session_id: str) -> bool:
        if not is_session_id(session_id):
            raise SessionNotFoundError(str(session_id), "not a session id")
        with self.transaction() as conn:
            gone = conn.execute(
                "DELETE FROM sessions WHERE id = %s AND NOT EXISTS "
                "(SELECT 1 FROM messages WHERE session_id = %s)",
                (session_id, session_id),
            ).rowcount
        if gone:
            self._deleted([session_id])
        return bool(gone)

    def _deleted(self, session_ids: Iterable[str]) -> None:
        if self.on_session_deleted is not None:
            for sid in session_ids:
                self.on_session_deleted(sid)

    def delete_sessions(
        self, session_ids: Iterable[str], *, updated_before: float | None = None
    ) -> list[str]:
        """Delete all of them in one transaction, or none if any is missing; return the ids.

        With ``updated_before`` a session written to since it was listed is skipped:
        the ``updated_at`` condition is re-evaluated on the row a concurrent writer
        committed, inside this transaction.
        """
        ids = list(dict.fromkeys(session_ids))
        for sid in ids:
            if not is_session_id(sid):
                raise SessionNotFoundError(str(sid), "not a session id")
        deleted: list[str] = []
        with self.transaction() as conn:
            for sid in ids:
                # Messages, todos, compactions and blobs go by ON DELETE CASCADE.
                if updated_before is None:
                    if conn.execute("DELETE FROM sessions WHERE id = %s", (sid,)).rowcount == 0:
                        raise SessionNotFoundError(sid)
                elif not conn.execute(
                    "DELETE FROM sessions WHERE id = %s AND updated_at < %s", (sid, updated_before)
                ).rowcount:
                    continue
                deleted.append(sid)
        self._deleted(deleted)
        return deleted

    def delete_sessions_older_than(
        self, cutoff_unix: float, *, keep: Iterable[str] = ()
    ) -> list[str]:
        """Delete every session last updated before ``cutoff_unix`` (except ``keep``).

        One statement: choosing and deleting cannot be torn apart by another writer.
        Returns the deleted ids, most recently updated first.
        """
        spared = list(set(keep))
        with self.transaction() as conn:
            rows = conn.execute(
                "WITH gone AS (DELETE FROM sessions WHERE updated_at < %s "
                "AND NOT (id = ANY(%s)) RETURNING id, updated_at, created_at, seq) "
                "SELECT id FROM gone" + _ORDER_SQL,
                (cutoff_unix, spared),
            ).fetchall()
        ids = [r[0] for r in rows]
        self._deleted(ids)
        return ids

    # -- moving sessions -----------------------------------------------------------------

    def snapshot(self, session_id: str) -> SessionSnapshot:
        """Everything stored about one session, read in one repeatable-read transaction."""
        from harness9.store.export import SessionSnapshot

        session = self.open_session(session_id)
        with self.transaction() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            info = self.session_info(session_id)
            records = session.get_records()
            todos = session.get_todos() or []
            checkpoints = session.list_checkpoints()
            usage = self.usage_totals(session_id)
        return SessionSnapshot(
            info, records, todos, checkpoints, list(session.corrupt_rows), usage=usage
        )

    def restore(self, snap: SessionSnapshot, *, new_id: bool = False) -> str:
        """Store ``snap`` in one transaction; return the session id it was stored under.

        Message and checkpoint ids are kept when all are free and were handed out by
        this database's sequences before (an export of this store: the re-import is
        exact); otherwise, and always with ``new_id``, fresh ids are assigned and each
        checkpoint moves to its message's new id.
        """
        from harness9.store.export import ImportFormatError, SessionExistsError

        sid = str(uuid.uuid4()) if new_id else snap.info.id
        records = [
            StoredMessage(r.id, _clean_message(r.message), r.created_at) for r in snap.records
        ]
        try:
            with self.transaction() as conn:
                if conn.execute("SELECT 1 FROM sessions WHERE id = %s", (sid,)).fetchone():
                    raise SessionExistsError(sid)
                keep = (
                    not new_id
                    and _ids_reusable(conn, "messages", [r.id for r in records])
                    and _ids_reusable(conn, "compactions", [c.id for c in snap.checkpoints])
                )
                info = snap.info
                conn.execute(
                    "INSERT INTO sessions (id, created_at, updated_at, title, message_count) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    (sid, info.created_at, info.updated_at, _clean_text(info.title), len(records)),
                )
                new_ids: dict[int, int] = {}
                if records:
                    if keep:
                        ids = [r.id for r in records]
                    else:
                        ids = sorted(r[0] for r in conn.execute(_NEXT_IDS, (len(records),)))
                    with conn.cursor().copy(_COPY_MESSAGES) as copy:
                        for rid, r in zip(ids, records, strict=True):
                            m = r.message
                            copy.write_row(
                                (
                                    rid,
                                    sid,
                                    m.role,
                                    m.content,
                                    calls_to_text(m.tool_calls),
                                    m.tool_call_id or None,
                                    r.created_at,
                                )
                            )
                            new_ids[r.id] = rid
                if snap.todos:
                    conn.cursor().executemany(
                        "INSERT INTO todos (session_id, position, content, status) "
                        "VALUES (%s, %s, %s, %s)",
                        [
                            (sid, i, _clean_text(t.content), t.status)
                            for i, t in enumerate(snap.todos)
                        ],
                    )
                for cp in snap.checkpoints:
                    values = _compaction_row(
                        sid, cp, new_ids.get(cp.last_message_id, 0), cp.created_at
                    )
                    if keep:
                        row = conn.execute(
                            "INSERT INTO compactions (id, session_id, last_message_id, summary, "
                            "strategy, tokens_before, tokens_after, messages_before, "
                            "messages_after, created_at) "
                            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                            (cp.id, *values),
                        ).fetchone()
                    else:
                        row = conn.execute(
                            "INSERT INTO compactions (session_id, last_message_id, summary, "
                            "strategy, tokens_before, tokens_after, messages_before, "
                            "messages_after, created_at) "
                            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                            values,
                        ).fetchone()
                    # Stubs follow their messages to new ids.
                    stubs = {new_ids[k]: v for k, v in cp.rewrites.items() if k in new_ids}
                    details = checkpoint_details(replace(cp, rewrites=stubs))
                    if details is not None and row is not None:
                        conn.execute(
                            "INSERT INTO compaction_details (compaction_id, recall_index, "
                            "rewrites, state_note) VALUES (%s, %s, %s, %s)",
                            (row[0], *(_clean_text(x) for x in details)),
                        )
                _restore_usage(conn, sid, snap.usage)
        except UnicodeEncodeError:
            raise ImportFormatError("the file holds text that is not valid Unicode") from None
        return sid

    def discard_unfinished_imports(self) -> list[str]:
        """Nothing to discard: an import is one transaction, which a failure rolls back."""
        return []


def _restore_usage(conn: psycopg.Connection, sid: str, u: UsageTotals) -> None:
    """An imported session's usage totals, when it has any."""
    if u != UsageTotals():
        conn.execute(usage_insert_sql("%s"), usage_row(sid, u))


_SEQUENCES = {"messages": "messages_id_seq", "compactions": "compactions_id_seq"}


def _ids_reusable(conn: psycopg.Connection, table: str, ids: list[int]) -> bool:
    """Whether ``ids`` were all handed out by the table's sequence already and are free now.

    Such ids can never be handed out again, so writing them explicitly cannot collide
    with a concurrent writer; ids above the sequence would (it knows nothing of them).
    """
    if not ids:
        return True
    row = conn.execute(f"SELECT last_value, is_called FROM {_SEQUENCES[table]}").fetchone()
    handed_out = int(row[0]) if row and row[1] else 0
    if max(ids) > handed_out or min(ids) <= 0:
        return False
    taken = conn.execute(f"SELECT 1 FROM {table} WHERE id = ANY(%s) LIMIT 1", (ids,)).fetchone()
    return taken is None


# A session's checkpoints with their details, as the SQLite store reads them.
_SELECT_CHECKPOINTS = (
    f"SELECT {', '.join('c.' + f for f in CHECKPOINT_FIELDS)}, "
    "d.recall_index, d.rewrites, d.state_note FROM compactions AS c "
    "LEFT JOIN compaction_details AS d ON d.compaction_id = c.id WHERE c.session_id = %s"
)


class PostgresSession(SqlSessionBase):
    """One session's history in the PostgreSQL store (see the Session protocol)."""

    PARAM = "%s"
    SELECT_CHECKPOINTS = _SELECT_CHECKPOINTS
    _m: PostgresManager

    # -- reads -------------------------------------------------------------------

    def get_records(self, limit: int = 0, after_id: int = 0) -> list[StoredMessage]:
        sql = (
            "SELECT id, role, content, tool_calls, tool_call_id, created_at FROM messages "
            "WHERE session_id = %s AND id > %s"
        )
        args: tuple[object, ...] = (self._id, after_id)
        if limit > 0:
            sql += " ORDER BY id DESC LIMIT %s"
            args += (limit,)
        else:
            sql += " ORDER BY id"
        with self._m.read() as conn:
            rows = conn.execute(sql, args).fetchall()
        if limit > 0:
            rows.reverse()
        out, self.corrupt_rows = records_from_rows(rows)
        return out

    def get_record(self, message_id: int) -> StoredMessage | None:
        """The stored message with this id if it belongs to this session (a recall handle)."""
        if isinstance(message_id, bool) or not isinstance(message_id, int) or message_id < 1:
            return None
        recs = [r for r in self.get_records(after_id=message_id - 1, limit=0) if r.id == message_id]
        return recs[0] if recs else None

    def remember_model(self, model: str, context_window: int) -> None:
        """Record the model and window in use (does not count as activity)."""
        with self._m.transaction() as conn:
            conn.execute(
                "INSERT INTO session_settings (session_id, model, context_window) "
                "SELECT %s, %s, %s WHERE EXISTS (SELECT 1 FROM sessions WHERE id = %s) "
                "ON CONFLICT (session_id) DO UPDATE SET model = excluded.model, "
                "context_window = excluded.context_window",
                (self._id, model, context_window, self._id),
            )

    # -- writes (each one transaction) ------------------------------------------------

    def add_messages(self, msgs: list[Message]) -> list[int]:
        """Append ``msgs`` in one transaction; return their new ids, in order."""
        if not msgs:
            return []
        clean = [_clean_message(m) for m in msgs]
        try:
            return self._add(clean)
        except UnicodeEncodeError:
            return self._add([map_message(m, _scrub_text) for m in clean])

    def _add(self, msgs: list[Message]) -> list[int]:
        now = time.time()
        sid = self._id
        rows = [
            (sid, m.role, m.content, calls_to_text(m.tool_calls), m.tool_call_id or None, now)
            for m in msgs
        ]
        if len(rows) == 1:
            # One statement, one round trip (a chat writes messages one at a time). The
            # UPDATE runs first, since the INSERT reads its output: it locks the session's
            # row before nextval, so ids are handed out in commit order, and a deleted
            # session inserts nothing.
            with self._m.statement() as conn:
                row = conn.execute(
                    "WITH s AS (UPDATE sessions SET updated_at = %s, "
                    "message_count = message_count + 1, "
                    "title = CASE WHEN title = '' THEN %s ELSE title END WHERE id = %s "
                    "RETURNING id) INSERT INTO messages (session_id, role, content, tool_calls, "
                    "tool_call_id, created_at) SELECT s.id, %s, %s, %s, %s, %s FROM s RETURNING id",
                    (now, first_title(msgs), sid, *rows[0][1:]),
                ).fetchone()
            if row is None:
                raise SessionNotFoundError(sid, "it was deleted")
            return [int(row[0])]
        with self._m.transaction() as conn:
            # First: it locks the session's row, so ids are handed out in commit order,
            # and a deleted session fails before anything is inserted.
            cur = conn.execute(
                "UPDATE sessions SET updated_at = %s, message_count = message_count + %s, "
                "title = CASE WHEN title = '' THEN %s ELSE title END WHERE id = %s",
                (now, len(rows), first_title(msgs), sid),
            )
            if cur.rowcount == 0:
                raise SessionNotFoundError(sid, "it was deleted")
            ids = sorted(r[0] for r in conn.execute(_NEXT_IDS, (len(rows),)))
            with conn.cursor().copy(_COPY_MESSAGES) as copy:
                for rid, row in zip(ids, rows, strict=True):
                    copy.write_row((rid, *row))
        return ids

    def pop_message(self) -> Message | None:
        with self._m.transaction() as conn:
            # The row lock makes concurrent pops (and appends) of this session queue:
            # each pop then reads the newest message as the previous writer left it.
            if (
                conn.execute(
                    "SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (self._id,)
                ).fetchone()
                is None
            ):
                return None
            row = conn.execute(
                "SELECT id, role, content, tool_calls, tool_call_id FROM messages "
                "WHERE session_id = %s ORDER BY id DESC LIMIT 1",
                (self._id,),
            ).fetchone()
            if row is None:
                return None
            rid, role, content, calls_json, call_id = row
            try:
                calls = calls_from_text(calls_json)
            except CorruptValueError as exc:
                # Raising rolls back: a message we cannot return is not deleted.
                raise StoreError(
                    f"cannot pop message row {rid}: its tool_calls are corrupt ({exc})"
                ) from exc
            self._drop_newest(conn, rid, role, time.time())
        return Message(role, content, calls, call_id or "")

    def _stored_text(self, text: str) -> str:
        return _clean_text(text)

    def add_checkpoint(self, cp: Checkpoint) -> Checkpoint:
        """Store ``cp``; return a copy with its id (and created_at, if unset) filled in."""
        now = time.time()
        created = cp.created_at or now
        with self._m.transaction() as conn:
            self._touch(conn, now)
            self._check_checkpoint_owner(conn, cp)
            (new_id,) = conn.execute(
                "INSERT INTO compactions (session_id, last_message_id, summary, strategy, "
                "tokens_before, tokens_after, messages_before, messages_after, created_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                _compaction_row(self._id, cp, cp.last_message_id, created),
            ).fetchone() or (0,)
            details = checkpoint_details(cp)
            if details is not None:
                index, rewrites, state = details
                conn.execute(
                    "INSERT INTO compaction_details (compaction_id, recall_index, rewrites, "
                    "state_note) VALUES (%s, %s, %s, %s)",
                    (new_id, _clean_text(index), _clean_text(rewrites), _clean_text(state)),
                )
        return replace(cp, id=int(new_id), created_at=created)
