"""Everything about history: the store, token arithmetic and compaction.

Never imports litellm, the engine or the UI.
"""

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
from harness9.memory.tokens import (
    estimate_message_tokens,
    estimate_tokens,
    estimate_tool_tokens,
    format_token_count,
    message_bytes,
)

__all__ = [
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
