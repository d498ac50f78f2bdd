"""What can go wrong talking to a model, as one-line errors the CLI can print.

``TransientError`` and its subclasses are the ones worth retrying; the others
(bad key, context overflow, a rejected request) would fail the same way again.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from harness9.errors import HarnessError
from harness9.schema import Message


class ProviderError(HarnessError):
    """Base of every model-call failure; ``str(exc)`` is one line, no key in it."""


class AuthenticationError(ProviderError):
    """The key is missing or was rejected; the message names the variable to set."""


class BadRequestError(ProviderError):
    """The server refused the request itself (HTTP 400/404/422...): retrying cannot help."""


class LocalRequestError(ProviderError):
    """The request failed on this machine before or while it was sent (not the server's fault)."""


class ContextWindowExceededError(BadRequestError):
    """The prompt did not fit the model's window (the engine compacts and tries again).
    ``window``: the window the server named in its refusal (None: it named none)."""

    def __init__(self, message: str, window: int | None = None) -> None:
        super().__init__(message)
        self.window = window


class TransientError(ProviderError):
    """A failure that may pass: retried with backoff before it reaches the user."""


class RateLimitError(TransientError):
    """HTTP 429."""


class ServiceUnavailableError(TransientError):
    """HTTP 5xx, or the connection failed or dropped before any text was shown."""


class ModelTimeoutError(TransientError):
    """No answer within the timeout."""


class StreamInterruptedError(ProviderError):
    """The stream broke after text had been shown; ``partial`` holds what arrived.

    Not retried: a second attempt would print the same text again.
    """

    def __init__(self, message: str, partial: Message) -> None:
        super().__init__(message)
        self.partial = partial


# -- reading a provider's error ------------------------------------------------------------
# litellm's messages wrap the server's answer in its own class names and, for some providers
# (Gemini, Vertex), in the repr of the bytes it read: "litellm.RateLimitError: Vertex_ai_beta
# Exception - b'{"error": {"code": 429, "message": "..."}}'". The functions below recover
# what the server said, so a person reads the provider's own words on one line.

_CLASS_PREFIX = re.compile(
    r"^\s*(?:litellm\.)?[A-Za-z_]*(?:Error|Exception|Timeout)(?:\s+[A-Za-z_]*Error)?\s*[:-]\s*"
)
# The repr runs to the last quote of its kind: it ends the message litellm builds.
_BYTES_LITERAL = re.compile(r"""\bb(['"])(.*)\1""", re.DOTALL)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")
MAX_DETAIL = 300


def error_body(text: str) -> dict[str, Any] | None:
    """The JSON object a provider answered with, when ``text`` (an error's message) holds one."""
    text = _unbytes(text)
    start = text.find("{")  # the body comes whole, after litellm's words
    if start < 0:
        return None
    try:
        body, _ = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def provider_message(text: str) -> str:
    """The provider's own message in an error's text, decoded, on one line, class names off."""
    text = text.strip().split(" Original exception:", 1)[0]
    body = error_body(text)
    said = _said(body) if body is not None else None
    if said is None:
        said = _unbytes(text)
        previous = None
        while previous != said:
            previous, said = said, _CLASS_PREFIX.sub("", said, count=1)
    said = " ".join(said.split())
    return said if len(said) <= MAX_DETAIL else said[: MAX_DETAIL - 3] + "..."


def body_status(body: dict[str, Any] | None) -> int | None:
    """The HTTP status a body names (Google's ``error.code``): litellm reports some as 500."""
    error = (body or {}).get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) and 400 <= code < 600 else None


def is_overloaded(status: int | None, body: dict[str, Any] | None) -> bool:
    """Anthropic's 529 ``overloaded_error`` (and the same said by any provider)."""
    error = (body or {}).get("error")
    kind = error.get("type") if isinstance(error, dict) else None
    return status == 529 or kind == "overloaded_error"


def retry_delay(body: dict[str, Any] | None) -> float | None:
    """Seconds Google asks a client to wait: ``google.rpc.RetryInfo.retryDelay`` ("37s") in
    the error's ``details``; None when the body names no wait."""
    error = (body or {}).get("error")
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else []:
        if not isinstance(detail, dict) or not str(detail.get("@type", "")).endswith(
            "google.rpc.RetryInfo"
        ):
            continue
        found = _DURATION.match(str(detail.get("retryDelay", "")))
        if found:
            return float(found.group(1))
    return None


def _said(body: dict[str, Any]) -> str | None:
    error = body.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error  # Ollama's {"error": "..."}
    message = body.get("message")
    return message if isinstance(message, str) else None


def _unbytes(text: str) -> str:
    """``b'...'`` reprs in ``text`` replaced by the text they stand for."""

    def decode(found: re.Match[str]) -> str:
        try:
            value = ast.literal_eval(found.group(0))
        except (ValueError, SyntaxError):
            return found.group(0)
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else found.group(0)

    return _BYTES_LITERAL.sub(decode, text)


# -- the window a refusal names ------------------------------------------------------------
# How each common server says how large its window is when it refuses a prompt as too long.
# The first group of each pattern is the window.
_WINDOW_WORDINGS = (
    # OpenAI and vLLM: "This model's maximum context length is 4096 tokens. However, ..."
    re.compile(r"maximum context length is (\d[\d,]*) tokens", re.IGNORECASE),
    # llama-cpp-python: "Requested tokens (3191) exceed context window of 2048"
    re.compile(r"exceed(?:s)? context window of (\d[\d,]*)", re.IGNORECASE),
    # LM Studio: "... the model is loaded with context length of only 2048 tokens ..."
    re.compile(r"context length of only (\d[\d,]*) tokens", re.IGNORECASE),
    # Anthropic: "prompt is too long: 250000 tokens > 200000 maximum"
    re.compile(r"prompt is too long: \d[\d,]* tokens > (\d[\d,]*) maximum", re.IGNORECASE),
    # Gemini: "The input token count (1200000) exceeds the maximum number of tokens allowed
    # (1048576)."
    re.compile(r"maximum number of tokens allowed \((\d[\d,]*)\)", re.IGNORECASE),
    # llama.cpp's llama-server: exceed_context_size_error, the window as "n_ctx" in the body
    re.compile(r"""["']n_ctx["']\s*:\s*(\d+)"""),
)
# Refusals litellm does not map to its ContextWindowExceededError by itself.
_OVERFLOW_WORDINGS = (
    re.compile(r"exceed(?:s)? context window of \d", re.IGNORECASE),  # llama-cpp-python
    re.compile(r"context length of only \d[\d,]* tokens", re.IGNORECASE),  # LM Studio
    re.compile(r"exceed_context_size_error|context_length_exceeded", re.IGNORECASE),
)


def refused_window(text: str) -> int | None:
    """The window (tokens) a server's too-long refusal names, in any of the common servers'
    wordings; None when it names none."""
    text = _unbytes(text)
    for pattern in _WINDOW_WORDINGS:
        found = pattern.search(text)
        if found:
            window = int(found.group(1).replace(",", ""))
            return window if window > 0 else None
    return None


def says_too_long(text: str) -> bool:
    """Whether an error's text is a too-long refusal in a wording litellm leaves unmapped."""
    return any(p.search(text) for p in _OVERFLOW_WORDINGS)
