"""What a session of an SQL store does the same way on every driver.

``SQLiteSession`` and ``PostgresSession`` differ in their SQL dialect and connection
objects only where the logic differs too; the reads and the activity stamp below are
one piece of logic written against a tiny driver-neutral surface: the manager's
``read()`` / ``transaction()`` connections (each with ``execute`` returning a cursor),
the driver's parameter marker ``PARAM`` and the dialect's ``SELECT_CHECKPOINTS``.
What differs stays with the driver as small hooks: how rows are fetched
(``_fetch_records``), how a session's row is locked for a write (``_lock_session``),
and, on the manager, how a checkpoint is inserted and how text is stored.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any, ClassVar, Protocol

from harness9.schema import ROLE_USER, Message, TodoItem
from harness9.store.codec import (
    CorruptValueError,
    checkpoint_from_values,
    decode_count_samples,
    encode_count_samples,
    encode_todos,
    message_from_values,
    metadata_from_value,
)
from harness9.store.rows import records_from_rows, shown_text
from harness9.store.scope import Scope, read_scope, see_below
from harness9.store.search import SearchHit
from harness9.store.session import (
    Checkpoint,
    CorruptRow,
    SessionNotFoundError,
    SessionSettings,
    StoredMessage,
    StoreError,
)
from harness9.store.titles import first_title

# A message row as readers take it (``records_from_rows``); append WHERE.
SELECT_RECORDS = (
    "SELECT id, role, content, tool_calls, tool_call_id, created_at, offload_id, offload_tokens, "
    "metadata FROM messages"
)


class SqlManager(Protocol):
    """The part of a store's manager its sessions use here."""

    def read(self) -> AbstractContextManager[Any]: ...

    def transaction(self) -> AbstractContextManager[Any]: ...

    def search(
        self, query: str, *, limit: int = 10, session_id: str | None = None
    ) -> list[SearchHit]: ...

    def _stored_text(self, text: str) -> str: ...

    def _store_checkpoint(self, conn: Any, session_id: str, cp: Checkpoint) -> int: ...


