"""Persistence only: what was said, exactly, forever (until deleted).

Never imports ``harness9.context``, the engine, the UI or litellm. Where things are:

- ``session``: the Session protocols and the records they hand out; ``memory``,
  ``holding``: a session in memory, and one whose saves survive a locked database.
- ``backend``: which store a command opens (SQLite file or PostgreSQL URL) and the
  ``SessionStore`` protocol both fill in.
- The manager of an SQL store, one module per concern, written once for both
  drivers: ``sessions`` (create, open, list, id prefixes, delete), ``usage`` (usage rows
  and roll-ups), ``lineage`` (forks, sub-agents' sessions; ``scope``: the rows a fork
  sees), ``snapshots`` (a session read whole and stored back), on ``sql_base``, composed
  in ``sql_manager``; a session's reads and writes in ``sql_session``.
- SQLite: ``sqlite`` (the driver), ``migrations``, ``locking``, ``fts_index``,
  ``sqlite_search``, ``staged_import``. PostgreSQL (imported only when a URL selects it):
  ``postgres``, ``pg_migrations``, ``pg_index``, ``pg_search``, ``pg_blobs``.
- Shared by both: ``codec`` and ``rows`` (records to rows and back; ``legacy_checkpoint``,
  ``legacy_offload``: rows from before), ``search`` (the query language), ``titles``,
  ``scrub``; moving sessions: ``export``, ``family``,
  ``migrate``, ``retention``; offloaded outputs: ``blobs``, ``offloads``.
"""

from harness9.store.backend import SessionStore, open_existing_store, open_store
from harness9.store.memory import (
    MemorySession,
)
from harness9.store.session import (
    Checkpoint,
    CheckpointedSession,
    CorruptRow,
    Session,
    SessionInfo,
    SessionNotFoundError,
    StoreBusyError,
    StoredMessage,
    StoreError,
    is_session_id,
)
from harness9.store.sessions import AmbiguousSessionError
from harness9.store.sqlite import Manager, SQLiteSession, open_manager

__all__ = [
    "AmbiguousSessionError",
    "Checkpoint",
    "CheckpointedSession",
    "CorruptRow",
    "Manager",
    "MemorySession",
    "SQLiteSession",
    "Session",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionStore",
    "StoreBusyError",
    "StoreError",
    "StoredMessage",
    "is_session_id",
    "open_existing_store",
    "open_manager",
    "open_store",
]
