"""What Ollama needs from a client that litellm does not do by itself.

- **The window in every request.** Ollama runs a model with ``options.num_ctx`` tokens of
  context, 2048 (4096 on newer servers) when a request leaves it out, whatever the model
  could take, and silently drops the oldest messages of a longer prompt. litellm sends its
  ``options`` from the call's extra keyword arguments on both of its routes (``ollama_chat/``
  -> ``/api/chat``, ``ollama/`` -> ``/api/generate``), so ``num_ctx=N`` is passed there.
- **The server's window, for every name.** ``litellm.get_model_info`` answers from its
  bundled map for the ~30 names it lists under ``ollama/`` and asks the server only for the
  others; the map's figure is the model's, not what this server runs. So the server's
  ``POST /api/show`` (Ollama's documented API) is asked directly: a ``num_ctx`` set in the
  Modelfile's parameters first (the window its owner chose), else the model's
  ``<architecture>.context_length``.
- **A prompt count the server left out.** Ollama omits ``prompt_eval_count`` when it did not
  evaluate the prompt (e.g. all of it came from its cache); litellm then fills the figure in
  with its own ``token_counter`` over the messages, indistinguishable from a real count. A
  figure equal to that count is litellm's estimate, and is shown as one.

Nothing here imports litellm at module level: limits are asked at start-up, before it loads.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

OLLAMA_PROVIDERS = frozenset({"ollama", "ollama_chat"})
DEFAULT_OLLAMA_BASE = "http://localhost:11434"
# litellm's routes: a base given with one of them still means the server's root.
_ROUTE_SUFFIXES = ("/api/chat", "/api/generate", "/api/show")
_NUM_CTX_PARAMETER = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


def is_ollama(model: str) -> bool:
    """True for ``ollama/NAME`` and ``ollama_chat/NAME``."""
    provider, sep, rest = model.strip().partition("/")
    return bool(sep and rest) and provider.lower() in OLLAMA_PROVIDERS


def request_options(model: str, context_window: int | None) -> dict[str, Any]:
    """Extra ``litellm.completion`` arguments: ``num_ctx`` for an Ollama model, else none."""
    if context_window is None or context_window <= 0 or not is_ollama(model):
        return {}
    return {"num_ctx": int(context_window)}


def server_root(api_base: str | None) -> str:
    """The Ollama server litellm would call: ``--api-base``, else ``$OLLAMA_API_BASE``, else
    localhost, without a trailing slash or one of litellm's own route suffixes."""
    base = (api_base or os.environ.get("OLLAMA_API_BASE") or DEFAULT_OLLAMA_BASE).rstrip("/")
    for suffix in _ROUTE_SUFFIXES:
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


def server_window(model: str, api_base: str | None, *, timeout: float) -> int | None:
    """The window ``model``'s Ollama server runs it with by default, from ``/api/show``; None
    when the server does not answer in ``timeout`` seconds, does not know the model, or
    reports no window."""
    import urllib.error  # only a chat on an Ollama model pays for these imports
    import urllib.request

    name = model.strip().partition("/")[2]
    request = urllib.request.Request(
        server_root(api_base) + "/api/show",
        data=json.dumps({"model": name}).encode(),
        headers={"Content-Type": "application/json", **_auth_header()},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            details = json.loads(response.read() or b"{}")
    except (OSError, ValueError, urllib.error.URLError):
        return None  # not reported: the caller's guess stands
    return window_from_show(details) if isinstance(details, dict) else None


def window_from_show(details: dict[str, Any]) -> int | None:
    """The window in an ``/api/show`` answer: the Modelfile's ``num_ctx``, else the model's
    ``*.context_length``."""
    parameters = details.get("parameters")
    if isinstance(parameters, str):
        found = _NUM_CTX_PARAMETER.search(parameters)
        if found and int(found.group(1)) > 0:
            return int(found.group(1))
    info = details.get("model_info")
    if not isinstance(info, dict):
        return None
    for key, value in info.items():
        if str(key).endswith(".context_length") and isinstance(value, int) and value > 0:
            return value
    return None


def prompt_count_estimated(
    litellm: Any, model: str, messages: list[dict[str, Any]], prompt_tokens: int
) -> bool:
    """Whether an Ollama reply's prompt count is litellm's stand-in for a missing
    ``prompt_eval_count`` (see the module docstring); always False for other providers."""
    if not is_ollama(model) or prompt_tokens <= 0:
        return False
    try:
        # No model named: litellm's default (bundled) encoding, which is what its stand-in
        # used in every case measured; a model's name could send it to fetch a tokenizer.
        stand_in = litellm.token_counter(messages=messages)
    except Exception:  # noqa: BLE001 - no count to compare with: take the figure as real
        return False
    return bool(prompt_tokens == stand_in)


def _auth_header() -> dict[str, str]:
    key = os.environ.get("OLLAMA_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


__all__ = [
    "OLLAMA_PROVIDERS",
    "is_ollama",
    "prompt_count_estimated",
    "request_options",
    "server_root",
    "server_window",
    "window_from_show",
]
