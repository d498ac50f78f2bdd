"""A scripted Gemini API (Google AI Studio) server on 127.0.0.1, as litellm calls it.

A ``gemini/NAME`` model with ``--api-base {base_url}`` (which ends in ``/v1beta``, the
API's own form) is sent to ``POST /v1beta/models/NAME:streamGenerateContent?alt=sse``
(streaming: SSE ``data: {...}`` events) or ``...:generateContent``, the key in the
``x-goog-api-key`` header:

    with ScriptedGeminiServer() as server:
        server.reply_rate_limited("3s")    # 429, google.rpc.RetryInfo in the body
        server.reply_text("hello", usage=(12, 3))
        ... harness9 chat --model gemini/gemini-2.5-flash --api-base server.base_url

The script (``reply_text``, ``reply_tool_calls``, ``reply_error``...) and the recording
(``requests``, ``request_headers``) are tests/support/llm_server.py's, by inheritance; ``paths``
records each request's path and query, ``rejected`` each request refused as invalid.

Requests are validated as the API does (a 400 ``INVALID_ARGUMENT`` otherwise): a key
(``api_key``) in the header; ``contents`` not empty, roles ``user``/``model`` only, no
content without parts, no part without data (an empty ``text`` among them); and the
function-calling rule: a turn of ``functionResponse`` parts comes right after the ``model``
turn of ``functionCall`` parts and answers each of them, by name, in number.

Usage is ``usageMetadata`` (``promptTokenCount``, ``candidatesTokenCount``,
``cachedContentTokenCount`` when a third figure is given) on every event, cumulative, as
Gemini sends it; when not scripted, the prompt is bytes // 4 of the request's JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from tests.support.llm_server import (
    EmptyReply,
    ErrorReply,
    Reply,
    ScriptedLLMServer,
    StreamBreakReply,
    TextReply,
    ToolCallsReply,
    _Handler,
    _pieces,
)

API_KEY = "gm-test-key"
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


@dataclass(slots=True, frozen=True)
class GoogleErrorReply(ErrorReply):
    """An error whose body carries google.rpc ``details`` (RetryInfo, QuotaFailure...)."""

    details: tuple[dict[str, Any], ...] = ()


class ScriptedGeminiServer(ScriptedLLMServer):
    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, api_key: str = API_KEY) -> None:
        super().__init__(host, port)
        self.api_key = api_key
        self.paths: list[str] = []
        self.rejected: list[tuple[dict[str, Any], str]] = []  # (body, the 400's message)

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}/v1beta"

    def reply_rate_limited(self, retry_delay: str, *, message: str | None = None) -> None:
        """Gemini's 429: the wait in the body's RetryInfo, no Retry-After header."""
        self.reply(
            GoogleErrorReply(
                429,
                message or "You exceeded your current quota, please check your plan.",
                details=({"@type": _RETRY_INFO, "retryDelay": retry_delay},),
            )
        )


class _GeminiHandler(_Handler):
    @property
    def gemini(self) -> ScriptedGeminiServer:
        return self.server.owner  # type: ignore[attr-defined,no-any-return]

    def _handle_post(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path, _, query = self.path.partition("?")
        with self.gemini._lock:
            self.gemini.paths.append(self.path)
        model, _, method = unquote(path).rpartition(":")
        if not model.startswith("/v1beta/models/") or method not in (
            "generateContent",
            "streamGenerateContent",
        ):
            self._error(404, f"Requested entity was not found: {path}")
            return
        if self.headers.get("x-goog-api-key") != self.gemini.api_key:
            self._error(400, "API key not valid. Please pass a valid API key.")
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            self._error(400, f"Invalid JSON payload received. {exc}")
            return
        problem = _invalid(body)
        if problem is not None:
            with self.gemini._lock:
                self.gemini.rejected.append((body, problem))
            self._error(400, problem)
            return
        spec = self.gemini._take(body, {k.lower(): v for k, v in self.headers.items()})
        if spec is None:
            self._error(500, "scripted server: no reply queued")
            return
        self.gemini._sleep(spec.delay)
        stream = method == "streamGenerateContent"
        if isinstance(spec, ErrorReply):
            details = spec.details if isinstance(spec, GoogleErrorReply) else ()
            self._error(spec.status, spec.message, details, spec.headers)
        elif stream and "alt=sse" not in query:
            self._error(400, "scripted server: streamGenerateContent without alt=sse")
        elif isinstance(spec, StreamBreakReply):
            self._stream(spec, body, cut=True)
        elif stream:
            self._stream(spec, body)
        else:
            parts, usage = _parts(spec), _usage_metadata(spec, body)
            self._send_json(200, _event(parts, usage, finished=True))

    def _stream(self, spec: Reply, body: dict[str, Any], *, cut: bool = False) -> None:
        parts = _parts(spec)
        usage = _usage_metadata(spec, body)
        events: list[dict[str, Any]] = []
        for part in parts:
            if "text" in part:
                events += [{"text": piece} for piece in _pieces(part["text"], _size(spec))]
            else:
                events.append(part)
        self._start_stream()
        for i, part in enumerate(events):
            last = i == len(events) - 1 and not cut
            self._sse(_event([part], usage, finished=last))
        if cut:
            self.close_connection = True
            self.connection.close()
            return
        if not events:
            self._sse(_event([], usage, finished=True))
        self._write_chunk(b"")

    def _sse(self, payload: dict[str, Any]) -> None:
        self._write_chunk(f"data: {json.dumps(payload)}\r\n\r\n".encode())

    def _error(
        self,
        status: int,
        message: str,
        details: tuple[dict[str, Any], ...] = (),
        headers: dict[str, str] | None = None,
    ) -> None:
        error: dict[str, Any] = {
            "code": status,
            "message": message,
            "status": _STATUS_NAMES.get(status, "UNKNOWN"),
        }
        if details:
            error["details"] = list(details)
        self._send_json(status, {"error": error}, headers)


ScriptedGeminiServer.handler_class = _GeminiHandler


def _invalid(body: dict[str, Any]) -> str | None:
    """The API's 400 message for a request it rejects, or None."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified"
    previous: dict[str, Any] | None = None
    for i, content in enumerate(contents):
        if content.get("role") not in ("user", "model"):
            return f"Please use a valid role: user, model. (contents[{i}])"
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts:
            return (
                f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
            )
        for j, part in enumerate(parts):
            if part.get("text") == "":  # litellm's " " placeholder is accepted, as by Google
                return (
                    "Unable to submit request because it has an empty text parameter. Add a "
                    f"value to the parameter and try again. (contents[{i}].parts[{j}])"
                )
            if not any(
                _field(part, k) for k in ("text", "functionCall", "functionResponse", "inlineData")
            ):
                return (
                    f"* GenerateContentRequest.contents[{i}].parts[{j}].data: required oneof "
                    "field 'data' must have one initialized field"
                )
        problem = _pairing(previous, content, i)
        if problem is not None:
            return problem
        previous = content
    return None


def _field(part: dict[str, Any], name: str) -> Any:
    """A part's field by its JSON name or its proto name (``functionCall`` or
    ``function_call``): the API accepts both, and litellm sends the second."""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in name)
    return part.get(name) or part.get(snake)


def _pairing(previous: dict[str, Any] | None, content: dict[str, Any], i: int) -> str | None:
    """Gemini's function-calling rule for the turn at ``i`` after ``previous``."""
    responses = [r for p in content["parts"] if (r := _field(p, "functionResponse"))]
    calls = [c for p in (previous or {}).get("parts", []) if (c := _field(p, "functionCall"))]
    if calls and (previous or {}).get("role") == "model" and not responses:
        return (
            "Please ensure that function call turn comes immediately after a user turn or "
            f"after a function response turn. (contents[{i}] answers no function call)"
        )
    if not responses:
        return None
    if not calls:
        return (
            "Please ensure that function response turn comes immediately after a function "
            f"call turn. (contents[{i}])"
        )
    if len(responses) != len(calls):
        return (
            "Please ensure that the number of function response parts is equal to the number "
            f"of function call parts of the function call turn. (contents[{i}])"
        )
    if sorted(r.get("name", "") for r in responses) != sorted(c.get("name", "") for c in calls):
        return f"function response names do not match the function calls (contents[{i}])"
    return None


def _parts(spec: Reply) -> list[dict[str, Any]]:
    if isinstance(spec, TextReply):
        return [{"text": spec.text}] if spec.text else []
    if isinstance(spec, StreamBreakReply):
        return [{"text": spec.partial_text}]
    if isinstance(spec, ToolCallsReply):
        head = [{"text": spec.content}] if spec.content else []
        return head + [
            {"functionCall": {"name": name, "args": json.loads(arguments)}}
            for _, name, arguments in spec.calls
        ]
    assert isinstance(spec, EmptyReply)
    return []


def _size(spec: Reply) -> int:
    return int(getattr(spec, "chunk_size", 5))


def _usage_metadata(spec: Reply, body: dict[str, Any]) -> dict[str, Any]:
    usage = getattr(spec, "usage", None)
    if usage is None:
        out = json.dumps(_parts(spec))
        usage = (max(1, len(json.dumps(body).encode()) // 4), max(1, len(out.encode()) // 4))
    prompt, candidates, *cached = usage
    meta: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates,
    }
    if cached:  # Gemini's implicit cache: part of the prompt, billed at a discount
        meta["cachedContentTokenCount"] = cached[0]
    return meta


def _event(parts: list[dict[str, Any]], usage: dict[str, Any], *, finished: bool) -> dict:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finished:
        candidate["finishReason"] = "STOP"
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "gemini-2.5-flash"}
