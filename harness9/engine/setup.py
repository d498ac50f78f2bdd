"""Wiring shared by ``chat`` and ``compact``: one way to build the compactor and the engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness9.errors import UsageError
from harness9.memory.compaction import SlidingWindowCompactor, TokenBudgetCompactor
from harness9.memory.summarization import SummarizationCompactor

STRATEGIES = ("summarize", "budget", "window")


def build_compactor(strategy: str, summarizer: Any, context_window: int) -> Any:
    """The compactor for a strategy name; ``summarize`` falls back to ``budget`` on errors."""
    if strategy == "summarize":
        return SummarizationCompactor.for_context_window(summarizer, context_window)
    if strategy == "budget":
        return TokenBudgetCompactor.for_context_window(context_window)
    if strategy == "window":
        return SlidingWindowCompactor()
    raise UsageError(
        f"unknown compaction strategy {strategy!r}; choose one of: {', '.join(STRATEGIES)}"
    )


def resolve_workdir(path: Path | None) -> Path:
    workdir = (path or Path.cwd()).expanduser()
    if not workdir.is_dir():
        raise UsageError(f"--workdir {workdir} is not a directory")
    return workdir.resolve()
