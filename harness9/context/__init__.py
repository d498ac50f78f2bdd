"""What the model is shown: pure functions of the stored log, plus the offload writer.

What the model sees next is decided in two places, both pure: the view
(``view.build_view``: the system message, the latest checkpoint's summary and the
messages after it) and, when it is time (``ContextPolicy.prepare``), the one
compaction pipeline (``pipeline.Pipeline``), whose configurations are the strategies.
Never imports the engine, the UI or litellm.
"""

from harness9.context.compaction import CompactionPlan, CompactionResult, Compactor, find_cut
from harness9.context.fingerprint import extract_fingerprint, validate_markers
from harness9.context.offload import OffloadConfig, OffloadStore
from harness9.context.pipeline import (
    HybridCompactor,
    Pipeline,
    SlidingWindowCompactor,
    Steps,
    SummarizationCompactor,
    TokenBudgetCompactor,
    eviction_compactor,
)
from harness9.context.policy import ContextPolicy
from harness9.context.repair import is_valid_tool_sequence, repair_orphaned_tool_pairs
from harness9.context.summarize import SpanSummarizer, Summarizer
from harness9.context.tokens import estimate_tokens, estimate_tool_tokens, format_token_count
from harness9.context.topics import TopicDetector
from harness9.context.view import ModelView, build_view, checkpoint_for, load_view

__all__ = [
    "CompactionPlan",
    "CompactionResult",
    "Compactor",
    "ContextPolicy",
    "HybridCompactor",
    "ModelView",
    "OffloadConfig",
    "OffloadStore",
    "Pipeline",
    "SlidingWindowCompactor",
    "SpanSummarizer",
    "Steps",
    "SummarizationCompactor",
    "Summarizer",
    "TokenBudgetCompactor",
    "TopicDetector",
    "build_view",
    "checkpoint_for",
    "estimate_tokens",
    "estimate_tool_tokens",
    "eviction_compactor",
    "extract_fingerprint",
    "find_cut",
    "format_token_count",
    "is_valid_tool_sequence",
    "load_view",
    "repair_orphaned_tool_pairs",
    "validate_markers",
]
