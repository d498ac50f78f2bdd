"""Everything about history: the store, token arithmetic and compaction.

Never imports litellm, the engine or the UI.
"""

from harness9.memory.mem_session import MemorySession
from harness9.memory.session import (
    Checkpoint,
    CheckpointedSession,
    CorruptRow,
    Session,
    SessionInfo,
    SessionNotFoundError,
    StoredMessage,
    StoreError,
)
from harness9.memory.store import (
    AmbiguousSessionError,
    Manager,
    SQLiteSession,
    is_session_id,
    open_manager,
)
from harness9.memory.tokens import (
    estimate_message_tokens,
    estimate_tokens,
    estimate_tool_tokens,
    format_token_count,
    message_bytes,
)

__all__ = [
    "AmbiguousSessionError",
    "Manager",
    "MemorySession",
    "SQLiteSession",
    "is_session_id",
    "open_manager",
    "Checkpoint",
    "CheckpointedSession",
    "CorruptRow",
    "Session",
    "SessionInfo",
    "SessionNotFoundError",
    "StoreError",
    "StoredMessage",
    "estimate_message_tokens",
    "estimate_tokens",
    "estimate_tool_tokens",
    "format_token_count",
    "message_bytes",
]
