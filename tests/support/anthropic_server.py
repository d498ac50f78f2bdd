"""A scripted server speaking Anthropic's Messages API on 127.0.0.1, for tests and scripts.

litellm reaches it exactly as it reaches api.anthropic.com:
``--model anthropic/<name> --api-base <server.base_url>`` (no ``/v1``: litellm appends
``/v1/messages`` itself). Replies are queued as on ``ScriptedLLMServer`` (the same reply
specs, the same queue and ``respond_with``), and answered in Anthropic's shapes: a
JSON message, or SSE events ``message_start`` / ``content_block_start`` /
``content_block_delta`` (``text_delta``, ``input_json_delta``) / ``content_block_stop``
/ ``message_delta`` / ``message_stop``.

Requests are validated as the real API does, answering 400 ``invalid_request_error``:
roles alternate starting with ``user``; no empty text blocks; every ``tool_use`` is
answered by a ``tool_result`` in the next message and every ``tool_result`` answers one;
``max_tokens`` is given and within the model's output limit; at most 4 blocks carry
``cache_control``, and a 1-hour one never follows a 5-minute one.

Its prompt cache is simulated by Anthropic's rule: only a prefix ending at a block with
``cache_control`` (a breakpoint) is cached, if it is at least ``MIN_CACHEABLE_TOKENS``
long; a later request whose prefix up to a breakpoint, or up to 20 blocks before one,
was cached reads it (``cache_read_input_tokens``); what it caches beyond that is written
(``cache_creation_input_tokens``, split by lifetime in ``cache_creation``); the rest is
``input_tokens``. Tokens are counted as bytes / 4 of each block's JSON. The usage comes
in ``message_start`` (input side) and ``message_delta`` (output tokens), as Anthropic
sends it; ``usage_log`` keeps each request's figures.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import time
from dataclasses import dataclass
from typing import Any

from tests.support.llm_server import (
    NO_REPLY_MESSAGE,
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

MIN_CACHEABLE_TOKENS = 1024
MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20
# Output limits of the models tests name (Anthropic's model overview); other claude names
# get DEFAULT_OUTPUT_LIMIT.
OUTPUT_LIMITS = {
    "claude-sonnet-4-20250514": 64_000,
    "claude-opus-4-20250514": 32_000,
    "claude-sonnet-4-5": 64_000,
    "claude-sonnet-4-5-20250929": 64_000,
    "claude-3-5-haiku-20241022": 8_192,
}
DEFAULT_OUTPUT_LIMIT = 64_000

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class InvalidRequest(Exception):
    """What the real API would answer with a 400."""


@dataclass(slots=True, frozen=True)
class CallUsage:
    """One request's figures as the server counted them."""

    input_tokens: int  # not read from nor written to the cache
    cache_read: int
    cache_write: int
    cache_write_1h: int  # of cache_write, written with "ttl": "1h"
    output_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read + self.cache_write


class ScriptedAnthropicServer(ScriptedLLMServer):
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port)
        self._cache: dict[str, int] = {}  # prefix digest -> its tokens
        self.usage_log: list[CallUsage] = []
        self.rejected: list[str] = []  # the 400 messages sent, oldest first

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def cache_usage(self, body: dict[str, Any], *, commit: bool = True) -> CallUsage:
        """``body``'s figures by the simulated cache; ``commit``: the request is answered,
        so what it writes is cached (a refused request caches nothing)."""
        blocks = request_blocks(body)
        tokens = [block_tokens(b) for b, _ in blocks]
        running = [0]
        for t in tokens:
            running.append(running[-1] + t)
        digests = _prefix_digests([b for b, _ in blocks])
        marks = [i for i, (_, ttl) in enumerate(blocks) if ttl is not None]
        with self._lock:
            hit = -1
            for mark in marks:
                for j in range(mark, max(-1, mark - LOOKBACK_BLOCKS), -1):
                    if digests[j] in self._cache:
                        hit = max(hit, j)
                        break
            read = running[hit + 1]
            written, written_1h, covered = 0, 0, hit
            for mark in marks:
                size = running[mark + 1]
                if mark <= covered or size < MIN_CACHEABLE_TOKENS:
                    continue
                if commit:
                    self._cache[digests[mark]] = size
                part = size - running[covered + 1]
                written += part
                if blocks[mark][1] == "1h":
                    written_1h += part
                covered = mark
        return CallUsage(running[-1] - read - written, read, written, written_1h)

    def _record(self, usage: CallUsage) -> None:
        with self._lock:
            self.usage_log.append(usage)


