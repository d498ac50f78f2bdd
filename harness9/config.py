"""Where things live and which model to talk to, from the environment and flags."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness9.context.pipeline import (
    DEFAULT_TARGET,
    DEFAULT_THRESHOLD,
    STRATEGIES,
    STRATEGY_ALIASES,
    STRATEGY_HYBRID,
)

DEFAULT_MODEL = "openai/gpt-4o-mini"
# The smallest window a user may set: the system prompt and tool definitions alone take
# over 1K tokens, so anything less cannot hold a single turn.
MIN_CONTEXT_WINDOW = 1024
# The largest: ten times the largest window any model offers today; a bigger number is a typo.
MAX_CONTEXT_WINDOW = 10_000_000
_WINDOW_RE = re.compile(r"(\d+(?:\.\d+)?|\.\d+)([km]?)")
_WINDOW_UNITS = {"": 1, "k": 1000, "m": 1_000_000}
ENV_RETRY_MAX_WAIT = "HARNESS9_RETRY_MAX_WAIT"
DEFAULT_RETRY_MAX_WAIT = 60.0


def harness9_home() -> Path:
    """``$HARNESS9_HOME`` or ``~/.harness9``."""
    env = os.environ.get("HARNESS9_HOME")
    return Path(env).expanduser() if env else Path.home() / ".harness9"


def db_path() -> Path:
    return harness9_home() / "sessions.db"


def tighten_home() -> None:
    """Make an existing home private (0700), as the database in it is (0600).

    It holds the conversations, the prompt history and offloaded outputs: a home
    made 0755 by hand or by an older harness9 is tightened, if it is ours; one that
    is missing or someone else's is left alone (the store creates it 0700).
    """
    import stat

    home = harness9_home()
    try:
        st = home.stat()
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077:
            os.chmod(home, stat.S_IMODE(st.st_mode) & 0o700)
    except OSError:
        pass  # absent or unreachable: whoever opens it reports that in their own words


def tool_results_dir() -> Path:
    """Offloaded tool results, one directory per session."""
    return harness9_home() / "offload_store"


@dataclass(slots=True)
class Settings:
    model: str = DEFAULT_MODEL
    api_base: str | None = None
    context_window: int | None = None  # overrides the model map when set
    # The longest wait before a retry, in seconds; a wait the provider asks for (Retry-After,
    # Google's retryDelay, often 30-60 s on a quota) is cut to it.
    retry_max_wait: float = DEFAULT_RETRY_MAX_WAIT

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
            cw = parse_context_window(env_cw, "HARNESS9_CONTEXT_WINDOW")
        if cw is not None:
            # The flag's default is the variable, so either may have given the value.
            check_context_window(cw, "--context-window (HARNESS9_CONTEXT_WINDOW)")
        if model is not None:
            check_model_name(model)
        return cls(
            model=model or os.environ.get("LLM_MODEL") or DEFAULT_MODEL,
            api_base=api_base or os.environ.get("LLM_API_BASE") or None,
            context_window=cw,
            retry_max_wait=_retry_max_wait(),
        )


def check_model_name(name: str, what: str = "--model") -> None:
    """A model name names a model: not empty, and not a provider prefix alone (``openai/``)."""
    from harness9.errors import UsageError

    example = f"e.g. {what} {DEFAULT_MODEL}"
    if not name.strip():
        raise UsageError(f"{what} is empty; name a model, {example}")
    if any(not part.strip() for part in name.split("/")):
        raise UsageError(f"{what} {name!r} names no model after its provider; {example}")


def _window_rule(name: str, got: object) -> str:
    """The one message for every window refused, whatever was wrong with it."""
    return (
        f"{name} takes a number of tokens from 1,024 to 10M, such as 8192, 32k, 32.8K or "
        f"1M (no model works in less; none has more), got {got!r}"
    )


def check_context_window(tokens: int, name: str) -> None:
    """The one rule for a window a user gives (a flag, the environment, /model NAME N)."""
    if not MIN_CONTEXT_WINDOW <= tokens <= MAX_CONTEXT_WINDOW:
        from harness9.errors import UsageError

        raise UsageError(_window_rule(name, tokens))


def parse_context_window(text: str, name: str) -> int:
    """A window as the screen prints it: ``4096``, ``4k``, ``32.8K``, ``1M`` (any case;
    ``_`` and ``,`` group digits), from ``MIN_CONTEXT_WINDOW`` to ``MAX_CONTEXT_WINDOW``."""
    from decimal import Decimal, InvalidOperation

    from harness9.errors import UsageError

    match = _WINDOW_RE.fullmatch(text.strip().replace("_", "").replace(",", "").lower())
    if match is None:
        raise UsageError(_window_rule(name, text))
    try:
        value = Decimal(match.group(1)) * _WINDOW_UNITS[match.group(2)]
    except InvalidOperation:
        raise UsageError(_window_rule(name, text)) from None
    if value != value.to_integral_value():
        raise UsageError(_window_rule(name, text))
    tokens = int(value)
    if not MIN_CONTEXT_WINDOW <= tokens <= MAX_CONTEXT_WINDOW:
        raise UsageError(_window_rule(name, text))
    return tokens


def _retry_max_wait() -> float:
    text = os.environ.get(ENV_RETRY_MAX_WAIT, "").strip()
    if not text:
        return DEFAULT_RETRY_MAX_WAIT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        from harness9.errors import UsageError

        raise UsageError(f"{ENV_RETRY_MAX_WAIT} must be seconds between 0 and 3600, got {text!r}")
    return value


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
        raise ConfigError(
            f"cannot read {target}: {exc.strerror or exc}; check that {target.parent} is a "
            "directory you can read, or point HARNESS9_HOME elsewhere"
        ) from exc
    try:
        cfg = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{target} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message already ends "(at line 3, column 5)".
        raise ConfigError(f"{target} is not valid TOML: {exc}") from None
    validate_config(cfg, target)
    return cfg


def validate_config(cfg: dict[str, Any], where: Path) -> None:
    """Every value the file sets, checked once as it is read: every command that reads the
    file (chat, compact, sessions ...) refuses the same mistakes with the same line."""
    check_top_level(cfg, where)
    retention_days(cfg, where)
    file_context_options(cfg, where)
    _tool_options(cfg, where)
    _mcp_options(cfg, where)


# What config.toml may hold at its top level: keys, then [tables]. A misspelt name would
# otherwise be ignored without a word, the setting silently left at its default.
TOP_LEVEL_KEYS = ("retention_days", "database_url")
TOP_LEVEL_TABLES = ("compaction", "offload", "topics", "tools", "provider", "subagents", "mcp")


def check_top_level(cfg: dict[str, Any], where: Path) -> None:
    from harness9.errors import ConfigError

    for name, value in cfg.items():
        if name in TOP_LEVEL_KEYS or name in TOP_LEVEL_TABLES:
            continue
        known = ", ".join([*TOP_LEVEL_KEYS, *(f"[{t}]" for t in TOP_LEVEL_TABLES)])
        what = f"table [{name}]" if isinstance(value, dict) else f"key {name}"
        raise ConfigError(f"unknown {what} in {where} (known: {known})")


def retention_days(cfg: Mapping[str, Any], source: Path | None = None) -> int:
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


# -- which session store: --database-url, HARNESS9_DATABASE_URL, config.toml -----------------

DATABASE_URL_ENV = "HARNESS9_DATABASE_URL"
DATABASE_URL_KEY = "database_url"
# Set by the CLI's --database-url for this process (None: not given).
_flag_database_url: str | None = None


def use_database_url(url: str | None) -> None:
    """Record ``--database-url`` for this process (the CLI calls this once per command)."""
    global _flag_database_url
    _flag_database_url = url or None


def database_url(cfg: Mapping[str, Any] | None = None) -> str | None:
    """The PostgreSQL URL to use, or None for the SQLite file. Bad values: one-line errors."""
    from harness9.errors import ConfigError, UsageError
    from harness9.store.backend import is_database_url
    from harness9.store.backend import redacted_url as _redacted

    flag = _flag_database_url
    if flag is not None:
        if not is_database_url(flag):
            raise UsageError(f"--database-url must be a postgresql:// URL, got {_redacted(flag)!r}")
        return flag.strip()
    env = os.environ.get(DATABASE_URL_ENV, "").strip()
    if env:
        if not is_database_url(env):
            raise ConfigError(
                f"{DATABASE_URL_ENV} must be a postgresql:// URL, got {_redacted(env)!r}"
            )
        return env
    if cfg is None:
        # No file (or no home directory at all): nothing to read, and nothing to complain
        # about here; the SQLite store reports a broken home itself, in its own words.
        try:
            present = config_path().is_file()
        except OSError:  # a home you cannot search (EACCES): the SQLite store names it
            present = False
        if not present:
            return None
        cfg = load_config_file()
    value = cfg.get(DATABASE_URL_KEY)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not is_database_url(value):
        shown = _redacted(value) if isinstance(value, str) else value
        raise ConfigError(
            f"{DATABASE_URL_KEY} in {config_path()} must be a postgresql:// URL, got {shown!r}"
        )
    return value.strip()


def store_location(cfg: Mapping[str, Any] | None = None) -> str | Path:
    """Where this command's sessions are: the PostgreSQL URL, else the SQLite file (its
    home made private first when it exists, as the database in it is)."""
    url = database_url(cfg)
    if url is not None:
        return url
    tighten_home()
    return db_path()


# -- context-management knobs: config.toml, then environment, then flags --------------------


def known_strategy(name: str) -> bool:
    """A name in the strategy table (harness9.context.pipeline.STRATEGIES) or an alias."""
    return name in STRATEGIES or name in STRATEGY_ALIASES


@dataclass(slots=True)
class ContextOptions:
    """Every compaction/offload/topic knob, resolved. Defaults are the documented ones."""

    strategy: str = STRATEGY_HYBRID
    auto: bool = True  # false: never compact behind the user's back; overflow says "/compact"
    threshold: float = DEFAULT_THRESHOLD  # share of the window at which compaction starts
    target: float = (
        DEFAULT_TARGET  # share of the window hybrid compacts down to (below the threshold)
    )
    recall: bool = True  # checkpoints index folded tool results; history_search is offered
    summary_model: str | None = None  # a cheaper model for summaries; None: the chat model
    smart_triggers: bool = True  # compact early when growth predicts crossing the threshold
    cooldown_iterations: int = 3
    lookahead_iterations: int = 2
    # Summaries prepared in the background before the threshold (docs/prepared-summaries.md):
    # from ``prepare_at`` of the window (not before the compaction target), or, with
    # ``prepare_at`` 0, when growth forecasts the threshold within ``prepare_lookahead``
    # model calls. The default share starts early enough for a burst of large tool results.
    prepare_ahead: bool = True
    prepare_lookahead: int = 12
    prepare_at: float = 0.45
    # Messages a request carries at most: past it, old tool groups fold into the recall
    # index without a model call (MessageBound, context/pipeline.py); 0: tokens only.
    max_messages: int = 400
    offload: bool = True
    offload_max_result_tokens: int = 2000
    offload_max_result_bytes: int = 10240
    offload_cleanup_age_days: int = 7
    enable_topic_isolation: bool = False  # experimental
    topic_min_segment_size: int = 3
    topic_similarity_threshold: float = 0.3
    # Tokens the model's reply may take (the max_tokens sent; see ProviderOptions): the
    # compaction threshold never leaves less than this free in the window.
    output_reserve: int = 0

    def threshold_tokens(self, context_window: int) -> int:
        """The context size at which compaction starts: ``threshold`` of the window, lowered
        when needed so that a reply of ``output_reserve`` tokens still fits."""
        share = int(context_window * self.threshold)
        return max(1, min(share, context_window - self.output_reserve))


@dataclass(frozen=True, slots=True)
class Range:
    """The values a number knob accepts; ``describe`` is what an error says."""

    low: float
    high: float | None = None  # None: no upper bound
    open_ends: bool = False  # both ends excluded (a share strictly between them)

    def __contains__(self, value: float) -> bool:
        if self.open_ends:
            return self.low < value and (self.high is None or value < self.high)
        return self.low <= value and (self.high is None or value <= self.high)

    def describe(self) -> str:
        if self.high is None:
            return f"at least {self.low:g}"
        between = "between" if self.open_ends else "from"
        joint = "and" if self.open_ends else "to"
        return f"{between} {self.low:g} {joint} {self.high:g}"


# (section, key in the file) -> (field, type, allowed values: a Range, a check, or None)
_KNOBS: dict[tuple[str, str], tuple[str, type, Any]] = {
    ("compaction", "strategy"): ("strategy", str, known_strategy),
    ("compaction", "auto"): ("auto", bool, None),
    ("compaction", "threshold"): ("threshold", float, Range(0.1, 0.95)),
    ("compaction", "target"): ("target", float, Range(0.05, 0.95)),
    ("compaction", "recall"): ("recall", bool, None),
    ("compaction", "model"): ("summary_model", str, lambda v: bool(v.strip())),
    ("compaction", "smart_triggers"): ("smart_triggers", bool, None),
    ("compaction", "cooldown_iterations"): ("cooldown_iterations", int, Range(0, 1000)),
    ("compaction", "lookahead_iterations"): ("lookahead_iterations", int, Range(0, 100)),
    ("compaction", "max_messages"): ("max_messages", int, lambda v: v == 0 or v >= 20),
    ("compaction", "prepare_ahead"): ("prepare_ahead", bool, None),
    ("compaction", "prepare_lookahead"): ("prepare_lookahead", int, Range(1, 1000)),
    ("compaction", "prepare_at"): ("prepare_at", float, lambda v: v == 0 or 0.05 <= v <= 0.95),
    ("offload", "enabled"): ("offload", bool, None),
    ("offload", "max_result_tokens"): ("offload_max_result_tokens", int, Range(100)),
    ("offload", "max_result_bytes"): ("offload_max_result_bytes", int, Range(400)),
    ("offload", "cleanup_age_days"): ("offload_cleanup_age_days", int, Range(1)),
    ("topics", "enable_topic_isolation"): ("enable_topic_isolation", bool, None),
    ("topics", "topic_min_segment_size"): ("topic_min_segment_size", int, Range(1)),
    ("topics", "topic_similarity_threshold"): (
        "topic_similarity_threshold",
        float,
        Range(0.0, 1.0, open_ends=True),
    ),
}
# What a knob checked by a function (not a Range) must be, as an error says it.
_CHECK_WORDS = {
    "summary_model": "a model name, not empty",
    "max_messages": "0 (off) or at least 20",
    "prepare_at": "0 (the forecast) or a share of the window from 0.05 to 0.95",
}
# Environment overrides for the knobs people change per run.
_ENV_KNOBS = {
    "HARNESS9_COMPACTION_STRATEGY": ("compaction", "strategy"),
    "HARNESS9_AUTO_COMPACT": ("compaction", "auto"),
    "HARNESS9_COMPACTION_THRESHOLD": ("compaction", "threshold"),
    "HARNESS9_COMPACTION_TARGET": ("compaction", "target"),
    "HARNESS9_MAX_MESSAGES": ("compaction", "max_messages"),
    "HARNESS9_RECALL": ("compaction", "recall"),
    "HARNESS9_SUMMARY_MODEL": ("compaction", "model"),
    "HARNESS9_OFFLOAD": ("offload", "enabled"),
    "HARNESS9_PREPARE_AHEAD": ("compaction", "prepare_ahead"),
}


def context_options(
    cfg: dict[str, Any] | None = None,
    *,
    strategy: str | None = None,
    summary_model: str | None = None,
    auto: bool | None = None,
) -> ContextOptions:
    """Resolve the knobs: config.toml < environment < flags. Bad values are one-line ConfigErrors."""
    cfg = load_config_file() if cfg is None else cfg
    opts = file_context_options(cfg, config_path())
    for env, (section, key) in _ENV_KNOBS.items():
        raw = os.environ.get(env)
        if raw is not None and raw.strip():
            _set(opts, section, key, _parse_env(raw.strip(), _KNOBS[(section, key)][1], env), env)
    for flag, value, key in (
        ("--strategy", strategy, "strategy"),
        ("--summary-model", summary_model, "model"),
        ("--auto-compact/--no-auto-compact", auto, "auto"),
    ):
        if value is not None:
            _set(opts, "compaction", key, value, flag)
    _check_target_below_threshold(opts, "HARNESS9_COMPACTION_TARGET or compaction.target")
    opts.strategy = STRATEGY_ALIASES.get(opts.strategy, opts.strategy)
    return opts


def file_context_options(cfg: dict[str, Any], where: Path) -> ContextOptions:
    """The knobs as the config file alone sets them (defaults for the rest)."""
    from harness9.errors import ConfigError

    opts = ContextOptions()
    for section in ("compaction", "offload", "topics"):
        table = cfg.get(section, {})
        if not isinstance(table, dict):
            raise ConfigError(f"[{section}] in {where} must be a table")
        for key, value in table.items():
            if (section, key) not in _KNOBS:
                known = ", ".join(k for s, k in _KNOBS if s == section)
                raise ConfigError(f"unknown key {section}.{key} in {where} (known: {known})")
            _set(opts, section, key, value, f"{section}.{key} in {where}")
    _check_target_below_threshold(opts, f"compaction.target in {where}")
    return opts


def _check_target_below_threshold(opts: ContextOptions, where: str) -> None:
    """Compaction down to a target at or above the threshold would start again at once."""
    from harness9.errors import ConfigError

    if opts.target >= opts.threshold:
        raise ConfigError(
            f"{where} must be below the compaction threshold ({opts.target:g} is not below "
            f"{opts.threshold:g}): compaction compacts down to the target"
        )


def _set(opts: ContextOptions, section: str, key: str, value: Any, where: str) -> None:
    from harness9.errors import ConfigError, UsageError

    # A bad flag is a usage error (exit 2); a bad file or environment value is exit 1.
    error = UsageError if where.startswith("--") else ConfigError
    field, kind, check = _KNOBS[(section, key)]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is not bool and isinstance(value, bool) or not isinstance(value, kind):
        raise error(f"{where} must be a {kind.__name__}, got {value!r}")
    if isinstance(check, Range):
        if not isinstance(value, int | float) or value not in check:
            raise error(f"{where} must be {check.describe()}, got {value!r}")
    elif check is not None and not check(value):
        if field == "strategy":
            names = ", ".join(STRATEGIES)
            raise error(f"{where} must be one of {names}, got {value!r}")
        raise error(f"{where} must be {_CHECK_WORDS.get(field, 'set')}, got {value!r}")
    setattr(opts, field, value)


def _parse_env(raw: str, kind: type, name: str) -> Any:
    from harness9.errors import ConfigError

    if kind is bool:
        lowered = raw.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name} must be true or false, got {raw!r}")
    try:
        return kind(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a {kind.__name__}, got {raw!r}") from None


# -- [tools] in config.toml -----------------------------------------------------------------


@dataclass(slots=True)
class ToolOptions:
    # Shell commands that never need asking, e.g. ("ls", "cat", "git status"); a listed
    # command with plain arguments counts, one with ; | > $( ) or globs never does.
    auto_approve: tuple[str, ...] = ()


def tool_options(cfg: dict[str, Any] | None = None) -> ToolOptions:
    """``[tools]`` from the config file; bad values are one-line ConfigErrors."""
    cfg = load_config_file() if cfg is None else cfg
    return _tool_options(cfg, config_path())


def _tool_options(cfg: dict[str, Any], where: Path) -> ToolOptions:
    from harness9.errors import ConfigError

    table = cfg.get("tools", {})
    if not isinstance(table, dict):
        raise ConfigError(f"[tools] in {where} must be a table")
    unknown = sorted(set(table) - {"auto_approve"})
    if unknown:
        raise ConfigError(f"unknown key tools.{unknown[0]} in {where} (known: auto_approve)")
    value = table.get("auto_approve", [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(
            f'tools.auto_approve in {where} must be a list of commands, e.g. ["ls", "git status"]'
        )
    return ToolOptions(auto_approve=tuple(" ".join(v.split()) for v in value))


# -- [provider] in config.toml: what each request asks of the model ---------------------------

CACHE_TTLS = ("5m", "1h")
# Output tokens asked for when the model allows more: a longer reply is rare in agent work
# and the window it reserves is taken from the conversation.
DEFAULT_MAX_OUTPUT_TOKENS = 32_000


@dataclass(slots=True)
class ProviderOptions:
    # Lifetime of the prompt-cache entries harness9 asks for (Anthropic's "5m" or "1h";
    # 1-hour writes cost 2x the input price instead of 1.25x).
    cache_ttl: str = "5m"
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS  # a cap: never above the model's limit


_PROVIDER_ENV = {
    "cache_ttl": "HARNESS9_CACHE_TTL",
    "max_output_tokens": "HARNESS9_MAX_OUTPUT_TOKENS",
}


def provider_options(
    cfg: dict[str, Any] | None = None,
    *,
    cache_ttl: str | None = None,
    max_output_tokens: int | None = None,
) -> ProviderOptions:
    """``[provider]`` from the config file < environment < flags; bad values are one line."""
    from harness9.errors import ConfigError, UsageError

    cfg = load_config_file() if cfg is None else cfg
    where = config_path()
    table = cfg.get("provider", {})
    if not isinstance(table, dict):
        raise ConfigError(f"[provider] in {where} must be a table")
    unknown = sorted(set(table) - set(_PROVIDER_ENV))
    if unknown:
        known = ", ".join(_PROVIDER_ENV)
        raise ConfigError(f"unknown key provider.{unknown[0]} in {where} (known: {known})")
    values: dict[str, tuple[Any, str, type[Exception]]] = {
        k: (v, f"provider.{k} in {where}", ConfigError) for k, v in table.items()
    }
    for key, env in _PROVIDER_ENV.items():
        raw = os.environ.get(env, "").strip()
        if raw:
            parsed: Any = raw if key == "cache_ttl" else _parse_env(raw, int, env)
            values[key] = (parsed, env, ConfigError)
    for key, flag, value in (
        ("cache_ttl", "--cache-ttl", cache_ttl),
        ("max_output_tokens", "--max-output-tokens", max_output_tokens),
    ):
        if value is not None:
            values[key] = (value, flag, UsageError)
    opts = ProviderOptions()
    for key, (value, source, error) in values.items():
        if key == "cache_ttl" and value not in CACHE_TTLS:
            raise error(f"{source} must be one of {', '.join(CACHE_TTLS)}, got {value!r}")
        if key == "max_output_tokens" and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise error(f"{source} must be a positive whole number of tokens, got {value!r}")
        setattr(opts, key, value)
    return opts


# -- [subagents] in config.toml: the `task` tool ---------------------------------------------


@dataclass(slots=True)
class SubAgentOptions:
    """How the `task` tool runs sub-agents (harness9.engine.subagents). Defaults documented."""

    enabled: bool = True  # offer the `task` tool at all
    max_model_calls: int = 30  # per sub-agent run
    max_tokens: int = 1_000_000  # input + output tokens billed, per sub-agent run
    max_seconds: float = 600.0  # wall time per sub-agent run
    parallel: int = 4  # sub-agents of one reply running at the same time
    nested: bool = False  # true: a sub-agent may run sub-agents too (one more level only)


_SUBAGENT_KNOBS: dict[str, tuple[type, Any]] = {
    "enabled": (bool, None),
    "max_model_calls": (int, lambda v: 1 <= v <= 1000),
    "max_tokens": (int, lambda v: v >= 1000),
    "max_seconds": (float, lambda v: v >= 1),
    "parallel": (int, lambda v: 1 <= v <= 16),
    "nested": (bool, None),
}


def subagent_options(cfg: dict[str, Any] | None = None) -> SubAgentOptions:
    """``[subagents]`` from the config file; bad values are one-line ConfigErrors."""
    from harness9.errors import ConfigError

    cfg = load_config_file() if cfg is None else cfg
    where = config_path()
    table = cfg.get("subagents", {})
    if not isinstance(table, dict):
        raise ConfigError(f"[subagents] in {where} must be a table")
    opts = SubAgentOptions()
    for key, value in table.items():
        if key not in _SUBAGENT_KNOBS:
            known = ", ".join(_SUBAGENT_KNOBS)
            raise ConfigError(f"unknown key subagents.{key} in {where} (known: {known})")
        kind, check = _SUBAGENT_KNOBS[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if (kind is not bool and isinstance(value, bool)) or not isinstance(value, kind):
            raise ConfigError(
                f"subagents.{key} in {where} must be a {kind.__name__}, got {value!r}"
            )
        if check is not None and not check(value):
            raise ConfigError(f"subagents.{key} in {where} has an out-of-range value {value!r}")
        setattr(opts, key, value)
    return opts


# -- [mcp] in config.toml: MCP tool servers ---------------------------------------------------

MCP_DEFER = ("auto", "always", "never")
MCP_LOADED = ("auto", "conversation", "tools")
MCP_DEFAULT_TIMEOUT = 60.0  # seconds a server has to start, and each call to answer
_MCP_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_MCP_SERVER_KEYS = ("command", "args", "env", "cwd", "url", "headers", "enabled", "timeout")
_MCP_SERVER_KEYS_TOML = (*_MCP_SERVER_KEYS, "auto_approve")


@dataclass(slots=True, frozen=True)
class McpServer:
    """One MCP server: a program started over stdio (``command``) or a Streamable HTTP
    ``url``. ``source`` is "config" (config.toml) or ".mcp.json" (the working directory's,
    which runs only once approved)."""

    name: str
    source: str = "config"
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = ""
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    enabled: bool = True
    timeout: float = MCP_DEFAULT_TIMEOUT
    auto_approve: bool = False  # its tools run without asking (config.toml only)
    # What an approval of a .mcp.json server is for: a digest of its entry as the file writes
    # it, before ${VAR} expansion ("" for config.toml's; harness9.tools.mcp.project).
    approval_key: str = ""
    # Why the entry cannot run ("" when it can): a .mcp.json entry that is wrong is kept as a
    # server that is never started, so that it is reported and the file's others still run.
    invalid: str = ""

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"


@dataclass(slots=True, frozen=True)
class McpOptions:
    servers: tuple[McpServer, ...] = ()
    # When the MCP tools' definitions go behind `tool_search`: past ``defer_share`` of the
    # window ("auto"), always, or never.
    defer: str = "auto"
    defer_share: float = 0.10
    # Where definitions tool_search found go: "auto" (by the provider's caching), "conversation"
    # (in the search's result) or "tools" (added to the tools list).
    loaded: str = "auto"


def mcp_options(cfg: dict[str, Any] | None = None) -> McpOptions:
    """``[mcp]`` and ``[mcp.servers.NAME]`` from the config file; bad values are ConfigErrors."""
    cfg = load_config_file() if cfg is None else cfg
    return _mcp_options(cfg, config_path())


def _mcp_options(cfg: dict[str, Any], where: Path) -> McpOptions:
    from harness9.errors import ConfigError

    table = cfg.get("mcp", {})
    if not isinstance(table, dict):
        raise ConfigError(f"[mcp] in {where} must be a table")
    unknown = sorted(set(table) - {"servers", "defer", "defer_share", "loaded"})
    if unknown:
        raise ConfigError(
            f"unknown key mcp.{unknown[0]} in {where} (known: servers, defer, defer_share, loaded)"
        )
    loaded = table.get("loaded", "auto")
    if loaded not in MCP_LOADED:
        raise ConfigError(f"mcp.loaded in {where} must be one of: {', '.join(MCP_LOADED)}")
    defer = table.get("defer", "auto")
    if defer not in MCP_DEFER:
        raise ConfigError(f"mcp.defer in {where} must be one of: {', '.join(MCP_DEFER)}")
    share = table.get("defer_share", 0.10)
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1:
        raise ConfigError(f"mcp.defer_share in {where} must be a number from 0 to 1, e.g. 0.1")
    servers = table.get("servers", {})
    if not isinstance(servers, dict):
        raise ConfigError(f"[mcp.servers] in {where} must be a table of [mcp.servers.NAME]")
    parsed = tuple(
        mcp_server(name, entry, source="config", where=f"mcp.servers.{name} in {where}")
        for name, entry in servers.items()
    )
    return McpOptions(parsed, defer, float(share), loaded)


def mcp_server(name: str, entry: Any, *, source: str, where: str) -> McpServer:
    """One server's entry (a config table or a .mcp.json object), checked; ConfigError names
    ``where`` and what is wrong."""
    from harness9.errors import ConfigError

    if not _MCP_NAME_RE.match(name):
        raise ConfigError(f"{where}: a server name is 1-32 letters, digits, _ or -")
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table")
    known = _MCP_SERVER_KEYS_TOML if source == "config" else (*_MCP_SERVER_KEYS, "type")
    unknown = sorted(set(entry) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]} (known: {', '.join(known)})")
    command, url = entry.get("command", ""), entry.get("url", "")
    if not isinstance(command, str) or not isinstance(url, str) or bool(command) == bool(url):
        raise ConfigError(f"{where}: set either command (a program) or url (an HTTP server)")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}: args must be a list of strings")
    env, headers = _str_table(entry, "env", where), _str_table(entry, "headers", where)
    cwd, enabled = entry.get("cwd", ""), entry.get("enabled", True)
    timeout, auto = entry.get("timeout", MCP_DEFAULT_TIMEOUT), entry.get("auto_approve", False)
    if not isinstance(cwd, str) or not isinstance(enabled, bool) or not isinstance(auto, bool):
        raise ConfigError(f"{where}: cwd is a string; enabled and auto_approve are true or false")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ConfigError(f"{where}: timeout must be a positive number of seconds")
    return McpServer(
        name, source, command, tuple(args), env, cwd, url, headers, enabled, float(timeout), auto
    )


def _str_table(entry: dict[str, Any], key: str, where: str) -> tuple[tuple[str, str], ...]:
    from harness9.errors import ConfigError

    value = entry.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where}: {key} must be a table of strings")
    return tuple((str(k), v) for k, v in value.items())
