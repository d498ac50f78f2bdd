"""What the model is shown: pure functions of the stored log, plus the offload writer.

What the model is sent next is built by one method, ``policy.ContextPolicy.prepare``: a
``view.Request`` holding the system message in its parts (the prompt, the session state,
the pins, the kept instructions), the messages (the view, ``view.build_view``, compacted
when it is time by the one pipeline, ``pipeline.py``, whose configurations are the
strategies), the tool definitions and the reply's budget; the provider sends exactly
that. Never imports the engine, the UI or litellm. Re-exported here: the public API
(docs/architecture.md, 'Public API') and what tests and scripts import.
"""

from harness9.context.compaction import CompactionPlan, CompactionResult, Compactor, find_cut
from harness9.context.fingerprint import extract_fingerprint, validate_markers
from harness9.context.offload import OffloadConfig, OffloadStore
from harness9.context.pipeline import (
    HybridCompactor,
    SlidingWindowCompactor,
    SummarizationCompactor,
    TokenBudgetCompactor,
    eviction_compactor,
)
from harness9.context.repair import is_valid_tool_sequence, repair_orphaned_tool_pairs
from harness9.context.summarize import SpanSummarizer
from harness9.context.tokens import estimate_tokens, estimate_tool_tokens, format_token_count
from harness9.context.topics import TopicDetector
from harness9.context.view import ModelView, build_view, checkpoint_for, load_view