# -- validation ----------------------------------------------------------------------------


def validate(body: dict[str, Any]) -> None:
    model = str(body.get("model", ""))
    limit = OUTPUT_LIMITS.get(model, DEFAULT_OUTPUT_LIMIT)
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise InvalidRequest("max_tokens: Field required")
    if not 1 <= max_tokens <= limit:
        raise InvalidRequest(
            f"max_tokens: {max_tokens} > {limit}, which is the maximum allowed number of "
            f"output tokens for {model}"
        )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: at least one message is required")
    for i, msg in enumerate(messages):
        want = "user" if i % 2 == 0 else "assistant"
        if msg.get("role") != want:
            raise InvalidRequest(
                f"messages.{i}.role: roles must alternate between user and assistant, "
                "starting with user"
            )
        _check_blocks(i, content_blocks(msg))
    _check_tool_pairs(messages)
    _check_breakpoints([ttl for _, ttl in request_blocks(body) if ttl is not None])


def content_blocks(msg: dict[str, Any]) -> list[dict[str, Any]]:
    content = msg.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def _check_blocks(i: int, blocks: list[dict[str, Any]]) -> None:
    if not blocks:
        raise InvalidRequest(f"messages.{i}: all messages must have non-empty content")
    for j, block in enumerate(blocks):
        if block.get("type") == "text" and not str(block.get("text", "")).strip():
            raise InvalidRequest(
                f"messages.{i}.content.{j}.text: text content blocks must be non-empty"
            )


def _check_tool_pairs(messages: list[dict[str, Any]]) -> None:
    for i, msg in enumerate(messages):
        blocks = content_blocks(msg)
        results = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
        asked = set()
        if i > 0:
            asked = {
                b.get("id") for b in content_blocks(messages[i - 1]) if b.get("type") == "tool_use"
            }
        stray = results - asked
        if stray:
            raise InvalidRequest(
                f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{sorted(map(str, stray))[0]}. Each `tool_result` block must have a "
                "corresponding `tool_use` block in the previous message."
            )
        calls = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        if calls:
            after = content_blocks(messages[i + 1]) if i + 1 < len(messages) else []
            answered = {b.get("tool_use_id") for b in after if b.get("type") == "tool_result"}
            missing = [c for c in calls if c not in answered]
            if missing and i + 1 < len(messages):
                raise InvalidRequest(
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {missing[0]}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )


def _check_breakpoints(ttls: list[str]) -> None:
    if len(ttls) > MAX_BREAKPOINTS:
        raise InvalidRequest(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(ttls)}."
        )
    if "1h" in ttls and "5m" in ttls and ttls.index("5m") < len(ttls) - ttls[::-1].index("1h") - 1:
        raise InvalidRequest(
            "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block"
        )


# -- the cache's view of a request ------------------------------------------------------------


def request_blocks(body: dict[str, Any]) -> list[tuple[dict[str, Any], str | None]]:
    """The request in cache order (tools, system, messages), each block with its
    breakpoint's lifetime ("5m" or "1h"), None where it carries none."""
    system = body.get("system") or []
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    out = []
    parts = [*(body.get("tools") or []), *system]
    for msg in body.get("messages") or []:
        parts += [{"role": msg.get("role"), **b} for b in content_blocks(msg)]
    for part in parts:
        control = part.get("cache_control")
        ttl = None
        if isinstance(control, dict):
            ttl = "1h" if control.get("ttl") == "1h" else "5m"
        out.append(({k: v for k, v in part.items() if k != "cache_control"}, ttl))
    return out


