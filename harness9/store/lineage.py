"""Forks (see docs/architecture.md, 'A session is a tree'): what a fork shares, and how.

A fork is a new session that SHARES its origin's messages 1..N (as ``sessions show``
numbers them) instead of copying them: one ``inherited_messages`` row says that the
fork also holds every message its origin holds (its own, and those it inherits in
turn) with an id up to the id of message N. The fork's own messages are written
later, so their ids are all larger, and ordering by id gives the fork's order. A fork
then costs the same for ten messages as for a hundred thousand, and the messages keep
their ids: checkpoint anchors, eviction stubs and ``msg_<id>`` recall handles need no
rewriting, so the checkpoints the origin had when message N was its newest
(``kept_checkpoints``) are copied as they are.

Every read of a session's messages goes through its ``Scope`` (``read_scope``): the
chain of sessions whose rows it sees, each with the newest id it sees of them. An
``/undo`` of an inherited message lowers the bound (nothing of the origin is deleted);
deleting an origin first hands the rows its forks see to the fork that sees most of
them, with the same ids (the ``sessions_hand_over_shared`` trigger, both stores), so a
deleted origin leaves its forks intact. Driver-neutral helpers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from harness9.errors import UsageError
from harness9.store.session import Checkpoint

# A chain is never this deep; the bound stops a loop a damaged table could make.
_MAX_DEPTH = 10_000


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
