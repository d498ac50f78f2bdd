"""What the model is shown: pure functions of the stored log, plus the offload files.

Token arithmetic, repair, the one compaction pipeline and its configurations
(pipeline.py), the span summariser, fingerprints, eviction, triggers, topics, offload,
the model view, and the ContextPolicy that puts them together for the engine. Never imports the engine, the UI or litellm.
"""

from harness9.context.compaction import (
    CompactionPlan,
    CompactionResult,
    Compactor,
    ProgressCallback,
    find_cut,
)
from harness9.context.eviction import (
    density_score,
    evict_by_density,
)
from harness9.context.fingerprint import (
    STRUCTURED_COMPRESSION_PROMPT,
    KeyInfoFingerprint,
    SummaryError,
    extract_fingerprint,
    marker_summarizer,
    repair_summary,
    structured_summary,
    validate_markers,
)
from harness9.context.offload import (
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
from harness9.context.pipeline import (
    HybridCompactor,
    Pipeline,
    SlidingWindowCompactor,
    Steps,
    SummarizationCompactor,
    TokenBudgetCompactor,
    evict_summary_compactor,
    eviction_compactor,
)
from harness9.context.policy import (
    ContextBreakdown,
    ContextPolicy,
    SessionContextState,
    build_compactor,
)
from harness9.context.repair import (
    is_valid_tool_sequence,
    repair_orphaned_tool_pairs,
)
from harness9.context.summarize import (
    SpanSummarizer,
    Summarizer,
)
from harness9.context.tokens import (
    estimate_message_tokens,
    estimate_tokens,
    estimate_tool_tokens,
    format_token_count,
    message_bytes,
)
from harness9.context.topics import (
    TopicDetector,
    TopicSegment,
)
from harness9.context.triggers import (
    CompressCooldown,
    SessionTriggerState,
    SmartTrigger,
    TokenGrowthTracker,
    ToolCallPattern,
    TriggerInfo,
    classify_pattern,
)
from harness9.context.view import (
    ModelView,
    build_view,
    checkpoint_for,
    load_view,
)

__all__ = [
    "CompactionPlan",
    "CompactionResult",
    "Compactor",
    "CompressCooldown",
    "ContextBreakdown",
    "ContextPolicy",
    "HybridCompactor",
    "KeyInfoFingerprint",
    "ModelView",
    "OFFLOAD_MARKER",
    "OffloadConfig",
    "OffloadError",
    "OffloadNotFoundError",
    "OffloadStore",
    "OffloadWriter",
    "OffloadedResult",
    "Pipeline",
    "ProgressCallback",
    "RECALL_MAX_CHARS",
    "STRUCTURED_COMPRESSION_PROMPT",
    "SessionContextState",
    "SessionTriggerState",
    "SlidingWindowCompactor",
    "SmartTrigger",
    "SpanSummarizer",
    "Steps",
    "SummarizationCompactor",
    "Summarizer",
    "SummaryError",
    "TokenBudgetCompactor",
    "TokenGrowthTracker",
    "ToolCallPattern",
    "TopicDetector",
    "TopicSegment",
    "TriggerInfo",
    "build_compactor",
    "build_view",
    "checkpoint_for",
    "classify_pattern",
    "density_score",
    "estimate_message_tokens",
    "estimate_tokens",
    "estimate_tool_tokens",
    "evict_by_density",
    "evict_summary_compactor",
    "eviction_compactor",
    "extract_fingerprint",
    "find_cut",
    "format_token_count",
    "is_offload_marker",
    "is_valid_tool_sequence",
    "load_view",
    "marker_summarizer",
    "message_bytes",
    "repair_orphaned_tool_pairs",
    "repair_summary",
    "structured_summary",
    "validate_markers",
]
