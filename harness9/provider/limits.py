"""How many tokens a model takes in and puts out.

Lookup order: an explicit override (the ``--context-window`` flag), then
``$HARNESS9_CONTEXT_WINDOW``, then litellm's model map with routing prefixes
stripped one at a time (``openrouter/openai/gpt-4o`` -> ``openai/gpt-4o`` ->
``gpt-4o``), then the seed's family table (§7.2), then a guess: 256K for a hosted
model, 32K for one on a local server (``LOCAL_GUESS``).

The model map is read straight from the JSON file litellm ships rather than
through ``litellm.get_model_info``: importing litellm costs seconds, and
``compact --dry-run`` or the token line must not pay that just to learn a
window size. Nothing here prints, and only ``server_limits`` touches the
network: once, when a chat starts or switches to a local model (an Ollama one, or one no
table knows).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness9.config import parse_context_window
from harness9.errors import UsageError
from harness9.provider.ollama import is_ollama, server_window

ENV_CONTEXT_WINDOW = "HARNESS9_CONTEXT_WINDOW"
MODEL_MAP_FILE = "model_prices_and_context_window_backup.json"


@dataclass(slots=True, frozen=True)
class ModelLimits:
    context_tokens: int
    output_tokens: int


# The seed's answer for a hosted model nobody knows.
DEFAULT_LIMITS = ModelLimits(context_tokens=256_000, output_tokens=8_192)

# The guess for a model on a local server (an --api-base, or a provider that is one): the
# window it was started with, which is often far below what the model could take. Servers
# run 4K by default on small machines (Ollama under 24 GiB of VRAM, LM Studio), which
# leaves a session no room at all, or 32K (Ollama's next tier) or the model's trained
# window (llama-server's -c 0, vLLM), 32K for the Qwen and Mistral families. 32K is the
# smallest of those in which a session is useful: one default-size read (2000 lines,
# ~20K tokens) plus the ~1K of system prompt and tools stays under the 80 % threshold.
# Smaller than the real window costs early compaction; larger costs a refused request.
LOCAL_GUESS = ModelLimits(context_tokens=32_768, output_tokens=8_192)

# Providers whose server is local by nature, whatever --api-base says: litellm's default
# base for each is a localhost address (hosted_vllm has none: it needs one given).
LOCAL_PROVIDERS = frozenset(
    {"ollama", "ollama_chat", "lemonade", "lm_studio", "llamafile", "hosted_vllm"}
)

# The seed's family table (§7.2), matched against the last path segment of the name.
# First match wins, so more specific patterns come first.
FAMILY_LIMITS: tuple[tuple[re.Pattern[str], ModelLimits], ...] = tuple(
    (re.compile(pattern), ModelLimits(ctx, out))
    for pattern, ctx, out in (
        # Anthropic's model overview: Opus 4/4.1 write at most 32K, Sonnet 4 and the
        # 4.5 family 64K (litellm's map lacks claude-sonnet-4-20250514, the README's model).
        (r"^claude-opus-4(?:-[01])?(?:-\d{8})?$", 200_000, 32_000),
        (r"^claude-(?:(?:opus|sonnet|haiku)-)?4", 200_000, 64_000),
        (r"^claude", 200_000, 8_192),
        (r"^gpt-4\.5", 128_000, 16_384),
        (r"^gpt-4o", 128_000, 16_384),
        (r"^o[134](?:-|$)", 200_000, 100_000),
        (r"^gemini-(?:[2-9]|\d{2,})", 1_048_576, 8_192),
        (r"^deepseek", 64_000, 8_192),
        (r"^qwen", 128_000, 8_192),
    )
)


def get_model_limits(
    name: str, *, override: int | None = None, api_base: str | None = None
) -> ModelLimits:
    """The model's window; ``override`` (a flag) and then the environment win over any table.
    ``api_base`` says where the model is served: a guess for one on a local server is
    ``LOCAL_GUESS``, not the hosted default (see ``served_locally``)."""
    if override is None:
        env = os.environ.get(ENV_CONTEXT_WINDOW, "").strip()
        if env:
            override = parse_context_window(env, ENV_CONTEXT_WINDOW)
    limits = _lookup(name.strip(), served_locally(name, api_base))
    if override is not None:
        if override <= 0:
            raise UsageError(f"context window override must be positive, got {override}")
        # A local server's window is what the user says; output cannot exceed it.
        limits = ModelLimits(override, min(limits.output_tokens, override))
    return limits


def output_budget(limits: ModelLimits, cap: int) -> int:
    """The ``max_tokens`` a request asks for: the model's output limit, at most ``cap``
    (the user's setting) and at most a fifth of the window, so that the compaction
    threshold's default 80 % still leaves the reply its room (ContextOptions.threshold_tokens)
    and a local server never sees a prompt plus reply larger than its context."""
    return max(1, min(limits.output_tokens, cap, limits.context_tokens // 5))


def chat_limits(
    name: str, api_base: str | None, *, override: int | None = None
) -> tuple[ModelLimits, str]:
    """The window a chat uses for ``name`` and where it comes from: ``"override"`` (the
    flag or the environment), ``"server"`` (the model's local server reported it), or
    ``window_source``'s ``"map"``, ``"family"`` or ``"default"``.

    The server is asked when no override is given and it may know better than the tables
    (see ``server_would_answer``).
    """
    limits = get_model_limits(name, override=override, api_base=api_base)
    if override is not None or os.environ.get(ENV_CONTEXT_WINDOW, "").strip():
        return limits, "override"
    source = window_source(name)
    if server_would_answer(name):
        reported = server_limits(name, api_base)
        if reported is not None:
            return reported, "server"
    return limits, source


def server_would_answer(name: str, *, override: int | None = None) -> bool:
    """Whether ``chat_limits`` would ask ``name``'s server: an Ollama model always (litellm's
    map has the model's window, the server the one it runs), another local server's only
    for a model the map does not know."""
    if override is not None or os.environ.get(ENV_CONTEXT_WINDOW, "").strip():
        return False
    return asks_server(name) and (is_ollama(name) or window_source(name) != "map")


class WindowProbe:
    """``server_limits`` on a background thread: started once the first prompt is on the
    screen, so a chat on a local model shows its prompt without waiting for litellm's
    import and the server; ``result`` waits for the answer (bounded by the timeout)."""

    def __init__(self, name: str, api_base: str | None) -> None:
        self.name, self.api_base = name, api_base
        self._answer: list[ModelLimits | None] = []
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        from harness9.provider.llm import preload_in_background

        if self._thread is None:
            preload_in_background()  # the chat needs litellm next; Ollama's answer does not
            self._thread = threading.Thread(
                target=lambda: self._answer.append(server_limits(self.name, self.api_base)),
                name="harness9-window-probe-start",
                daemon=True,
            )
            self._thread.start()

    def result(self) -> ModelLimits | None:
        """The reported window, or None (not reported, or the server did not answer)."""
        self.start()
        assert self._thread is not None
        self._thread.join()
        return self._answer[0] if self._answer else None


def routing_candidates(name: str) -> list[str]:
    """``a/b/c`` -> ``["a/b/c", "b/c", "c"]``: each routing prefix stripped in turn."""
    parts = [p for p in name.split("/") if p]
    return ["/".join(parts[i:]) for i in range(len(parts))]


def window_source(name: str) -> str:
    """Where the table lookup found ``name``'s window (overrides aside).

    ``"map"``: litellm's model map; ``"family"``: the seed's family table (a
    name-based estimate); ``"default"``: nobody knows the model, the window is a guess.
    """
    return _lookup_with_source(name.strip())[1]


def served_locally(name: str, api_base: str | None) -> bool:
    """Whether ``name`` runs on a local server, whose window is whatever it was started
    with: an --api-base is given, or the provider is one (``LOCAL_PROVIDERS``). A gateway
    given as --api-base counts too; its user is told to set the window (chat's warning)."""
    provider, sep, _ = name.strip().partition("/")
    local_provider = bool(sep) and provider.lower() in LOCAL_PROVIDERS
    return bool(api_base and api_base.strip()) or local_provider


# Providers whose server can be asked for a model's window: Ollama's POST {api_base}/api/show
# (asked directly, provider/ollama.py) and Lemonade's GET {api_base}/models/{name}, whose
# ctx_size ``litellm.get_model_info(name, api_base=...)`` reads. For other providers,
# OpenAI-compatible servers (llama.cpp, vLLM) among them, there is no call that asks.
SERVER_WINDOW_PROVIDERS = frozenset({"ollama", "ollama_chat", "lemonade"})
# A local server answers in milliseconds; one that does not must not hold up start-up.
SERVER_TIMEOUT_S = 3.0


def asks_server(name: str) -> bool:
    """True when litellm can ask ``name``'s server for its window (the provider prefix says)."""
    provider, sep, _ = name.strip().partition("/")
    return bool(sep) and provider.lower() in SERVER_WINDOW_PROVIDERS


def server_limits(
    name: str, api_base: str | None, *, timeout: float = SERVER_TIMEOUT_S
) -> ModelLimits | None:
    """The window ``name``'s server reports; None when nobody can ask it (see
    ``SERVER_WINDOW_PROVIDERS``), or the server does not answer within ``timeout`` seconds,
    or it reports no window. Ollama's is asked directly (see provider/ollama.py); the
    others through litellm, which this imports: call it once, at start-up."""
    if not asks_server(name):
        return None
    if is_ollama(name):
        window = server_window(name, api_base, timeout=timeout)
        if window is None:
            return None
        output = _lookup(name.strip(), True).output_tokens
        return ModelLimits(window, min(output, window))
    from harness9.provider.llm import load_litellm

    litellm = load_litellm()  # before the clock starts: the import is not the server's time
    answer: list[Any] = []

    def ask() -> None:
        # litellm's own request has no timeout we can set, so it runs on a daemon thread
        # that is simply abandoned if the server keeps it waiting.
        try:
            answer.append(litellm.get_model_info(name.strip(), api_base=api_base))
        except Exception:  # noqa: BLE001 - any failure means "not reported": the guess stands
            return

    probe = threading.Thread(target=ask, name="harness9-window-probe", daemon=True)
    probe.start()
    probe.join(timeout)
    return _from_map_entry(dict(answer[0])) if answer else None


@lru_cache(maxsize=256)
def _lookup(name: str, local: bool = False) -> ModelLimits:
    """The tables' window; for a model they do not know on a local server (``local``),
    ``LOCAL_GUESS``. A family estimate stands (a hosted provider's model behind a proxy
    is the common case there); chat warns that it is one."""
    limits, source = _lookup_with_source(name)
    return LOCAL_GUESS if local and source == "default" else limits


def _lookup_with_source(name: str) -> tuple[ModelLimits, str]:
    candidates = routing_candidates(name)
    for candidate in candidates:
        for key in dict.fromkeys((candidate, candidate.lower())):
            limits = _from_map_entry(_map_entry(key))
            if limits is not None:
                return limits, "map"
    base = candidates[-1].lower() if candidates else ""
    for pattern, limits in FAMILY_LIMITS:
        if pattern.search(base):
            return limits, "family"
    return DEFAULT_LIMITS, "default"


def _from_map_entry(entry: Any) -> ModelLimits | None:
    if not isinstance(entry, dict):
        return None
    context = _positive(entry.get("max_input_tokens"))
    # Old entries only have max_tokens; in them it stands for the window.
    legacy = _positive(entry.get("max_tokens"))
    if context is None:
        context = legacy
    if context is None:
        return None
    output = _positive(entry.get("max_output_tokens")) or DEFAULT_LIMITS.output_tokens
    return ModelLimits(context, min(output, context))


def _positive(value: Any) -> int | None:
    # The map's "sample_spec" entry holds descriptions instead of numbers.
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return int(value)


def model_map_path() -> Path | None:
    """The JSON model map bundled with the installed litellm, found without importing it."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    path = Path(spec.origin).parent / MODEL_MAP_FILE
    return path if path.is_file() else None


@lru_cache(maxsize=1)
def _model_map_text() -> str:
    path = model_map_path()
    if path is None:
        return ""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return ""


@lru_cache(maxsize=1)
def _model_map() -> dict[str, Any]:
    try:
        data = json.loads(_model_map_text() or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


# The bundled map is pretty-printed with four-space indentation, one model per
# top-level key. Parsing all of it (~1.5 MB) costs ~70 ms of `chat` start-up,
# so a lookup slices out just the entry it needs and parses that; any other
# layout falls back to parsing the whole file.
_ENTRY_INDENT = "\n    "


def _map_entry(key: str) -> Any:
    text = _model_map_text()
    if not text.startswith("{" + _ENTRY_INDENT + '"'):
        return _model_map().get(key)
    start = text.find(_ENTRY_INDENT + json.dumps(key) + ": {")
    if start < 0:
        return None
    body = text.find("{", start)
    end = text.find(_ENTRY_INDENT + "}", body)
    if end < 0:
        return _model_map().get(key)
    try:
        return json.loads(text[body : end + len(_ENTRY_INDENT) + 1])
    except ValueError:
        return _model_map().get(key)


__all__ = [
    "DEFAULT_LIMITS",
    "FAMILY_LIMITS",
    "LOCAL_GUESS",
    "LOCAL_PROVIDERS",
    "ModelLimits",
    "WindowProbe",
    "asks_server",
    "chat_limits",
    "get_model_limits",
    "output_budget",
    "server_limits",
    "served_locally",
    "server_would_answer",
    "window_source",
]
