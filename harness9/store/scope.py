"""The messages rows a session holds: its own, and a fork's inherited ones.

A fork shares its origin's messages instead of copying them (harness9.store.lineage):
one ``inherited_messages`` row says that the fork also holds every message its origin
holds (its own, and those it inherits in turn) with an id up to a bound. Every read of
a session's messages goes through its ``Scope`` (``read_scope``): the chain of sessions
whose rows it sees, each with the newest id it sees of them. An ``/undo`` or a clear
narrows a session's scope (``see_below``) without taking anything from a fork that
shares the rows. Driver-neutral.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# A chain is never this deep; the bound stops a loop a damaged table could make.
_MAX_DEPTH = 10_000


@dataclass(slots=True, frozen=True)
class Scope:
    """The messages rows one session holds: ``levels`` are (session, newest id seen),
    the session itself first with no bound, then the sessions it inherits from."""

    levels: tuple[tuple[str, int | None], ...]

    @property
    def session_id(self) -> str:
        return self.levels[0][0]

    @property
    def shared(self) -> bool:
        """Whether some of these rows belong to another session (an origin's)."""
        return len(self.levels) > 1

    def where(self, param: str, alias: str = "") -> tuple[str, tuple[object, ...]]:
        """The condition "the row is one of these" on a messages row (``alias.``), and
        its arguments. A session that shares nothing gets the plain ``session_id = ?``."""
        parts: list[str] = []
        args: list[object] = []
        for sid, bound in self.levels:
            if bound is None:
                parts.append(f"{alias}session_id = {param}")
                args.append(sid)
            else:
                parts.append(f"({alias}session_id = {param} AND {alias}id <= {param})")
                args += [sid, bound]
        sql = parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"
        return sql, tuple(args)


def read_scope(conn: Any, param: str, session_id: str) -> Scope:
    """``session_id``'s scope, read in ``conn`` (one query per level of the chain)."""
    levels: list[tuple[str, int | None]] = [(session_id, None)]
    bound: int | None = None
    seen = {session_id}
    sid = session_id
    for _ in range(_MAX_DEPTH):
        row = conn.execute(
            f"SELECT base_id, upto_id FROM inherited_messages WHERE session_id = {param}",
            (sid,),
        ).fetchone()
        if row is None or str(row[0]) in seen:
            break
        sid = str(row[0])
        bound = int(row[1]) if bound is None else min(bound, int(row[1]))
        levels.append((sid, bound))
        seen.add(sid)
    return Scope(tuple(levels))


def seen_by_forks(conn: Any, param: str, session_id: str, rid: int) -> bool:
    """Whether a fork of ``session_id`` sees its message ``rid``."""
    return (
        conn.execute(
            f"SELECT 1 FROM inherited_messages WHERE base_id = {param} AND upto_id >= {param}",
            (session_id, rid),
        ).fetchone()
        is not None
    )


def see_below(
    conn: Any, param: str, session_id: str, rid: int, hand_over: Callable[[Any], str | None]
) -> None:
    """From now on ``session_id`` holds only what it held below message ``rid``.

    Forks that see ``rid`` keep it: the session first hands its rows to the one that
    sees most (``hand_over``, the driver's: it returns that heir's id) and becomes a fork
    of that heir, below ``rid``. Otherwise its own rows from ``rid`` on are deleted and
    it inherits less.
    """
    p = param
    heir = hand_over(conn) if seen_by_forks(conn, p, session_id, rid) else None
    conn.execute(f"DELETE FROM messages WHERE session_id = {p} AND id >= {p}", (session_id, rid))
    if heir is not None:
        conn.execute(
            "INSERT INTO inherited_messages (session_id, base_id, upto_id) "
            f"VALUES ({p}, {p}, {p}) ON CONFLICT (session_id) DO UPDATE SET "
            "base_id = excluded.base_id, upto_id = excluded.upto_id",
            (session_id, heir, rid - 1),
        )
    else:
        conn.execute(
            f"UPDATE inherited_messages SET upto_id = {p} "
            f"WHERE session_id = {p} AND upto_id >= {p}",
            (rid - 1, session_id, rid),
        )
