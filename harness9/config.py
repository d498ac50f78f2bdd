"""Where things live and which model to talk to, from the environment and flags."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


# -- $HARNESS9_HOME/config.toml ------------------------------------------------------------

MAX_RETENTION_DAYS = 100_000  # beyond any real use; keeps the cutoff arithmetic finite


def config_path() -> Path:
    return harness9_home() / "config.toml"


def load_config_file(path: Path | None = None) -> dict[str, Any]:
    """The parsed config file (default ``$HARNESS9_HOME/config.toml``); {} when there is none.

    A malformed file is a ConfigError of one line naming the file, line and column.
    """
    import tomllib

    from harness9.errors import ConfigError

    target = path if path is not None else config_path()
    try:
        raw = target.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {target}: {exc.strerror or exc}") from exc
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{target} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message already ends "(at line 3, column 5)".
        raise ConfigError(f"{target} is not valid TOML: {exc}") from None


def retention_days(cfg: dict[str, Any], source: Path | None = None) -> int:
    """``retention_days`` from a loaded config: 0 (the default) means keep everything.

    A bad value is a ConfigError naming the key and ``source`` (default: the config file).
    """
    from harness9.errors import ConfigError

    where = source if source is not None else config_path()
    value = cfg.get("retention_days", 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"retention_days in {where} must be a whole number of days, got {value!r}"
        )
    if not 0 <= value <= MAX_RETENTION_DAYS:
        raise ConfigError(
            f"retention_days in {where} must be from 0 (off) to {MAX_RETENTION_DAYS}, got {value}"
        )
    return value
