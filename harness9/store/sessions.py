"""The sessions of an SQL store: create, open, list, look up by id prefix, delete.

One part of a store's manager (``harness9.store.sql_base``), the same on every
driver; what differs (deleting by age in bounded steps or in one statement) is the
driver's ``_delete_aged``. A session's own reads and writes are
``harness9.store.sql_session``'s.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from harness9.errors import HarnessError
from harness9.store.lineage import family
from harness9.store.rows import info_from_row
from harness9.store.scope import read_scope
from harness9.store.session import SessionInfo, SessionNotFoundError, check_session_id
from harness9.store.sql_base import S, SqlStoreBase

if TYPE_CHECKING:
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
# SQLite keeps whatever bytes a hand edit or a faulty tool wrote into a TEXT column, and its
# driver refuses a whole query over one that is not UTF-8: read as bytes, a damaged title or
# workdir is decoded with replacement characters (``info_from_row``) instead of making every
# listing, and the cron clean-up, fail.
INFO_SQL_BYTES = INFO_SQL.replace(" title, ", " CAST(title AS BLOB), ").replace(
    "(SELECT st.workdir ", "(SELECT CAST(st.workdir AS BLOB) "
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


class SessionCatalog(SqlStoreBase[S]):
    """Create, open, list, resolve and delete the sessions of an SQL store."""

    INFO_SQL = INFO_SQL  # a store whose driver chokes on bad text reads INFO_SQL_BYTES

    def new_session(self) -> S:
        import uuid  # not at import time: listing sessions never needs it

        sid = str(uuid.uuid4())
        with self.transaction() as conn:
            self._insert_session(conn, sid, time.time())
        return self._session(sid)

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
        sql = self.INFO_SQL + ("" if children else f" WHERE {TOP_LEVEL_SQL}") + self.ORDER_SQL
        args: tuple[int, ...] = ()
        if limit > 0:
            sql, args = sql + f" LIMIT {self.PARAM}", (limit,)
        with self.read() as conn:
            return [info_from_row(row) for row in conn.execute(sql, args)]

    def sessions_older_than(self, cutoff_unix: float) -> list[SessionInfo]:
        """Top-level sessions whose family (they and their sub-agents' sessions) was last
        updated before ``cutoff_unix``, most recently updated first. A family is kept or
        deleted as one: a sub-agent's session is never a candidate of its own."""
        p = self.PARAM
        with self.read() as conn:
            rows = conn.execute(
                f"{self.INFO_SQL} WHERE {aged_sql(p)} AND {TOP_LEVEL_SQL} AND NOT EXISTS ("
                "SELECT 1 FROM subagent_sessions AS k JOIN sessions AS c ON c.id = k.session_id "
                f"WHERE k.parent_id = sessions.id AND c.updated_at >= {p}){self.ORDER_SQL}",
                (cutoff_unix, cutoff_unix, cutoff_unix),
            )
            return [info_from_row(row) for row in rows]

    def session_info(self, session_id: str) -> SessionInfo:
        check_session_id(session_id)
        with self.read() as conn:
            row = conn.execute(f"{self.INFO_SQL} WHERE id = {self.PARAM}", (session_id,)).fetchone()
        if row is None:
            raise SessionNotFoundError(session_id)
        return info_from_row(row)

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
            kids = family(conn, self.PARAM, ids)[len(ids) :]
            for sid in [*reversed(kids), *ids]:
                # Messages, todos, compactions (and blobs) go by ON DELETE CASCADE.
                conn.execute(f"DELETE FROM sessions WHERE id = {self.PARAM}", (sid,))
                gone.append(sid)
        self._deleted(gone)
        return ids
