"""What the manager of an SQL store does the same way on every driver.

``Manager`` (SQLite) and ``PostgresManager`` differ in how they connect, lock, search
and delete by age; creating, opening, listing, resolving id prefixes, usage totals,
plain deletes, snapshots and restores are one piece of logic, written here once
against the manager's ``read()`` / ``transaction()`` / ``statement()`` connections, a
few dialect attributes (the parameter marker, the listing's last tie-break, the
prefix match) and small hooks for what really differs (the ``_`` methods below that
raise NotImplementedError).
``harness9.store.sql_session`` is the same for a session.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self, TypeVar

from harness9.errors import HarnessError
from harness9.store.codec import CHECKPOINT_DETAIL_FIELDS, checkpoint_details
from harness9.store.rows import (
    USAGE_COLUMNS,
    usage_insert_sql,
    usage_row,
    usage_upsert_sql,
    usage_values,
)
from harness9.store.session import (
    Checkpoint,
    SessionInfo,
    SessionNotFoundError,
    StoredMessage,
    UsageTotals,
    check_session_id,
)
from harness9.store.sql_session import SqlSessionBase

if TYPE_CHECKING:
    from harness9.store.export import SessionSnapshot
    from harness9.store.search import SearchHit

_PREFIX_RE = re.compile(r"[0-9a-f-]{1,36}")

# The workdir comes from the session's settings (a subquery: no join to disambiguate).
INFO_SQL = (
    "SELECT id, created_at, updated_at, message_count, title, "
    "coalesce((SELECT workdir FROM session_settings WHERE session_id = id), '') FROM sessions"
)


def aged_sql(param: str) -> str:
    """The condition "idle since the cutoff" on a sessions row, with the cutoff as two
    parameters: not updated since, and not imported since (an import counts as an update
    for retention, while ``updated_at`` keeps the time of the session's last message)."""
    return f"updated_at < {param} AND (imported_at IS NULL OR imported_at < {param})"


class AmbiguousSessionError(HarnessError):
    """A session id prefix matches more than one stored session."""

    def __init__(self, prefix: str, matches: Sequence[str]) -> None:
        self.prefix = prefix
        self.matches = list(matches)
        shown = ", ".join(m[:13] + "…" for m in self.matches[:3])
        more = ", ..." if len(self.matches) > 3 else ""
        super().__init__(f"session id prefix {prefix!r} is ambiguous (matches {shown}{more})")


def session_info(row: Sequence[Any]) -> SessionInfo:
    """A sessions row (``INFO_SQL``) for display: a damaged title or count never breaks a listing.

    Times are passed on as stored (renderers show an impossible one as unknown), so
    what is shown never differs from what an export writes.
    """
    sid, created, updated, count, title, workdir = row
    if isinstance(title, bytes):
        title = title.decode("utf-8", "replace")
    elif not isinstance(title, str):
        title = "" if title is None else str(title)
    if isinstance(count, bool) or not isinstance(count, int):
        count = 0
    return SessionInfo(sid, created, updated, count, title, str(workdir or ""))


S = TypeVar("S", bound=SqlSessionBase)


class SqlManagerBase(Generic[S]):
    """The driver-neutral half of an SQL store's manager; ``S`` is its session class."""

    PARAM: ClassVar[str]  # the driver's parameter marker: "?" or "%s"
    ORDER_SQL: ClassVar[str]  # listing order, newest first; ends in the creation order
    PREFIX_MATCH: ClassVar[str]  # how an id is matched against a prefix pattern
    PREFIX_WILDCARD: ClassVar[str]  # what the pattern ends in: "any text after"
    on_session_deleted: Callable[[str], None] | None
    _lock: threading.RLock  # held by every use of the connection
    _conn: Any  # the one connection; None once closed

    # -- the driver's half ---------------------------------------------------------

    def read(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def transaction(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def statement(self) -> AbstractContextManager[Any]:
        """One write that is a single statement (by default, a transaction of its own)."""
        return self.transaction()

    def _session(self, session_id: str) -> S:
        """The session object for a stored ``session_id``."""
        raise NotImplementedError

    def _delete_aged(self, ids: list[str], cutoff: float) -> list[str]:
        """Delete those of ``ids`` still last updated before ``cutoff``; return them."""
        raise NotImplementedError

    def _stored_text(self, text: str) -> str:
        """``text`` as this driver stores it (PostgreSQL cannot hold NUL)."""
        return text

    def _insert_checkpoint(self, conn: Any, session_id: str, cp: Checkpoint) -> int:
        """Insert ``cp``'s ``compactions`` row (id 0: the store numbers it); its id."""
        raise NotImplementedError

    def _snapshot_read(self) -> AbstractContextManager[Any]:
        """One read transaction that sees a single state of the database throughout."""
        raise NotImplementedError

    def ids_reusable(self, conn: Any, table: str, ids: list[int]) -> bool:
        """Whether a restore may write ``ids`` into ``table`` as they are."""
        raise NotImplementedError

    def restore_messages(
        self, conn: Any, session_id: str, records: list[StoredMessage], keep: bool
    ) -> dict[int, int]:
        """Insert ``records`` (with their ids if ``keep``); map each old id to its new one."""
        raise NotImplementedError

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions ------------------------------------------------------------------

    def new_session(self) -> S:
        import uuid  # not at import time: listing sessions never needs it

        sid = str(uuid.uuid4())
        now = time.time()
        p = self.PARAM
        with self.transaction() as conn:
            conn.execute(
                f"INSERT INTO sessions (id, created_at, updated_at) VALUES ({p}, {p}, {p})",
                (sid, now, now),
            )
        return self._session(sid)

    def _exists(self, conn: Any, session_id: str) -> bool:
        return (
            conn.execute(
                f"SELECT 1 FROM sessions WHERE id = {self.PARAM}", (session_id,)
            ).fetchone()
            is not None
        )

    def open_session(self, session_id: str) -> S:
        check_session_id(session_id)
        with self.read() as conn:
            if not self._exists(conn, session_id):
                raise SessionNotFoundError(session_id)
        return self._session(session_id)

    def resolve_id(self, prefix: str) -> str:
        """The full id of the one session whose id starts with ``prefix`` (any case)."""
        text = prefix.strip().lower()
        # Only hex digits and "-": nothing the prefix match could read as a pattern.
        if not _PREFIX_RE.fullmatch(text):
            raise SessionNotFoundError(prefix, "not a session id")
        with self.read() as conn:
            rows = conn.execute(
                f"SELECT id FROM sessions WHERE id {self.PREFIX_MATCH} {self.PARAM} "
                "ORDER BY id LIMIT 4",
                (text + self.PREFIX_WILDCARD,),
            ).fetchall()
        ids = [r[0] for r in rows]
        if not ids:
            raise SessionNotFoundError(prefix)
        if len(ids) > 1:
            raise AmbiguousSessionError(prefix, ids)
        return ids[0]

    def list_sessions(self, limit: int = 0) -> list[SessionInfo]:
        """Most recently updated first; ties go to the most recently created."""
        sql = INFO_SQL + self.ORDER_SQL
        args: tuple[int, ...] = ()
        if limit > 0:
            sql, args = sql + f" LIMIT {self.PARAM}", (limit,)
        with self.read() as conn:
            return [session_info(row) for row in conn.execute(sql, args)]

    def sessions_older_than(self, cutoff_unix: float) -> list[SessionInfo]:
        """Sessions last updated before ``cutoff_unix``, most recently updated first."""
        with self.read() as conn:
            rows = conn.execute(
                f"{INFO_SQL} WHERE {aged_sql(self.PARAM)}{self.ORDER_SQL}",
                (cutoff_unix, cutoff_unix),
            )
            return [session_info(row) for row in rows]

    def number_hits(self, hits: Sequence[SearchHit]) -> list[SearchHit]:
        """The hits with ``number`` set: how many messages of its session come up to it
        (`sessions show` numbers them that way; row ids are global to the store)."""
        sql = (
            f"SELECT count(*) FROM messages WHERE session_id = {self.PARAM} AND id <= {self.PARAM}"
        )
        with self.read() as conn:
            return [
                replace(
                    h, number=int(conn.execute(sql, (h.session_id, h.message_id)).fetchone()[0])
                )
                for h in hits
            ]

    def session_info(self, session_id: str) -> SessionInfo:
        check_session_id(session_id)
        with self.read() as conn:
            row = conn.execute(f"{INFO_SQL} WHERE id = {self.PARAM}", (session_id,)).fetchone()
        if row is None:
            raise SessionNotFoundError(session_id)
        return session_info(row)

    # -- usage ---------------------------------------------------------------------

    def add_usage(
        self,
        session_id: str,
        *,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
        cost_usd: float | None = None,
        summary: bool = False,
        cache_write_tokens: int = 0,
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
            cache_write_tokens=cache_write_tokens,
        )
        # Qualified by the alias: PostgreSQL finds a bare column name ambiguous there.
        with self.statement() as conn:
            conn.execute(usage_upsert_sql(self.PARAM, "session_usage AS u", "u."), values)

    def usage_totals(self, session_id: str) -> UsageTotals:
        """The session's summed usage; all zero for a session that made no model call."""
        with self.read() as conn:
            row = conn.execute(
                f"SELECT {', '.join(USAGE_COLUMNS)} FROM session_usage "
                f"WHERE session_id = {self.PARAM}",
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

    # -- deleting ------------------------------------------------------------------

    def delete_session(self, session_id: str) -> None:
        self.delete_sessions([session_id])

    def delete_if_empty(self, session_id: str) -> bool:
        """Delete the session only if it holds no message, checked in the same transaction.

        A chat that leaves without a message drops its empty session; another process
        (``chat --continue``) may have started writing to it meanwhile.
        """
        check_session_id(session_id)
        p = self.PARAM
        with self.transaction() as conn:
            gone = conn.execute(
                f"DELETE FROM sessions WHERE id = {p} AND NOT EXISTS "
                f"(SELECT 1 FROM messages WHERE session_id = {p})",
                (session_id, session_id),
            ).rowcount
        if gone:
            self._deleted([session_id])
        return bool(gone)

    def delete_sessions(
        self, session_ids: Iterable[str], *, updated_before: float | None = None
    ) -> list[str]:
        """Delete all of them in one transaction, or none if any is missing; return the ids.

        With ``updated_before`` (``--older-than``) a session that is gone or was written
        to since it was listed is skipped, not an error (``_delete_aged``): a chat still
        appending to it must not lose its messages to a clean-up that listed it a moment
        earlier. Each session goes whole or not at all.
        """
        ids = [check_session_id(sid) for sid in dict.fromkeys(session_ids)]
        if updated_before is not None:
            return self._delete_aged(ids, updated_before)
        with self.transaction() as conn:
            for sid in ids:
                # Messages, todos, compactions (and blobs) go by ON DELETE CASCADE.
                sql = f"DELETE FROM sessions WHERE id = {self.PARAM}"
                if conn.execute(sql, (sid,)).rowcount == 0:
                    raise SessionNotFoundError(sid)
        self._deleted(ids)
        return ids

    # -- checkpoints and moving sessions -------------------------------------------

    def _store_checkpoint(self, conn: Any, session_id: str, cp: Checkpoint) -> int:
        """Insert ``cp`` and its details (if any) in ``conn``'s transaction; its id."""
        new_id = self._insert_checkpoint(conn, session_id, cp)
        details = checkpoint_details(cp)
        if details is not None:
            p = self.PARAM
            conn.execute(
                f"INSERT INTO compaction_details (compaction_id, "
                f"{', '.join(CHECKPOINT_DETAIL_FIELDS)}) VALUES ({p}, {p}, {p}, {p})",
                (new_id, *(self._stored_text(x) for x in details)),
            )
        return new_id

    def snapshot(self, session_id: str) -> SessionSnapshot:
        """Everything stored about one session, read in one transaction.

        A chat writing meanwhile cannot tear the snapshot.
        """
        from harness9.store.export import SessionSnapshot

        session = self.open_session(session_id)
        with self._snapshot_read():
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

        Message and checkpoint ids are kept when the store may reuse them all
        (``ids_reusable``: a re-import is then exact); otherwise, and always with
        ``new_id``, fresh ids are assigned and each checkpoint moves to its message's
        new id.
        """
        import uuid

        from harness9.store.export import ImportFormatError, SessionExistsError

        sid = str(uuid.uuid4()) if new_id else snap.info.id
        p = self.PARAM
        try:
            with self.transaction() as conn:
                if self._exists(conn, sid):
                    raise SessionExistsError(sid)
                keep = (
                    not new_id
                    and self.ids_reusable(conn, "messages", [r.id for r in snap.records])
                    and self.ids_reusable(conn, "compactions", [c.id for c in snap.checkpoints])
                )
                info = snap.info
                conn.execute(
                    "INSERT INTO sessions (id, created_at, updated_at, title, message_count, "
                    f"imported_at) VALUES ({p}, {p}, {p}, {p}, {p}, {p})",
                    (
                        sid,
                        info.created_at,
                        info.updated_at,
                        self._stored_text(info.title),
                        len(snap.records),
                        time.time(),
                    ),
                )
                new_ids = self.restore_messages(conn, sid, snap.records, keep)
                self.restore_rest(conn, sid, snap, new_ids, keep)
        except UnicodeEncodeError:
            raise ImportFormatError("the file holds text that is not valid Unicode") from None
        return sid

    def restore_rest(
        self, conn: Any, sid: str, snap: SessionSnapshot, new_ids: dict[int, int], keep: bool
    ) -> None:
        """Everything of ``snap`` but its session row and messages: todos, checkpoints
        (moved to ``new_ids``, their own ids kept if ``keep``) and usage totals."""
        p = self.PARAM
        if snap.todos:
            conn.cursor().executemany(
                f"INSERT INTO todos (session_id, position, content, status) VALUES ({p}, {p}, {p}, {p})",
                [
                    (sid, i, self._stored_text(t.content), t.status)
                    for i, t in enumerate(snap.todos)
                ],
            )
        for cp in snap.checkpoints:
            moved = replace(
                cp,
                id=cp.id if keep else 0,
                last_message_id=new_ids.get(cp.last_message_id, 0),
                # Stubs follow their messages to new ids. (Handles written inside the
                # index and stub texts keep the file's ids: kept when free.)
                rewrites={new_ids[k]: v for k, v in cp.rewrites.items() if k in new_ids},
            )
            self._store_checkpoint(conn, sid, moved)
        if snap.usage != UsageTotals():
            conn.execute(usage_insert_sql(p), usage_row(sid, snap.usage))

    def _deleted(self, session_ids: Iterable[str]) -> None:
        """Tell ``on_session_deleted`` about deletions once they are committed."""
        if self.on_session_deleted is not None:
            for sid in session_ids:
                self.on_session_deleted(sid)
