"""A session is a tree (see docs/architecture.md, 'A session is a tree'): forks, and sub-agents' sessions.

Forks. A fork is a new session that SHARES its origin's messages 1..N (as ``sessions
show`` numbers them) instead of copying them: one ``inherited_messages`` row says that
the fork also holds every message its origin holds with an id up to the id of message
N (harness9.store.scope reads that chain). The fork's own messages are written later,
so their ids are all larger, and ordering by id gives the fork's order. A fork then
costs the same for ten messages as for a hundred thousand, and the messages keep their
ids: checkpoint anchors, eviction stubs and ``msg_<id>`` recall handles need no
rewriting, so the checkpoints the origin had when message N was its newest
(``kept_checkpoints``) are copied as they are. An ``/undo`` of an inherited message
lowers the bound (nothing of the origin is deleted); deleting an origin first hands
the rows its forks see to the fork that sees most of them, with the same ids (the
``sessions_hand_over_shared`` trigger, both stores), so a deleted origin leaves its
forks intact.

Sub-agents. A sub-agent's conversation is a session of its own, linked to the session
whose `task` call ran it (``subagent_sessions``); a family (a session and the sessions
below it) is listed, deleted, aged and exported as one.

``LineageStore`` is the part of an SQL store's manager that writes and reads both
(harness9.store.sql_base); the rest here is driver-neutral helpers.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from harness9.errors import UsageError
from harness9.store.codec import decode_todos
from harness9.store.rows import info_from_row, shown_text
from harness9.store.scope import read_scope
from harness9.store.session import (
    Checkpoint,
    ForkOrigin,
    SessionInfo,
    SessionNotFoundError,
    SubAgentLink,
    check_session_id,
)
from harness9.store.sql_base import S, SqlStoreBase

# What a fork copies of its origin as it is (table, columns after session_id, order).
_FORK_COPIES = (
    ("session_pins", "text, created_at", " ORDER BY id"),  # pins keep their order
    ("session_settings", "model, context_window, api_base, workdir, count_samples", ""),
)


class ForkPointError(UsageError):
    """The message number to fork at names no message of the session."""


@dataclass(slots=True, frozen=True)
class ForkPoint:
    """The origin's message N: its id (0 for an empty fork), its creation time and that
    of the message after it (None when N is the newest)."""

    number: int
    last_id: int
    next_created: float | None
    created: float | None = None


def check_fork_number(at: int | None, total: int) -> int:
    """The number of messages a fork keeps: ``at``, or all of them."""
    if at is None:
        return total
    if isinstance(at, bool) or not isinstance(at, int) or not 1 <= at <= total:
        raise ForkPointError(
            f"there is no message {at} to fork at: the session has {total} "
            f"message{'' if total == 1 else 's'} (numbered as `sessions show` numbers them)"
        )
    return at


def kept_checkpoints(checkpoints: Iterable[Checkpoint], point: ForkPoint) -> list[Checkpoint]:
    """The checkpoints the session had when message ``point.number`` was its newest.

    One covers messages up to N at most, stubs none after N, and was made before the
    next message was written (a compaction made right after N, before the reply, is
    part of the view at N; one made later that still ends before N is not).
    """
    out = []
    for cp in checkpoints:
        if cp.last_message_id > point.last_id:
            continue
        if any(k > point.last_id for k in cp.stubs):
            continue
        if point.next_created is not None and cp.created_at > point.next_created:
            continue
        out.append(cp)
    return out


def family(conn: Any, param: str, session_ids: Sequence[str]) -> list[str]:
    """``session_ids`` and every sub-agent session below them, parents first."""
    return _linked(conn, param, session_ids, "session_id", "parent_id")


def _linked(conn: Any, param: str, session_ids: Sequence[str], found: str, known: str) -> list[str]:
    """``session_ids``, then level by level the sessions whose ``subagent_sessions`` row
    links them (``found`` of the rows whose ``known`` is one of the level before)."""
    out, level = list(session_ids), list(session_ids)
    seen = set(out)
    while level:
        marks = ", ".join([param] * len(level))
        rows = conn.execute(
            f"SELECT {found} FROM subagent_sessions WHERE {known} IN ({marks})",
            tuple(level),
        ).fetchall()
        level = list(dict.fromkeys(r[0] for r in rows if r[0] not in seen))
        seen.update(level)
        out += level
    return out


class LineageStore(SqlStoreBase[S]):
    """Forks and sub-agents' sessions in an SQL store."""

    # A sub-agent link as ``_link_from_row`` takes it; append WHERE. A store whose driver
    # chokes on text that is not UTF-8 reads the texts as bytes (SQLite keeps what a hand
    # edit wrote): a damaged description must not make the family unreadable.
    LINK_SQL: ClassVar[str] = (
        "SELECT session_id, parent_id, tool_call_id, description FROM subagent_sessions"
    )

    # -- sub-agents' sessions --------------------------------------------------------

    def new_child_session(self, parent_id: str, tool_call_id: str, description: str = "") -> S:
        """A new session for a sub-agent that ``parent_id``'s ``tool_call_id`` runs."""
        import uuid

        check_session_id(parent_id)
        sid = str(uuid.uuid4())
        with self.transaction() as conn:
            if not self._exists(conn, parent_id):
                raise SessionNotFoundError(parent_id)
            self._insert_session(conn, sid, time.time())
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
                f"{self.LINK_SQL} WHERE session_id = {self.PARAM}", (session_id,)
            ).fetchone()
        return _link_from_row(row) if row is not None else None

    def children(self, session_id: str) -> list[tuple[SubAgentLink, SessionInfo]]:
        """The sessions of the sub-agents ``session_id`` ran, oldest first."""
        p = self.PARAM
        with self.read() as conn:
            links = conn.execute(f"{self.LINK_SQL} WHERE parent_id = {p}", (session_id,))
            by_id = {str(r[0]): _link_from_row(r) for r in links.fetchall()}
            rows = conn.execute(
                f"{self.INFO_SQL} WHERE parent_id = {p} ORDER BY created_at, id", (session_id,)
            ).fetchall()
        infos = [info_from_row(r) for r in rows]
        return [(by_id[i.id], i) for i in infos if i.id in by_id]

    def with_parents(self, session_ids: Iterable[str]) -> list[str]:
        """``session_ids`` and the sessions above them (whose sub-agents they are)."""
        with self.read() as conn:
            return _linked(conn, self.PARAM, list(session_ids), "parent_id", "session_id")

    # -- forks -----------------------------------------------------------------------

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
            if not _message_number(count):  # a damaged count: count what the fork shares
                (count,) = conn.execute(
                    f"SELECT count(*) FROM messages WHERE {mine}", args
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

        The messages are shared, not copied: one row, whatever the session's length, and
        they keep their ids, so the checkpoints come along as they are. Its pins, todo
        list, model settings and offloaded outputs come along too.
        """
        import uuid

        check_session_id(session_id)
        sid, now, p = str(uuid.uuid4()), time.time(), self.PARAM
        with self.transaction() as conn:
            # The title as a listing shows it: one that is not UTF-8 is copied with
            # replacement characters rather than failing the fork.
            row = conn.execute(f"{self.INFO_SQL} WHERE id = {p}", (session_id,)).fetchone()
            if row is None:
                raise SessionNotFoundError(session_id)
            title = info_from_row(row).title
            # An /undo in the origin meanwhile must see this fork's share (PostgreSQL).
            self._session(session_id)._lock_session(conn)
            point = self._fork_point(conn, session_id, at)
            conn.execute(
                "INSERT INTO sessions (id, created_at, updated_at, title, message_count) "
                f"VALUES ({p}, {p}, {p}, {p}, {p})",
                (sid, now, now, self._stored_text(title) if point.number else "", point.number),
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
        return _origin(row[0], row[1]) if row is not None else None

    def fork_origins(self) -> dict[str, ForkOrigin]:
        """Every fork's origin, by fork id (for listings)."""
        with self.read() as conn:
            rows = conn.execute(
                "SELECT session_id, origin_id, origin_message FROM session_forks"
            ).fetchall()
        origins = {str(r[0]): _origin(r[1], r[2]) for r in rows}
        return {sid: o for sid, o in origins.items() if o is not None}

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
        return [(str(r[0]), r[1]) for r in rows if _message_number(r[1])]


def _link_from_row(row: Sequence[Any]) -> SubAgentLink:
    sid, parent, call_id, description = row
    return SubAgentLink(str(sid), str(parent), shown_text(call_id), shown_text(description))


def _message_number(value: Any) -> bool:
    """Whether a fork row's message number is one (a hand-edited row may hold anything)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _origin(origin_id: Any, message: Any) -> ForkOrigin | None:
    """A fork row's origin; None for a damaged row, which a listing must survive: the
    fork is then shown as an original."""
    return ForkOrigin(str(origin_id), message) if _message_number(message) else None
