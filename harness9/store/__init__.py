"""Persistence only: what was said, exactly, forever (until deleted).

Sessions, the SQLite store and its migrations, the PostgreSQL store (imported only
when a URL selects it), full-text search, export/import and retention. Never imports ``harness9.context``, the engine, the UI or litellm.
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
