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
from harness9.store.codec import (
    decode_todos,
    encode_details,
    encode_instructions,
)
from harness9.store.lineage import (
    ForkPoint,
    check_fork_number,
    kept_checkpoints,
    read_scope,
)
from harness9.store.rows import (
    USAGE_COLUMNS,
    usage_insert_sql,
    usage_row,
    usage_upsert_sql,
    usage_values,
)
from harness9.store.session import (
    Checkpoint,
    ForkOrigin,
    SessionInfo,
    SessionNotFoundError,
    StoredMessage,
    SubAgentLink,
    UsageTotals,
    check_session_id,
    move_checkpoint_ids,
)
from harness9.store.sql_session import SqlSessionBase

if TYPE_CHECKING:
    from harness9.store.export import SessionSnapshot
    from harness9.store.search import SearchHit

_PREFIX_RE = re.compile(r"[0-9a-f-]{1,36}")

# The workdir comes from the session's settings (a subquery), the parent from a sub-agent's
# subagent_sessions row (NULL: a top-level session).
INFO_SQL = (
    "SELECT id, created_at, updated_at, message_count, title, "
    "coalesce((SELECT st.workdir FROM session_settings st WHERE st.session_id = sessions.id), ''), "
    "parent_id FROM sessions "
    "LEFT JOIN subagent_sessions ON subagent_sessions.session_id = sessions.id"
)
TOP_LEVEL_SQL = "parent_id IS NULL"
# What a fork copies of its origin as it is (table, columns after session_id, order).
_FORK_COPIES = (
    ("session_pins", "text, created_at", " ORDER BY id"),  # pins keep their order
    ("session_settings", "model, context_window, api_base, workdir", ""),
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
    sid, created, updated, count, title, workdir, parent = row
    if isinstance(title, bytes):
        title = title.decode("utf-8", "replace")
    elif not isinstance(title, str):
        title = "" if title is None else str(title)
    if isinstance(count, bool) or not isinstance(count, int):
        count = 0
    return SessionInfo(sid, created, updated, count, title, str(workdir or ""), parent or "")


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

    def list_sessions(self, limit: int = 0, *, children: bool = False) -> list[SessionInfo]:
        """Most recently updated first; ties go to the most recently created.

        Top-level sessions only, unless ``children``: sub-agents' sessions too."""
        sql = INFO_SQL + ("" if children else f" WHERE {TOP_LEVEL_SQL}") + self.ORDER_SQL
        args: tuple[int, ...] = ()
        if limit > 0:
            sql, args = sql + f" LIMIT {self.PARAM}", (limit,)
        with self.read() as conn:
            return [session_info(row) for row in conn.execute(sql, args)]

    def sessions_older_than(self, cutoff_unix: float) -> list[SessionInfo]:
        """Top-level sessions whose family (they and their sub-agents' sessions) was last
        updated before ``cutoff_unix``, most recently updated first. A family is kept or
        deleted as one: a sub-agent's session is never a candidate of its own."""
        p = self.PARAM
        with self.read() as conn:
            rows = conn.execute(
                f"{INFO_SQL} WHERE {aged_sql(p)} AND {TOP_LEVEL_SQL} AND NOT EXISTS ("
                "SELECT 1 FROM subagent_sessions AS k JOIN sessions AS c ON c.id = k.session_id "
                f"WHERE k.parent_id = sessions.id AND c.updated_at >= {p}){self.ORDER_SQL}",
                (cutoff_unix, cutoff_unix, cutoff_unix),
            )
            return [session_info(row) for row in rows]

    # -- sub-agents' sessions --------------------------------------------------------

    def new_child_session(self, parent_id: str, tool_call_id: str, description: str = "") -> S:
        """A new session for a sub-agent that ``parent_id``'s ``tool_call_id`` runs."""
        import uuid

        check_session_id(parent_id)
        sid = str(uuid.uuid4())
        now = time.time()
        p = self.PARAM
        with self.transaction() as conn:
            if not self._exists(conn, parent_id):
                raise SessionNotFoundError(parent_id)
            conn.execute(
                f"INSERT INTO sessions (id, created_at, updated_at) VALUES ({p}, {p}, {p})",
                (sid, now, now),
            )
            self._link(conn, SubAgentLink(sid, parent_id, tool_call_id, description))
        return self._session(sid)

    def _link(self, conn: Any, link: SubAgentLink) -> None:
        p = self.PARAM
        conn.execute(
            "INSERT INTO subagent_sessions (session_id, parent_id, tool_call_id, description) "
            f"VALUES ({p}, {p}, {p}, {p})",
            (
                link.session_id,
                link.parent_id,
                self._stored_text(link.tool_call_id),
                self._stored_text(link.description),
            ),
        )

    def link_child(self, link: SubAgentLink) -> None:
        """Record that ``link.session_id`` is a sub-agent's session of ``link.parent_id``
        (an import restores a family this way)."""
        with self.transaction() as conn:
            self._link(conn, link)

    def subagent_link(self, session_id: str) -> SubAgentLink | None:
        """Whose `task` call ran this session; None for a top-level session."""
        with self.read() as conn:
            row = conn.execute(
                "SELECT session_id, parent_id, tool_call_id, description FROM subagent_sessions "
                f"WHERE session_id = {self.PARAM}",
                (session_id,),
            ).fetchone()
        return SubAgentLink(*row) if row is not None else None

    def children(self, session_id: str) -> list[tuple[SubAgentLink, SessionInfo]]:
        """The sessions of the sub-agents ``session_id`` ran, oldest first."""
        with self.read() as conn:
            rows = conn.execute(
                "SELECT l.session_id, l.parent_id, l.tool_call_id, l.description, "
                "s.id, s.created_at, s.updated_at, s.message_count, s.title, "
                "coalesce((SELECT st.workdir FROM session_settings st "
                "WHERE st.session_id = s.id), ''), l.parent_id "
                "FROM subagent_sessions AS l JOIN sessions AS s ON s.id = l.session_id "
                f"WHERE l.parent_id = {self.PARAM} ORDER BY s.created_at, s.id",
                (session_id,),
            ).fetchall()
        return [(SubAgentLink(*r[:4]), session_info(r[4:])) for r in rows]

    def with_parents(self, session_ids: Iterable[str]) -> list[str]:
        """``session_ids`` and the sessions above them (whose sub-agents they are)."""
        with self.read() as conn:
            return self._linked(conn, list(session_ids), "parent_id", "session_id")

    def _family(self, conn: Any, session_ids: Sequence[str]) -> list[str]:
        """``session_ids`` and every sub-agent session below them, parents first."""
        return self._linked(conn, session_ids, "session_id", "parent_id")

    def _linked(self, conn: Any, session_ids: Sequence[str], found: str, known: str) -> list[str]:
        """``session_ids``, then level by level the sessions whose ``subagent_sessions`` row
        links them (``found`` of the rows whose ``known`` is one of the level before)."""
        out, level = list(session_ids), list(session_ids)
        seen = set(out)
        while level:
            marks = ", ".join([self.PARAM] * len(level))
            rows = conn.execute(
                f"SELECT {found} FROM subagent_sessions WHERE {known} IN ({marks})",
                tuple(level),
            ).fetchall()
            level = list(dict.fromkeys(r[0] for r in rows if r[0] not in seen))
            seen.update(level)
            out += level
        return out

    def number_hits(self, hits: Sequence[SearchHit]) -> list[SearchHit]:
        """The hits with ``number`` set: how many messages of its session come up to it
        (`sessions show` numbers them that way; row ids are global to the store)."""
        out = []
        with self.read() as conn:
            for h in hits:
                mine, args = read_scope(conn, self.PARAM, h.session_id).where(self.PARAM)
                sql = f"SELECT count(*) FROM messages WHERE {mine} AND id <= {self.PARAM}"
                (n,) = conn.execute(sql, (*args, h.message_id)).fetchone()
                out.append(replace(h, number=int(n)))
        return out

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

    def subagent_usage(self, session_id: str) -> UsageTotals:
        """What the sub-agents below ``session_id`` consumed, summed (all zero: none ran)."""
        with self.read() as conn:
            kids = self._family(conn, [session_id])[1:]
            if not kids:
                return UsageTotals()
            marks = ", ".join([self.PARAM] * len(kids))
            row = conn.execute(
                f"SELECT {', '.join(f'coalesce(sum({c}), 0)' for c in USAGE_COLUMNS)} "
                f"FROM session_usage WHERE session_id IN ({marks})",
                tuple(kids),
            ).fetchone()
        if row is None:
            return UsageTotals()
        # Sums come back as the driver's wide types (PostgreSQL: numeric, a Decimal).
        values: dict[str, Any] = {
            c: float(v) if c.endswith("cost_usd") else int(v)
            for c, v in zip(USAGE_COLUMNS, row, strict=True)
        }
        return UsageTotals(**values)

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
            mine, args = read_scope(conn, p, session_id).where(p)
            gone = conn.execute(
                f"DELETE FROM sessions WHERE id = {p} AND NOT EXISTS "
                f"(SELECT 1 FROM messages WHERE {mine})",
                (session_id, *args),
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
        gone: list[str] = []
        with self.transaction() as conn:
            for sid in ids:
                if not self._exists(conn, sid):
                    raise SessionNotFoundError(sid)
            # A session's sub-agents' sessions go with it (first, deepest first).
            kids = self._family(conn, ids)[len(ids) :]
            for sid in [*reversed(kids), *ids]:
                # Messages, todos, compactions (and blobs) go by ON DELETE CASCADE.
                conn.execute(f"DELETE FROM sessions WHERE id = {self.PARAM}", (sid,))
                gone.append(sid)
        self._deleted(gone)
        return ids

    # -- checkpoints and moving sessions -------------------------------------------

    def _store_checkpoint(self, conn: Any, session_id: str, cp: Checkpoint) -> int:
        """Insert ``cp`` and its details (if any) in ``conn``'s transaction; its id."""
        new_id = self._insert_checkpoint(conn, session_id, cp)
        data = encode_details(cp)
        p = self.PARAM
        if data is not None:
            conn.execute(
                f"INSERT INTO compaction_data (compaction_id, data) VALUES ({p}, {p})",
                (new_id, self._stored_text(data)),
            )
        if cp.instructions:
            conn.execute(
                f"INSERT INTO compaction_instructions (compaction_id, messages) VALUES ({p}, {p})",
                (new_id, self._stored_text(encode_instructions(cp.instructions))),
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
            pins = session.pins()
            origin = self.fork_origin(session_id)
            link = self.subagent_link(session_id)
        return SessionSnapshot(
            info,
            records,
            todos,
            checkpoints,
            list(session.corrupt_rows),
            usage=usage,
            pins=pins,
            forked_from=origin,
            link=link,
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
            # The anchor, stubs and recall handles follow their messages to new ids.
            # (Handles written in the summary's prose keep the file's ids: kept when free.)
            moved = move_checkpoint_ids(replace(cp, id=cp.id if keep else 0), new_ids.get)
            self._store_checkpoint(conn, sid, moved)
        if snap.usage != UsageTotals():
            conn.execute(usage_insert_sql(p), usage_row(sid, snap.usage))
        now = time.time()
        for text in snap.pins:
            conn.execute(
                f"INSERT INTO session_pins (session_id, text, created_at) VALUES ({p}, {p}, {p})",
                (sid, self._stored_text(text), now),
            )
        if snap.forked_from is not None:
            conn.execute(
                "INSERT INTO session_forks (session_id, origin_id, origin_message) "
                f"VALUES ({p}, {p}, {p})",
                (sid, snap.forked_from.session_id, snap.forked_from.message),
            )

    # -- forks (harness9.store.lineage) ------------------------------------------------

    def _copy_blobs(self, conn: Any, origin: str, fork: str) -> None:
        """Copy the offloaded outputs a database store keeps (none by default)."""

    def _fork_point(self, conn: Any, session_id: str, at: int | None) -> ForkPoint:
        """Where the fork ends. Nothing here reads the whole session: the newest id of
        each level of the scope by the index (all of it: the count is the session's
        ``message_count``, which every write keeps), or message ``at`` by an offset in
        id order (only ids: the index is enough)."""
        p = self.PARAM
        scope = read_scope(conn, p, session_id)
        mine, args = scope.where(p)
        if at is None:
            (count,) = conn.execute(
                f"SELECT message_count FROM sessions WHERE id = {p}", (session_id,)
            ).fetchone()
            tops = [
                conn.execute(
                    f"SELECT max(id) FROM messages WHERE session_id = {p}"
                    + ("" if bound is None else f" AND id <= {p}"),
                    (sid,) if bound is None else (sid, bound),
                ).fetchone()[0]
                for sid, bound in scope.levels
            ]
            ids = [int(max(t for t in tops if t is not None))] if any(tops) else []
            number = int(count) if ids else 0
        else:
            number = at if not isinstance(at, bool) and isinstance(at, int) and at > 0 else 0
            ids = [
                int(r[0])
                for r in conn.execute(
                    f"SELECT id FROM messages WHERE {mine} ORDER BY id LIMIT 2 OFFSET {p}",
                    (*args, max(number - 1, 0)),
                ).fetchall()
            ]
            if not number or not ids:
                (total,) = conn.execute(
                    f"SELECT count(*) FROM messages WHERE {mine}", args
                ).fetchone()
                check_fork_number(at, int(total))  # raises: there is no message ``at``
        if not ids:
            return ForkPoint(0, 0, None)
        times = dict(
            conn.execute(
                f"SELECT id, created_at FROM messages WHERE id IN ({', '.join([p] * len(ids))})",
                tuple(ids),
            ).fetchall()
        )
        after = times[ids[1]] if len(ids) > 1 else None
        return ForkPoint(number, ids[0], after, float(times[ids[0]]))

    def fork_session(self, session_id: str, at: int | None = None) -> str:
        """A new session with messages 1..``at`` of ``session_id`` (all without it) and
        the checkpoints it had then; its id. One transaction; the origin is only read.

        The messages are shared, not copied (harness9.store.lineage): one row, whatever
        the session's length, and they keep their ids, so the checkpoints come along as
        they are. Its pins, todo list, model settings and offloaded outputs come along too.
        """
        import uuid

        check_session_id(session_id)
        sid, now, p = str(uuid.uuid4()), time.time(), self.PARAM
        with self.transaction() as conn:
            row = conn.execute(
                f"SELECT title FROM sessions WHERE id = {p}", (session_id,)
            ).fetchone()
            if row is None:
                raise SessionNotFoundError(session_id)
            # An /undo in the origin meanwhile must see this fork's share (PostgreSQL).
            self._session(session_id)._lock_session(conn)
            point = self._fork_point(conn, session_id, at)
            conn.execute(
                "INSERT INTO sessions (id, created_at, updated_at, title, message_count) "
                f"VALUES ({p}, {p}, {p}, {p}, {p})",
                (sid, now, now, row[0] if point.number else "", point.number),
            )
            if point.last_id:
                conn.execute(
                    "INSERT INTO inherited_messages (session_id, base_id, upto_id) "
                    f"VALUES ({p}, {p}, {p})",
                    (sid, session_id, point.last_id),
                )
            for cp in kept_checkpoints(self._session(session_id).list_checkpoints(), point):
                self._store_checkpoint(conn, sid, replace(cp, id=0))
            self._fork_todos(conn, session_id, sid, point)
            for table, columns, order in _FORK_COPIES:
                conn.execute(
                    f"INSERT INTO {table} (session_id, {columns}) SELECT {p}, {columns} "
                    f"FROM {table} WHERE session_id = {p}{order}",
                    (sid, session_id),
                )
            conn.execute(
                "INSERT INTO session_forks (session_id, origin_id, origin_message) "
                f"VALUES ({p}, {p}, {p})",
                (sid, session_id, point.number),
            )
            self._copy_blobs(conn, session_id, sid)
        return sid

    def _fork_todos(self, conn: Any, origin: str, fork: str, point: ForkPoint) -> None:
        """The fork's todo list as it was when message N was written: the last list saved
        up to then (none: no list yet; a list a tool call in N saved belongs to the call's
        result, N+1). Its saved lists up to then come along, so a fork of the fork knows
        them too. With N the newest message, or a session whose lists were all saved
        before harness9 kept them (none kept at all), the list as it is now."""
        p = self.PARAM
        bound = point.created if point.next_created is not None else None
        cond, args = ("", ()) if bound is None else (f" AND saved_at <= {p}", (bound,))
        conn.execute(
            "INSERT INTO todo_lists (session_id, saved_at, items) "
            f"SELECT {p}, saved_at, items FROM todo_lists WHERE session_id = {p}{cond} ORDER BY id",
            (fork, origin, *args),
        )
        known = conn.execute(
            f"SELECT 1 FROM todo_lists WHERE session_id = {p} LIMIT 1", (origin,)
        ).fetchone()
        if bound is None or known is None:
            conn.execute(
                "INSERT INTO todos (session_id, position, content, status) "
                f"SELECT {p}, position, content, status FROM todos WHERE session_id = {p}",
                (fork, origin),
            )
            return
        row = conn.execute(
            f"SELECT items FROM todo_lists WHERE session_id = {p} ORDER BY id DESC LIMIT 1",
            (fork,),
        ).fetchone()
        items = decode_todos(str(row[0])) if row is not None else []
        if items:
            conn.cursor().executemany(
                "INSERT INTO todos (session_id, position, content, status) "
                f"VALUES ({p}, {p}, {p}, {p})",
                [(fork, i, t.content, t.status) for i, t in enumerate(items)],
            )

    def fork_origin(self, session_id: str) -> ForkOrigin | None:
        """Where ``session_id`` was forked from; None for an original."""
        p = self.PARAM
        with self.read() as conn:
            row = conn.execute(
                f"SELECT origin_id, origin_message FROM session_forks WHERE session_id = {p}",
                (session_id,),
            ).fetchone()
        return ForkOrigin(str(row[0]), int(row[1])) if row is not None else None

    def fork_origins(self) -> dict[str, ForkOrigin]:
        """Every fork's origin, by fork id (for listings)."""
        with self.read() as conn:
            rows = conn.execute(
                "SELECT session_id, origin_id, origin_message FROM session_forks"
            ).fetchall()
        return {str(r[0]): ForkOrigin(str(r[1]), int(r[2])) for r in rows}

    def forks_of(self, session_id: str) -> list[tuple[str, int]]:
        """The sessions forked from ``session_id``: (fork id, message number), oldest first."""
        p = self.PARAM
        with self.read() as conn:
            rows = conn.execute(
                "SELECT f.session_id, f.origin_message FROM session_forks AS f "
                f"JOIN sessions AS s ON s.id = f.session_id WHERE f.origin_id = {p} "
                "ORDER BY s.created_at, f.session_id",
                (session_id,),
            ).fetchall()
        return [(str(r[0]), int(r[1])) for r in rows]

    def _deleted(self, session_ids: Iterable[str]) -> None:
        """Tell ``on_session_deleted`` about deletions once they are committed."""
        if self.on_session_deleted is not None:
            for sid in session_ids:
                self.on_session_deleted(sid)
