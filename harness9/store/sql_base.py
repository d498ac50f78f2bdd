"""What every part of an SQL store's manager stands on.

A manager (``harness9.store.sqlite.Manager``, ``harness9.store.postgres.PostgresManager``)
is composed of driver-neutral parts, one per concern: ``sessions`` (create, open, list,
delete, id prefixes), ``usage`` (usage rows and roll-ups), ``lineage`` (forks and
sub-agent links) and ``snapshots`` (a session read whole, and stored back). Each part
is written once against what is declared here: the driver's connections
(``read()`` / ``transaction()`` / ``statement()``), its parameter marker, and small hooks
for what really differs (the methods below that raise NotImplementedError). The few
row operations several parts share live here too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Generic, Self, TypeVar

from harness9.store.codec import encode_details, encode_instructions
from harness9.store.session import Checkpoint, StoredMessage
from harness9.store.sql_session import SqlSessionBase

S = TypeVar("S", bound=SqlSessionBase)


class SqlStoreBase(Generic[S]):
    """The driver's half of an SQL store's manager; ``S`` is its session class."""

    PARAM: ClassVar[str]  # the driver's parameter marker: "?" or "%s"
    ORDER_SQL: ClassVar[str]  # listing order, newest first; ends in the creation order
    PREFIX_MATCH: ClassVar[str]  # how an id is matched against a prefix pattern
    PREFIX_WILDCARD: ClassVar[str]  # what the pattern ends in: "any text after"
    INFO_SQL: ClassVar[str]  # a sessions row as ``rows.info_from_row`` takes it; append WHERE
    on_session_deleted: Callable[[str], None] | None
    _lock: threading.RLock  # held by every use of the connection
    _conn: Any  # the one connection; None once closed

    # -- the driver's hooks --------------------------------------------------------

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

    def _copy_blobs(self, conn: Any, origin: str, fork: str) -> None:
        """Copy the offloaded outputs a database store keeps (none by default)."""

    def ids_reusable(self, conn: Any, table: str, ids: list[int]) -> bool:
        """Whether a restore may write ``ids`` into ``table`` as they are."""
        raise NotImplementedError

    def restore_messages(
        self, conn: Any, session_id: str, records: list[StoredMessage], keep: bool
    ) -> dict[int, int]:
        """Insert ``records`` (with their ids if ``keep``); map each old id to its new one."""
        raise NotImplementedError

    # -- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- rows several parts write --------------------------------------------------

    def _exists(self, conn: Any, session_id: str) -> bool:
        return (
            conn.execute(
                f"SELECT 1 FROM sessions WHERE id = {self.PARAM}", (session_id,)
            ).fetchone()
            is not None
        )

    def _insert_session(self, conn: Any, session_id: str, now: float) -> None:
        p = self.PARAM
        conn.execute(
            f"INSERT INTO sessions (id, created_at, updated_at) VALUES ({p}, {p}, {p})",
            (session_id, now, now),
        )

    def _store_checkpoint(self, conn: Any, session_id: str, cp: Checkpoint) -> int:
        """Insert ``cp`` and its details (if any) in ``conn``'s transaction; its id.

        A session's compaction, a fork's kept checkpoints and a restore all store them so.
        """
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

    def _deleted(self, session_ids: Iterable[str]) -> None:
        """Tell ``on_session_deleted`` about deletions once they are committed."""
        if self.on_session_deleted is not None:
            for sid in session_ids:
                self.on_session_deleted(sid)
