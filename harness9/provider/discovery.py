"""Asking an OpenAI-compatible local server for the window it runs a model with.

The OpenAI API has no call that says how long a model's context is, but each of the common
local servers answers one of its own:

- llama.cpp's ``llama-server``: ``GET /props``, ``default_generation_settings.n_ctx`` (older
  builds: a top-level ``n_ctx``), the window of each of its slots;
- vLLM: ``GET /v1/models``, ``max_model_len`` of the model;
- LM Studio: ``GET /api/v0/models``, ``loaded_context_length`` of a loaded model, else its
  ``max_context_length``.

All three are asked at once, each bounded by the same timeout, and the first of them (in
that order) that names a window wins. Nothing here imports litellm.
"""

from __future__ import annotations

import json
import threading
from typing import Any

# Suffixes of an --api-base that still mean the server's root.
_ROUTE_SUFFIXES = ("/chat/completions", "/v1")


def server_root(api_base: str) -> str:
    """``http://host:8080/v1`` -> ``http://host:8080``."""
    base = api_base.strip().rstrip("/")
    for suffix in _ROUTE_SUFFIXES:
        if base.endswith(suffix):
            base = base[: -len(suffix)].rstrip("/")
    return base


def discover_window(model: str, api_base: str, *, timeout: float) -> int | None:
    """The window ``model``'s OpenAI-compatible server at ``api_base`` reports; None when
    none of the three routes answers with one within ``timeout`` seconds."""
    name = model.strip().partition("/")[2] or model.strip()
    root = server_root(api_base)
    asks = (
        (root + "/props", _from_props),
        (root + "/v1/models", lambda body: _from_list(body, name, ("max_model_len",))),
        (
            root + "/api/v0/models",
            lambda body: _from_list(body, name, ("loaded_context_length", "max_context_length")),
        ),
    )
    answers: list[int | None] = [None] * len(asks)

    def ask(i: int, url: str, read: Any) -> None:
        body = _get_json(url, timeout)
        if body is not None:
            answers[i] = read(body)

    threads = [
        threading.Thread(target=ask, args=(i, url, read), name="harness9-window-ask", daemon=True)
        for i, (url, read) in enumerate(asks)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)  # they run side by side: the wait is one timeout at most
    return next((a for a in answers if a is not None), None)


def _get_json(url: str, timeout: float) -> Any:
    import urllib.error  # only a chat on a local server pays for these imports
    import urllib.request

    if not url.startswith(("http://", "https://")):
        return None  # not a server's address: the chat's own request says so
    try:
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return json.loads(response.read() or b"null")
    except (OSError, ValueError, urllib.error.URLError):
        return None


def _positive(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def _from_props(body: Any) -> int | None:
    """llama-server's ``/props``."""
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings")
    if isinstance(settings, dict) and _positive(settings.get("n_ctx")):
        return _positive(settings.get("n_ctx"))
    return _positive(body.get("n_ctx"))


def _from_list(body: Any, name: str, keys: tuple[str, ...]) -> int | None:
    """A model list (``{"data": [...]}``): the entry named ``name`` (or the only one), its
    first of ``keys`` that holds a window."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    entries = [e for e in data if isinstance(e, dict)]
    named = [e for e in entries if e.get("id") == name]
    chosen = named or (entries if len(entries) == 1 else [])
    for entry in chosen:
        for key in keys:
            window = _positive(entry.get(key))
            if window is not None:
                return window
    return None


__all__ = ["discover_window", "server_root"]
