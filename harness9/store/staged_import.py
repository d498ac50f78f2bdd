"""Importing a session into the SQLite store in bounded steps, invisible until the last one.

A single transaction for a 50,000-message export held the write lock for seconds,
and a chat saving its reply meanwhile waited (or failed after the 5 s lock
timeout). Here the import runs as short transactions with the lock free between
them (``Manager.in_steps``), and is still all or nothing for everyone else:

1. **Claim** (one short transaction): the checks (the id is free, no live import of
   it), the choice of keeping the file's message ids, which are then reserved in
   ``sqlite_sequence`` so that no other writer can take one meanwhile, and a row in
   ``session_imports`` (migration track_unfinished_imports) naming this importer.
2. **Messages**, a batch per step, written with ``session_id`` set but with *no row
   in ``sessions``* yet (foreign keys are off on this connection for these steps
   only). Every read path starts from ``sessions`` or joins it (list, show, open,
   resume, prefix lookup, search), so these rows are seen by none of them.
3. **Publish** (one short transaction): the ``sessions`` row, todos, checkpoints and
   usage, and the claim row removed. From this commit on the session is there, whole.

An import that fails (bad text, a full disk, Ctrl-C) removes its rows again in
bounded steps before it re-raises. One that cannot (kill -9, power loss) leaves its
claim row and rows behind, hidden; the next import or retention pass finds claims
whose owner is gone (its process no longer runs on this host, or it has not
written a step for ``STALE_AFTER_S``) and removes them (``discard_unfinished``).
A cleaner first takes the claim over, in one transaction, so an owner that was only
slow stops at its next step instead of publishing a session with rows missing.

The rows themselves are written by the SQLite Manager's half of a restore
(``ids_reusable``, ``restore_messages``, ``restore_rest``: the hooks that
``SnapshotStore.restore`` calls in its one transaction, harness9.store.snapshots), here
spread over the steps.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field
from typing import Protocol

from harness9.errors import HarnessError
from harness9.store.export import ImportFormatError, SessionExistsError, SessionSnapshot
from harness9.store.session import StoredMessage, StoreError


class StagingManager(Protocol):
    """What a staged import needs of the SQLite Manager (``harness9.store.sqlite``): its
    connection, bounded write steps, and its half of a restore."""

    @property
    def read_only(self) -> bool: ...

    def read(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def in_steps(self, step: Callable[[sqlite3.Connection, int], tuple[int, bool]]) -> int: ...

    def ids_reusable(self, conn: sqlite3.Connection, table: str, ids: list[int]) -> bool: ...

    def restore_messages(
        self, conn: sqlite3.Connection, session_id: str, records: list[StoredMessage], keep: bool
    ) -> dict[int, int]: ...

    def restore_rest(
        self,
        conn: sqlite3.Connection,
        sid: str,
        snap: SessionSnapshot,
        new_ids: dict[int, int],
        keep: bool,
    ) -> None: ...


# A claim whose owner has not finished a step for this long is taken for abandoned. A
# step holds the lock for ~0.1 s and waits at most the 5 s lock timeout for it.
STALE_AFTER_S = 60.0


class ImportInProgressError(HarnessError):
    """Another harness9 is importing the same session right now."""

    def __init__(self, session_id: str, pid: int, host: str) -> None:
        super().__init__(
            f"session {session_id} is being imported by another harness9 (process {pid} "
            f"on {host}); try again when it has finished"
        )


class ImportTakenOverError(StoreError):
    """This import's claim was taken over by a cleaner that found it idle for too long."""


@dataclass(slots=True)
class _Claim:
    session_id: str
    token: str
    keep_ids: bool
    new_ids: dict[int, int] = field(default_factory=dict)  # file's message id -> stored id


def import_in_steps(manager: StagingManager, snap: SessionSnapshot, *, new_id: bool = False) -> str:
    """Store ``snap`` (see the module docstring); return the session id it was stored under.

    Message and checkpoint ids are kept when they are all free (so a re-import is
    exact); otherwise, and always with ``new_id``, fresh ids are assigned and each
    checkpoint is moved to its message's new id.
    """
    sid = str(uuid.uuid4()) if new_id else snap.info.id
    discard_unfinished(manager)
    try:
        claim = _claim(manager, snap, sid, new_id)
        try:
            with _foreign_keys_off(manager):
                _write_messages(manager, snap, claim)
            _publish(manager, snap, claim)
        except BaseException:
            # Nothing of it may stay behind; if even this fails, the next pass removes it.
            with suppress(Exception):
                _discard(manager, claim.session_id, claim.token)
            raise
    except UnicodeEncodeError:
        raise ImportFormatError("the file holds text that is not valid Unicode") from None
    return sid


def discard_unfinished(manager: StagingManager, *, now: float | None = None) -> list[str]:
    """Remove what imports that died half-way left behind; return their session ids."""
    if manager.read_only:
        return []
    with manager.read() as conn:
        rows = conn.execute(
            "SELECT session_id, token, pid, host, touched_at FROM session_imports"
        ).fetchall()
    at = time.time() if now is None else now
    gone: list[str] = []
    for sid, token, pid, host, touched in rows:
        if not _abandoned(pid, host, touched, at):
            continue
        mine = uuid.uuid4().hex
        with manager.transaction() as conn:
            taken = conn.execute(
                "UPDATE session_imports SET token = ?, pid = ?, host = ?, touched_at = ? "
                "WHERE session_id = ? AND token = ?",
                (mine, os.getpid(), socket.gethostname(), time.time(), sid, token),
            ).rowcount
        if taken:  # otherwise its owner moved on, or another cleaner got there first
            _discard(manager, sid, mine)
            gone.append(sid)
    return gone


