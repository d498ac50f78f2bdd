"""Persistence only: what was said, exactly, forever (until deleted).

Sessions, the SQLite store and its migrations, full-text search, export/import and
retention. Never imports ``harness9.context``, the engine, the UI or litellm.
"""

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
)
from harness9.store.sqlite import (
    AmbiguousSessionError,
    Manager,
    SQLiteSession,
    is_session_id,
    open_manager,
)

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
    "StoreBusyError",
    "StoreError",
    "StoredMessage",
    "is_session_id",
    "open_manager",
]
