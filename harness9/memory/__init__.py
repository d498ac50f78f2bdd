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
from harness9.memory.eviction import EvictionCompactor, density_score, evict_by_density
from harness9.memory.fingerprint import (
    STRUCTURED_COMPRESSION_PROMPT,
    KeyInfoFingerprint,
    SummaryError,
    extract_fingerprint,
    marker_compactor,
    repair_summary,
    structured_summary,
    validate_markers,
)
from harness9.memory.mem_session import MemorySession
from harness9.memory.offload import (
    OFFLOAD_MARKER,
    RECALL_MAX_CHARS,
    OffloadConfig,
    OffloadedResult,
    OffloadError,
    OffloadNotFoundError,
    OffloadStore,
    OffloadWriter,
    is_offload_marker,
)
from harness9.memory.phase2 import Phase2Compactor
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
from harness9.memory.topics import SelectiveCompressor, TopicConfig, TopicDetector, TopicSegment
from harness9.memory.triggers import (
    CompressCooldown,
    SmartCompressor,
    SmartTrigger,
    TokenGrowthTracker,
    ToolCallPattern,
    TriggerInfo,
    TriggerInfoProvider,
    TriggerRegistry,
    build_trigger_info,
    classify_pattern,
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
    # phase 2: offload, smart triggers, density eviction, structured compression, topics
    "OFFLOAD_MARKER",
    "RECALL_MAX_CHARS",
    "OffloadConfig",
    "OffloadError",
    "OffloadNotFoundError",
    "OffloadStore",
    "OffloadWriter",
    "OffloadedResult",
    "is_offload_marker",
    "CompressCooldown",
    "SmartCompressor",
    "SmartTrigger",
    "TokenGrowthTracker",
    "ToolCallPattern",
    "TriggerInfo",
    "TriggerInfoProvider",
    "TriggerRegistry",
    "build_trigger_info",
    "classify_pattern",
    "EvictionCompactor",
    "density_score",
    "evict_by_density",
    "STRUCTURED_COMPRESSION_PROMPT",
    "KeyInfoFingerprint",
    "SummaryError",
    "extract_fingerprint",
    "marker_compactor",
    "repair_summary",
    "structured_summary",
    "validate_markers",
    "Phase2Compactor",
    "SelectiveCompressor",
    "TopicConfig",
    "TopicDetector",
    "TopicSegment",
]
