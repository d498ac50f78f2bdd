"""What the model is shown: pure functions of the stored log.

What the model is sent next is built by one method, ``policy.ContextPolicy.prepare``: a
``harness9.request.Request`` holding the system message in its parts (the prompt, the session state,
the pins, the kept instructions), the messages (the view, ``view.build_view``, compacted
when it is time by the one pipeline, ``pipeline.py``, each strategy a row of its table
``STRATEGIES``), the tool definitions and the reply's budget; the provider sends exactly
that. Never imports the engine, the UI or litellm. Re-exported here: the public API
(docs/architecture.md, 'Public API') and what tests and scripts import.
Beside them: ``facts`` (what rules find in text), ``stubs`` (the stand-ins and the
repair), ``summarize`` and ``topics``. Summaries prepared ahead are the policy's decision
(``policy.Preparations``); their threads and clocks are the engine's (harness9.engine.prepared).
"""

from harness9.context.facts import extract_fingerprint, validate_markers
from harness9.context.pipeline import (
    CompactionPlan,
    CompactionResult,
    Compactor,
    HybridCompactor,
    SlidingWindowCompactor,
    SummarizationCompactor,
    TokenBudgetCompactor,
    eviction_compactor,
    find_cut,
)
from harness9.context.stubs import is_valid_tool_sequence, repair_orphaned_tool_pairs
from harness9.context.summarize import SpanSummarizer
from harness9.context.topics import TopicDetector
from harness9.context.view import ModelView, build_view, checkpoint_for, load_view
from harness9.tokens import estimate_tokens, estimate_tool_tokens, format_token_count