class SqlSessionBase:
    """The driver-neutral half of a stored session (``_m``: its manager, ``_id``: its id)."""

    PARAM: ClassVar[str]  # the driver's parameter marker: "?" or "%s"
    SELECT_CHECKPOINTS: ClassVar[str]  # a session's checkpoints; append ORDER BY
    # A session's todos (content, status) in order; a driver that refuses a whole query
    # over a text column that is not UTF-8 reads them as bytes (``shown_text`` decodes them).
    SELECT_TODOS: ClassVar[str] = (
        "SELECT content, status FROM todos WHERE session_id = {p} ORDER BY position"
    )
    _m: SqlManager
    _id: str

    def __init__(self, manager: SqlManager, session_id: str) -> None:
        self._m = manager
        self._id = session_id
        # Rows the last read had to skip; refreshed by every read of messages.
        self.corrupt_rows: list[CorruptRow] = []

    @property
    def session_id(self) -> str:
        return self._id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._id!r})"

    def get_records(self, limit: int = 0, after_id: int = 0) -> list[StoredMessage]:
        return self._read_records(limit, after_id)

    def get_record(self, message_id: int) -> StoredMessage | None:
        """The stored message with this id if it belongs to this session (a recall handle)."""
        if isinstance(message_id, bool) or not isinstance(message_id, int) or message_id < 1:
            return None
        recs = self._read_records(after_id=message_id - 1, upto_id=message_id)
        return recs[0] if recs else None

    def scope(self, conn: Any) -> Scope:
        """The messages rows this session holds, its own and a fork's inherited ones
        (harness9.store.scope), read in ``conn``."""
        return read_scope(conn, self.PARAM, self._id)

    def _read_records(
        self, limit: int = 0, after_id: int = 0, upto_id: int | None = None
    ) -> list[StoredMessage]:
        p = self.PARAM
        with self._m.read() as conn:
            mine, args = self.scope(conn).where(p)
            sql = f"{SELECT_RECORDS} WHERE {mine} AND id > {p}"
            args += (after_id,)
            if upto_id is not None:
                sql += f" AND id <= {p}"
                args += (upto_id,)
            if limit > 0:
                sql += f" ORDER BY id DESC LIMIT {p}"
                args += (limit,)
            else:
                sql += " ORDER BY id"
            rows = self._fetch_records(conn, sql, args)
        if limit > 0:
            rows.reverse()
        out, self.corrupt_rows = records_from_rows(rows)
        return out

    def _fetch_records(self, conn: Any, sql: str, args: tuple[object, ...]) -> list[Any]:
        """The rows of ``sql`` (a ``SELECT_RECORDS`` query) as a list."""
        return list(conn.execute(sql, args).fetchall())

    def get_messages(self, limit: int = 0) -> list[Message]:
        return [r.message for r in self.get_records(limit)]

    def get_todos(self) -> list[TodoItem] | None:
        with self._m.read() as conn:
            rows = conn.execute(self.SELECT_TODOS.format(p=self.PARAM), (self._id,)).fetchall()
        return [TodoItem(shown_text(c), shown_text(s)) for c, s in rows] or None

    def _checkpoints(self, order: str) -> Iterator[Checkpoint]:
        with self._m.read() as conn:
            rows = conn.execute(f"{self.SELECT_CHECKPOINTS} {order}", (self._id,)).fetchall()
        return (checkpoint_from_values(r) for r in rows)

    def latest_checkpoint(self) -> Checkpoint | None:
        return next(self._checkpoints("ORDER BY id DESC LIMIT 1"), None)

    def latest_checkpoint_key(self) -> tuple[Any, Any, Any] | None:
        """The latest checkpoint's (id, last_message_id, created_at), as ``latest_checkpoint``
        reads them, without its summary, recall index and instructions, which grow with the
        session: the live view asks it before every model call (issue 23)."""
        with self._m.read() as conn:
            row = conn.execute(
                "SELECT id, last_message_id, created_at FROM compactions "
                f"WHERE session_id = {self.PARAM} ORDER BY id DESC LIMIT 1",
                (self._id,),
            ).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def list_checkpoints(self) -> list[Checkpoint]:
        return list(self._checkpoints("ORDER BY id"))

    def search(self, query: str, *, limit: int = 10) -> list[SearchHit]:
        """This session's messages matching ``query`` (see the manager's ``search``)."""
        return self._m.search(query, limit=limit, session_id=self._id)

    def model_settings(self) -> SessionSettings | None:
        """How chat last ran this session; None if never recorded."""
        with self._m.read() as conn:
            row = conn.execute(
                "SELECT model, context_window, api_base, workdir, count_samples "
                f"FROM session_settings WHERE session_id = {self.PARAM}",
                (self._id,),
            ).fetchone()
        if row is None or not row[0]:
            return None
        return SessionSettings(
            str(row[0]),
            int(row[1] or 0),
            str(row[2] or ""),
            str(row[3] or ""),
            count_samples=decode_count_samples(row[4]),
        )

    # -- pins --------------------------------------------------------------------

    def pins(self) -> list[str]:
        with self._m.read() as conn:
            rows = conn.execute(
                f"SELECT text FROM session_pins WHERE session_id = {self.PARAM} ORDER BY id",
                (self._id,),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def add_pin(self, text: str) -> int:
        p = self.PARAM
        now = time.time()
        with self._m.transaction() as conn:
            self._touch(conn, now)
            conn.execute(
                f"INSERT INTO session_pins (session_id, text, created_at) VALUES ({p}, {p}, {p})",
                (self._id, self._m._stored_text(text), now),
            )
            row = conn.execute(
                f"SELECT count(*) FROM session_pins WHERE session_id = {p}", (self._id,)
            ).fetchone()
        return int(row[0])

    def remove_pin(self, number: int) -> str | None:
        p = self.PARAM
        if number < 1:
            return None
        with self._m.transaction() as conn:
            self._touch(conn, time.time())
            row = conn.execute(
                f"SELECT id, text FROM session_pins WHERE session_id = {p} "
                f"ORDER BY id LIMIT 1 OFFSET {p}",
                (self._id, number - 1),
            ).fetchone()
            if row is None:
                return None
            conn.execute(f"DELETE FROM session_pins WHERE id = {p}", (row[0],))
        return str(row[1])

    def _touch(
        self, conn: Any, now: float, count_delta: int = 0, *, title: str | None = None
    ) -> None:
        """Stamp activity (and adjust the message count) in ``conn``'s transaction.

        ``title`` names the session if it has no title yet (the first user message
        names it). Raises SessionNotFoundError for a deleted session, before anything
        else in the transaction is written.
        """
        p = self.PARAM
        named = (
            f", title = CASE WHEN title = '' THEN {p} ELSE title END" if title is not None else ""
        )
        args = (
            (now, count_delta, title, self._id)
            if title is not None
            else (now, count_delta, self._id)
        )
        cur = conn.execute(
            f"UPDATE sessions SET updated_at = {p}, message_count = message_count + {p}{named} "
            f"WHERE id = {p}",
            args,
        )
        if cur.rowcount == 0:
            raise SessionNotFoundError(self._id, "it was deleted")

    def _retitle(self, conn: Any) -> None:
        """Name the session after its first user message that makes a title."""
        p = self.PARAM
        title = ""
        mine, args = self.scope(conn).where(p)
        for (content,) in conn.execute(
            f"SELECT content FROM messages WHERE {mine} AND role = {p} ORDER BY id",
            (*args, ROLE_USER),
        ).fetchall():
            if not isinstance(content, str):
                continue  # a damaged row names nothing
            title = first_title([Message(ROLE_USER, content)])
            if title:
                break
        conn.execute(f"UPDATE sessions SET title = {p} WHERE id = {p}", (title, self._id))

    def _drop_newest(self, conn: Any, rid: int, role: str, now: float) -> None:
        """Take message ``rid`` (the newest) out of this session, and the checkpoints that
        covered it. A row of its own that no fork sees is deleted; otherwise the session
        stops seeing it (``_see_below``) and whoever shares it keeps it."""
        p = self.PARAM
        self._see_below(conn, rid)
        conn.execute(
            f"DELETE FROM compactions WHERE session_id = {p} AND last_message_id >= {p}",
            (self._id, rid),
        )
        self._touch(conn, now, -1)
        if role == ROLE_USER:
            self._retitle(conn)

    def _see_below(self, conn: Any, rid: int) -> None:
        """From now on this session holds only what it held below message ``rid``; forks
        that see ``rid`` keep it (harness9.store.scope.see_below)."""
        see_below(conn, self.PARAM, self._id, rid, self._hand_over)

    def _hand_over(self, conn: Any) -> str | None:
        """Hand this session's shared rows to the fork that sees most of them, as a delete
        does first (the store's ``hand_over_shared``); that fork's id (None: no fork)."""
        raise NotImplementedError

    def _lock_session(self, conn: Any) -> None:
        """Keep other writers of this session out until ``conn``'s transaction ends."""

    def pop_message(self) -> Message | None:
        p = self.PARAM
        with self._m.transaction() as conn:
            self._lock_session(conn)
            mine, args = self.scope(conn).where(p)
            row = conn.execute(
                "SELECT id, role, content, tool_calls, tool_call_id, metadata FROM messages "
                f"WHERE {mine} ORDER BY id DESC LIMIT 1",
                args,
            ).fetchone()
            if row is None:
                return None
            rid, role, content, calls_json, call_id, meta = row
            try:
                message = message_from_values(role, content, calls_json, call_id)
                message.metadata = metadata_from_value(meta)
            except CorruptValueError as exc:
                # Raising rolls back: a message we cannot return is not deleted.
                raise StoreError(f"cannot pop message row {rid}: it is corrupt ({exc})") from exc
            self._drop_newest(conn, rid, role, time.time())
        return message

    def clear(self) -> None:
        """Delete every message and checkpoint; the todo list stays (it is not history).

        Rows a fork shares stay with the fork (``_see_below`` the first id)."""
        p = self.PARAM
        with self._m.transaction() as conn:
            self._touch(conn, time.time())
            self._see_below(conn, 1)
            conn.execute(f"DELETE FROM inherited_messages WHERE session_id = {p}", (self._id,))
            conn.execute(f"DELETE FROM compactions WHERE session_id = {p}", (self._id,))
            conn.execute(
                f"UPDATE sessions SET message_count = 0, title = '' WHERE id = {p}", (self._id,)
            )

    def _check_checkpoint_owner(self, conn: Any, cp: Checkpoint) -> None:
        """Raise ValueError unless ``cp`` names a message of this session (or none, 0)."""
        mine, args = self.scope(conn).where(self.PARAM)
        held = conn.execute(
            f"SELECT 1 FROM messages WHERE id = {self.PARAM} AND {mine}",
            (cp.last_message_id, *args),
        ).fetchone()
        # 0: a compaction that folded nothing (it only stubbed old tool results).
        if cp.last_message_id != 0 and held is None:
            raise ValueError(
                f"checkpoint names message {cp.last_message_id}, not a message of this session"
            )

    def add_checkpoint(self, cp: Checkpoint) -> Checkpoint:
        """Store ``cp``; return a copy with its id (and created_at, if unset) filled in."""
        now = time.time()
        created = cp.created_at or now
        with self._m.transaction() as conn:
            # First: a deleted session is reported as such (and on PostgreSQL this
            # locks the session's row for the rest of the transaction).
            self._touch(conn, now)
            self._check_checkpoint_owner(conn, cp)
            # The store numbers checkpoints: whatever id ``cp`` carries is not used.
            new_id = self._m._store_checkpoint(
                conn, self._id, replace(cp, id=0, created_at=created)
            )
        return replace(cp, id=new_id, created_at=created)

    def save_todos(self, items: list[TodoItem]) -> None:
        p = self.PARAM
        rows = [
            (self._id, i, self._m._stored_text(t.content), t.status) for i, t in enumerate(items)
        ]
        now = time.time()
        with self._m.transaction() as conn:
            self._touch(conn, now)
            conn.execute(f"DELETE FROM todos WHERE session_id = {p}", (self._id,))
            # And when: a fork at an earlier message takes the list as it was then.
            conn.execute(
                f"INSERT INTO todo_lists (session_id, saved_at, items) VALUES ({p}, {p}, {p})",
                (self._id, now, self._m._stored_text(encode_todos(items))),
            )
            if rows:
                conn.cursor().executemany(
                    "INSERT INTO todos (session_id, position, content, status) "
                    f"VALUES ({p}, {p}, {p}, {p})",
                    rows,
                )


# One statement for both stores: the columns in order, and the upsert's update.
REMEMBER_SQL = (
    "INSERT INTO session_settings "
    "(session_id, model, context_window, api_base, workdir, count_samples)"
)
REMEMBER_CONFLICT_SQL = (
    " ON CONFLICT (session_id) DO UPDATE SET model = excluded.model, "
    "context_window = excluded.context_window, api_base = excluded.api_base, "
    "workdir = excluded.workdir, count_samples = excluded.count_samples"
)


def settings_values(settings: SessionSettings) -> tuple[str, int, str, str, str]:
    return (
        settings.model,
        settings.context_window,
        settings.api_base,
        settings.workdir,
        encode_count_samples(settings.count_samples),
    )
