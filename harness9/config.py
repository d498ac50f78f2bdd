"""Where things live and which model to talk to, from the environment and flags."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODEL = "openai/gpt-4o-mini"


def harness9_home() -> Path:
    """``$HARNESS9_HOME`` or ``~/.harness9``."""
    env = os.environ.get("HARNESS9_HOME")
    return Path(env).expanduser() if env else Path.home() / ".harness9"


def db_path() -> Path:
    return harness9_home() / "sessions.db"


def tool_results_dir() -> Path:
    """Offloaded tool results, one directory per session."""
    return harness9_home() / "offload_store"


@dataclass(slots=True)
class Settings:
    model: str = DEFAULT_MODEL
    api_base: str | None = None
    context_window: int | None = None  # overrides the model map when set

    @classmethod
    def from_env(
        cls,
        *,
        model: str | None = None,
        api_base: str | None = None,
        context_window: int | None = None,
    ) -> Settings:
        """Flags win over the environment, which wins over the defaults."""
        env_cw = os.environ.get("HARNESS9_CONTEXT_WINDOW")
        cw = context_window
        if cw is None and env_cw:
            cw = parse_positive_int(env_cw, "HARNESS9_CONTEXT_WINDOW")
        return cls(
            model=model or os.environ.get("LLM_MODEL") or DEFAULT_MODEL,
            api_base=api_base or os.environ.get("LLM_API_BASE") or None,
            context_window=cw,
        )


def parse_positive_int(text: str, name: str) -> int:
    from harness9.errors import UsageError

    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        raise UsageError(f"{name} must be a whole number of tokens, got {text!r}") from None
    if value <= 0:
        raise UsageError(f"{name} must be positive, got {value}")
    return value