def prompt_tokens(body: dict[str, Any]) -> int:
    """The request's input tokens as this server counts them (cached or not)."""
    return sum(block_tokens(b) for b, _ in request_blocks(body))


def openai_view(body: dict[str, Any]) -> dict[str, Any]:
    """The request in OpenAI's chat form (system/user/assistant/tool messages, function
    tools): for responders written against ScriptedLLMServer's bodies."""
    system = body.get("system") or []
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": "".join(b["text"] for b in system)})
    for msg in body.get("messages") or []:
        messages += _openai_messages(msg)
    tools = [
        {"type": "function", "function": {"name": t["name"], "parameters": t.get("input_schema")}}
        for t in body.get("tools") or []
    ]
    return {"model": body.get("model"), "messages": messages, "tools": tools}


def _openai_messages(msg: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = content_blocks(msg)
    text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    if msg.get("role") == "assistant":
        calls = [
            {
                "id": b["id"],
                "type": "function",
                "function": {"name": b["name"], "arguments": json.dumps(b.get("input") or {})},
            }
            for b in blocks
            if b.get("type") == "tool_use"
        ]
        return [{"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}]
    out = []
    for b in blocks:
        if b.get("type") == "tool_result":
            content = b.get("content")
            if isinstance(content, list):
                content = "".join(c.get("text", "") for c in content)
            out.append({"role": "tool", "tool_call_id": b["tool_use_id"], "content": content})
    if text:
        out.append({"role": "user", "content": text})
    return out


def block_tokens(block: dict[str, Any]) -> int:
    return max(1, len(json.dumps(block, sort_keys=True).encode()) // 4)


def _prefix_digests(blocks: list[dict[str, Any]]) -> list[str]:
    h = hashlib.sha256()
    out = []
    for block in blocks:
        h.update(json.dumps(block, sort_keys=True).encode())
        out.append(h.copy().hexdigest())
    return out


# -- the wire ----------------------------------------------------------------------------------


class _AnthropicHandler(_Handler):
    @property
    def owner(self) -> ScriptedAnthropicServer:
        return self.server.owner  # type: ignore[attr-defined]

    def _handle_post(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.split("?", 1)[0].rstrip("/") != "/v1/messages":
            self._error(404, f"no route for POST {self.path}")
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            self._error(400, f"invalid JSON body: {exc}")
            return
        owner = self.owner
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            validate(body)
        except InvalidRequest as exc:
            with owner._lock:  # recorded, but the queued reply stays for the next request
                owner._requests.append(body)
                owner._headers.append(headers)
                owner.rejected.append(str(exc))
            self._error(400, str(exc))
            return
        spec = owner._take(body, headers)
        usage = owner.cache_usage(
            body, commit=spec is not None and not isinstance(spec, ErrorReply)
        )
        if spec is None:
            self._error(500, NO_REPLY_MESSAGE, "api_error")
            return
        owner._sleep(spec.delay)
        if owner._stopping.is_set():
            self.close_connection = True
            return
        if isinstance(spec, ErrorReply):
            self._error(spec.status, spec.message, spec.type, spec.headers)
            return
        blocks, stop = _reply_blocks(spec)
        usage = _with_output(usage, spec, blocks)
        owner._record(usage)
        if isinstance(spec, StreamBreakReply):
            self._break_stream(body, usage, spec)
        elif body.get("stream"):
            self._stream_message(body, usage, blocks, stop, spec)
        else:
            self._send_json(200, _message(body, blocks, stop, _usage_dict(usage, final=True)))

    def _error(
        self, status: int, message: str, type_: str | None = None, headers: dict | None = None
    ) -> None:
        kind = type_ or _ERROR_TYPES.get(status, "api_error")
        payload = {"type": "error", "error": {"type": kind, "message": message}}
        self._send_json(status, payload, headers)

    def _sse(self, name: str, payload: dict[str, Any], pause: float = 0.0) -> None:
        data = json.dumps({"type": name, **payload})
        self._write_chunk(f"event: {name}\ndata: {data}\n\n".encode())
        self.owner._sleep(pause)

    def _stream_message(
        self,
        body: dict[str, Any],
        usage: CallUsage,
        blocks: list[dict[str, Any]],
        stop: str,
        spec: Reply,
    ) -> None:
        size = getattr(spec, "chunk_size", 5)
        pause = getattr(spec, "chunk_delay", 0.0)
        self._start_stream()
        start = _message(body, [], None, _usage_dict(usage, final=False))
        self._sse("message_start", {"message": start})
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                self._sse(
                    "content_block_start",
                    {"index": index, "content_block": {"type": "text", "text": ""}},
                )
                for piece in _pieces(block["text"], size):
                    delta = {"type": "text_delta", "text": piece}
                    self._sse("content_block_delta", {"index": index, "delta": delta}, pause)
            else:
                head = {**block, "input": {}}
                self._sse("content_block_start", {"index": index, "content_block": head})
                text = json.dumps(block["input"])
                for piece in _pieces(text, max(1, min(size, len(text) // 2))):
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    self._sse("content_block_delta", {"index": index, "delta": delta}, pause)
            self._sse("content_block_stop", {"index": index})
        delta = {"stop_reason": stop, "stop_sequence": None}
        self._sse(
            "message_delta", {"delta": delta, "usage": {"output_tokens": usage.output_tokens}}
        )
        self._sse("message_stop", {})
        self._write_chunk(b"")

    def _break_stream(self, body: dict[str, Any], usage: CallUsage, spec: StreamBreakReply) -> None:
        """message_start (with its usage) and some text, then the connection drops."""
        self._start_stream()
        self._sse("message_start", {"message": _message(body, [], None, _usage_dict(usage, False))})
        self._sse(
            "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
        )
        for piece in _pieces(spec.partial_text, spec.chunk_size):
            self._sse(
                "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}}
            )
        time.sleep(0.02)
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


ScriptedAnthropicServer.handler_class = _AnthropicHandler


def _reply_blocks(spec: Reply) -> tuple[list[dict[str, Any]], str]:
    if isinstance(spec, TextReply):
        return [{"type": "text", "text": spec.text}], "end_turn"
    if isinstance(spec, ToolCallsReply):
        blocks: list[dict[str, Any]] = []
        if spec.content:
            blocks.append({"type": "text", "text": spec.content})
        for call_id, name, arguments in spec.calls:
            blocks.append(
                {"type": "tool_use", "id": call_id, "name": name, "input": json.loads(arguments)}
            )
        return blocks, "tool_use"
    if isinstance(spec, EmptyReply):
        return [], "end_turn"
    return [], "end_turn"  # StreamBreakReply: never finishes


def _with_output(usage: CallUsage, spec: Reply, blocks: list[dict[str, Any]]) -> CallUsage:
    scripted = getattr(spec, "usage", None)
    if scripted is not None:
        out = int(scripted[1])
    else:
        out = max(1, len(json.dumps(blocks).encode()) // 4) if blocks else 1
    return CallUsage(
        usage.input_tokens, usage.cache_read, usage.cache_write, usage.cache_write_1h, out
    )


def _usage_dict(usage: CallUsage, final: bool) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_write,
        "cache_read_input_tokens": usage.cache_read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": usage.cache_write - usage.cache_write_1h,
            "ephemeral_1h_input_tokens": usage.cache_write_1h,
        },
        "output_tokens": usage.output_tokens if final else 1,
    }


def _message(
    body: dict[str, Any], blocks: list[dict[str, Any]], stop: str | None, usage: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "scripted"),
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }
