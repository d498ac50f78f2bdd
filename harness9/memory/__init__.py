"""Everything about history: the store, token arithmetic and compaction.

Never imports litellm, the engine or the UI.
"""

from harness9.memory.compaction import (
    CompactionPlan,
    CompactionResult,
    Compactor,
    SlidingWindowCompactor,
    TokenBudgetCompactor,
    find_cut,
)
from harness9.memory.mem_session import MemorySession
from harness9.memory.repair import is_valid_tool_sequence, repair_orphaned_tool_pairs
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
from harness9.memory.summarization import SummarizationCompactor, Summarizer
from harness9.memory.tokens import (
    estimate_message_tokens,
    estimate_tokens,
    estimate_tool_tokens,
    format_token_count,
    message_bytes,
)
from harness9.memory.view import ModelView, build_view, checkpoint_for, load_view

__all__ = [
    "AmbiguousSessionError",
    "Manager",
    "MemorySession",
    "SQLiteSession",
    "is_session_id",
    "open_manager",
    "Checkpoint",
    "CompactionPlan",
    "CompactionResult",
    "Compactor",
    "ModelView",
    "SlidingWindowCompactor",
    "SummarizationCompactor",
    "Summarizer",
    "TokenBudgetCompactor",
    "build_view",
    "checkpoint_for",
    "find_cut",
    "is_valid_tool_sequence",
    "load_view",
    "repair_orphaned_tool_pairs",
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
