"""Everything about history: the store, token arithmetic and compaction.

Never imports litellm, the engine or the UI. Names are imported on first use
(PEP 562): `harness9 sessions list` runs from cron and should not pay for the
compaction and phase-2 modules it never touches.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "AmbiguousSessionError": "harness9.memory.store",
    "Checkpoint": "harness9.memory.session",
    "CheckpointedSession": "harness9.memory.session",
    "CompactionPlan": "harness9.memory.compaction",
    "CompactionResult": "harness9.memory.compaction",
    "Compactor": "harness9.memory.compaction",
    "CompressCooldown": "harness9.memory.triggers",
    "CorruptRow": "harness9.memory.session",
    "EvictionCompactor": "harness9.memory.eviction",
    "KeyInfoFingerprint": "harness9.memory.fingerprint",
    "Manager": "harness9.memory.store",
    "MemorySession": "harness9.memory.mem_session",
    "ModelView": "harness9.memory.view",
    "OFFLOAD_MARKER": "harness9.memory.offload",
    "OffloadConfig": "harness9.memory.offload",
    "OffloadError": "harness9.memory.offload",
    "OffloadNotFoundError": "harness9.memory.offload",
    "OffloadStore": "harness9.memory.offload",
    "OffloadWriter": "harness9.memory.offload",
    "OffloadedResult": "harness9.memory.offload",
    "Phase2Compactor": "harness9.memory.phase2",
    "RECALL_MAX_CHARS": "harness9.memory.offload",
    "SQLiteSession": "harness9.memory.store",
    "STRUCTURED_COMPRESSION_PROMPT": "harness9.memory.fingerprint",
    "SelectiveCompressor": "harness9.memory.topics",
    "Session": "harness9.memory.session",
    "SessionInfo": "harness9.memory.session",
    "SessionNotFoundError": "harness9.memory.session",
    "SlidingWindowCompactor": "harness9.memory.compaction",
    "SmartCompressor": "harness9.memory.triggers",
    "SmartTrigger": "harness9.memory.triggers",
    "StoreError": "harness9.memory.session",
    "StoredMessage": "harness9.memory.session",
    "SummarizationCompactor": "harness9.memory.summarization",
    "Summarizer": "harness9.memory.summarization",
    "SummaryError": "harness9.memory.fingerprint",
    "TokenBudgetCompactor": "harness9.memory.compaction",
    "TokenGrowthTracker": "harness9.memory.triggers",
    "ToolCallPattern": "harness9.memory.triggers",
    "TopicConfig": "harness9.memory.topics",
    "TopicDetector": "harness9.memory.topics",
    "TopicSegment": "harness9.memory.topics",
    "TriggerInfo": "harness9.memory.triggers",
    "TriggerInfoProvider": "harness9.memory.triggers",
    "TriggerRegistry": "harness9.memory.triggers",
    "build_trigger_info": "harness9.memory.triggers",
    "build_view": "harness9.memory.view",
    "checkpoint_for": "harness9.memory.view",
    "classify_pattern": "harness9.memory.triggers",
    "density_score": "harness9.memory.eviction",
    "estimate_message_tokens": "harness9.memory.tokens",
    "estimate_tokens": "harness9.memory.tokens",
    "estimate_tool_tokens": "harness9.memory.tokens",
    "evict_by_density": "harness9.memory.eviction",
    "extract_fingerprint": "harness9.memory.fingerprint",
    "find_cut": "harness9.memory.compaction",
    "format_token_count": "harness9.memory.tokens",
    "is_offload_marker": "harness9.memory.offload",
    "is_session_id": "harness9.memory.store",
    "is_valid_tool_sequence": "harness9.memory.repair",
    "load_view": "harness9.memory.view",
    "marker_compactor": "harness9.memory.fingerprint",
    "message_bytes": "harness9.memory.tokens",
    "open_manager": "harness9.memory.store",
    "repair_orphaned_tool_pairs": "harness9.memory.repair",
    "repair_summary": "harness9.memory.fingerprint",
    "structured_summary": "harness9.memory.fingerprint",
    "validate_markers": "harness9.memory.fingerprint",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # static analysers see the real imports
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
