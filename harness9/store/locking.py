"""Taking SQLite's write lock without starving behind a long write done in steps."""

from __future__ import annotations

import sqlite3
import time

BUSY_TIMEOUT_MS = 5000  # how long a write waits for another process's lock before giving up
LOCK_POLL_S = 0.002  # how often a waiting writer retries the lock (SQLite's own wait: 100 ms)


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` means another connection holds the lock (try again later)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


_LOAD_SCHEMA = "SELECT 1 FROM sqlite_master WHERE 0"


def begin_immediate(conn: sqlite3.Connection, wait_s: float = BUSY_TIMEOUT_MS / 1000) -> None:
    """BEGIN IMMEDIATE, retried every LOCK_POLL_S for up to ``wait_s``.

    SQLite's own busy handler backs off to one retry per 100 ms, so a writer queued
    behind a long write done in short steps would rarely hit the brief gap between two
    steps; polling this often, it takes the first one. Raises sqlite3.OperationalError
    ("database is locked") when the wait runs out.
    """
    deadline = time.monotonic() + wait_s
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                # Load the schema another connection may have changed (a newer harness9's
                # migration) with a plain read: SQLite 3.40 fails a cascading DELETE that
                # has to reload it itself with "no such table: sessions".
                try:
                    conn.execute(_LOAD_SCHEMA).fetchall()
                except sqlite3.Error:
                    conn.execute("ROLLBACK")
                    raise
                return
            except sqlite3.OperationalError as exc:
                if not is_busy(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(LOCK_POLL_S)
    finally:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS:d}")