def _abandoned(pid: int, host: str, touched: float, now: float) -> bool:
    if now - touched > STALE_AFTER_S:
        return True
    if host != socket.gethostname() or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # it runs, as someone else
    return False


@contextmanager
def _foreign_keys_off(manager: StagingManager) -> Iterator[None]:
    """Foreign keys off on the Manager's connection (it cannot be changed in a transaction).

    ``read`` holds the Manager's lock throughout, so no other thread writes through this
    connection meanwhile; other processes have their own connections, with the keys on.
    """
    with manager.read() as conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        try:
            yield
        finally:
            conn.execute("PRAGMA foreign_keys = ON")


def _reserve(conn: sqlite3.Connection, table: str, top: int) -> None:
    """Make AUTOINCREMENT hand out only ids above ``top`` from now on."""
    if not conn.execute(
        "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (top, table)
    ).rowcount:
        conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (table, top))


def _claim(manager: StagingManager, snap: SessionSnapshot, sid: str, new_id: bool) -> _Claim:
    ids = [r.id for r in snap.records]
    checkpoint_ids = [c.id for c in snap.checkpoints]
    token = uuid.uuid4().hex
    now = time.time()
    with manager.transaction() as conn:
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone():
            raise SessionExistsError(sid)
        other = conn.execute(
            "SELECT pid, host FROM session_imports WHERE session_id = ?", (sid,)
        ).fetchone()
        if other is not None:
            raise ImportInProgressError(sid, int(other[0]), str(other[1]))
        keep = (
            not new_id
            and manager.ids_reusable(conn, "messages", ids)
            and manager.ids_reusable(conn, "compactions", checkpoint_ids)
            # Another import still writing may have reserved some of these ids.
            and (
                not ids
                or conn.execute(
                    "SELECT 1 FROM session_imports WHERE first_id <= ? AND last_id >= ?",
                    (ids[-1], ids[0]),
                ).fetchone()
                is None
            )
        )
        if keep:
            if ids:
                _reserve(conn, "messages", ids[-1])  # ids increase through the file
            if checkpoint_ids:
                _reserve(conn, "compactions", checkpoint_ids[-1])
        first, last = (ids[0], ids[-1]) if keep and ids else (0, 0)
        conn.execute(
            "INSERT INTO session_imports (session_id, token, first_id, last_id, pid, host, "
            "started_at, touched_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (sid, token, first, last, os.getpid(), socket.gethostname(), now, now),
        )
    return _Claim(sid, token, keep)


def _check_claim(conn: sqlite3.Connection, claim: _Claim) -> None:
    """Refresh the claim's heartbeat; stop if a cleaner has taken it over."""
    if not conn.execute(
        "UPDATE session_imports SET touched_at = ? WHERE session_id = ? AND token = ?",
        (time.time(), claim.session_id, claim.token),
    ).rowcount:
        raise ImportTakenOverError(
            f"the import of session {claim.session_id} was cancelled: another harness9 "
            f"found it idle for over {STALE_AFTER_S:.0f} s and removed it; import it again"
        )


def _write_messages(manager: StagingManager, snap: SessionSnapshot, claim: _Claim) -> None:
    records = snap.records
    sid = claim.session_id
    done = [0]

    def step(conn: sqlite3.Connection, size: int) -> tuple[int, bool]:
        _check_claim(conn, claim)
        batch = records[done[0] : done[0] + size]
        claim.new_ids.update(manager.restore_messages(conn, sid, batch, claim.keep_ids))
        done[0] += len(batch)
        return len(batch), done[0] >= len(records)

    if records:
        manager.in_steps(step)


def _publish(manager: StagingManager, snap: SessionSnapshot, claim: _Claim) -> None:
    sid, info = claim.session_id, snap.info
    with manager.transaction() as conn:
        _check_claim(conn, claim)
        conn.execute(
            "INSERT INTO sessions (id, created_at, updated_at, title, message_count, "
            "imported_at) VALUES (?, ?, ?, ?, ?, ?)",
            (sid, info.created_at, info.updated_at, info.title, len(snap.records), time.time()),
        )
        manager.restore_rest(conn, sid, snap, claim.new_ids, claim.keep_ids)
        conn.execute("DELETE FROM session_imports WHERE session_id = ?", (sid,))


def _discard(manager: StagingManager, sid: str, token: str) -> None:
    """Remove the rows of the unpublished import ``sid`` owned by ``token``, step by step."""

    def step(conn: sqlite3.Connection, size: int) -> tuple[int, bool]:
        owned = conn.execute(
            "UPDATE session_imports SET touched_at = ? WHERE session_id = ? AND token = ?",
            (time.time(), sid, token),
        ).rowcount
        if not owned:
            return 0, True  # taken over: the new owner removes them
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone():
            # Published after all (cannot happen while the claim row stands): keep it.
            conn.execute("DELETE FROM session_imports WHERE session_id = ?", (sid,))
            return 0, True
        n = conn.execute(
            "DELETE FROM messages WHERE id IN "
            "(SELECT id FROM messages WHERE session_id = ? ORDER BY id LIMIT ?)",
            (sid, size),
        ).rowcount
        if n < size:
            conn.execute("DELETE FROM session_imports WHERE session_id = ?", (sid,))
            return n, True
        return n, False

    manager.in_steps(step)
