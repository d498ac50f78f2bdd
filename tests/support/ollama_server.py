"""A scripted Ollama server on 127.0.0.1, speaking Ollama's own API as litellm calls it.

``ollama_chat/NAME`` models reach ``POST /api/chat`` (NDJSON streaming), ``ollama/NAME``
models ``POST /api/generate``; both routes send sampling settings in ``options``, where
Ollama reads ``num_ctx``. ``POST /api/show`` answers a model's details, its window under
``model_info["<architecture>.context_length"]``:

    with ScriptedOllamaServer() as server:
        server.show_model("llama3.1", 32768)
        server.reply_text("hello")
        ... harness9 chat --model ollama_chat/llama3.1 --api-base server.base_url
        assert server.requests[0]["options"]["num_ctx"] == 32768

The script (``reply_text``, ``reply_tool_calls``, ``reply_error``...) and the recording
(``requests``, ``show_requests``) are tests/support/llm_server.py's, by inheritance.

What real Ollama does and this server copies:
- a model it has not pulled is a 404 (``model "x" not found, try pulling it first``);
  ``show_model`` is what "pulls" one. A request without ``model``, with an unknown role, or
  a tool call whose ``arguments`` is not a JSON object is a 400.
- the window is ``options.num_ctx``, 2048 when the request leaves it out, whatever the model
  could take. A prompt (tool definitions + messages) over it loses its oldest messages, the
  system messages and the last message always kept (Ollama's ``chatPrompt``);
  ``truncated[i]`` is how many request ``i`` lost, ``prompt_tokens[i]`` what was evaluated.
- usage is ``prompt_eval_count`` / ``eval_count`` on the last (``"done": true``) line;
  ``omit_prompt_count = True`` leaves ``prompt_eval_count`` out, as Ollama does when the
  whole prompt came from its cache.

Token counts are bytes // 4 of each message's JSON (deterministic, close to the harness's own
estimate), so a test can size a history that overflows a given ``num_ctx``.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

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

# Ollama's own default when a request carries no options.num_ctx.
OLLAMA_DEFAULT_NUM_CTX = 2048
_ROLES = frozenset({"system", "user", "assistant", "tool"})


def message_tokens(message: dict[str, Any]) -> int:
    """The server's count for one message: bytes of its JSON // 4, at least 1."""
    return max(1, len(json.dumps(message, sort_keys=True).encode()) // 4)


def fit_to_window(
    messages: list[dict[str, Any]], fixed: int, num_ctx: int
) -> tuple[list[dict[str, Any]], int]:
    """Ollama's ``chatPrompt``: the newest messages that fit ``num_ctx`` with the system
    messages and ``fixed`` (tool definitions), the last message always; returns the kept
    messages and how many were dropped."""
    if not messages:
        return [], 0
    start = len(messages) - 1
    for i in range(len(messages) - 2, -1, -1):
        system = [m for m in messages[:i] if m.get("role") == "system"]
        size = fixed + sum(message_tokens(m) for m in system + messages[i:])
        if size > num_ctx:
            break
        start = i
    kept = [m for m in messages[:start] if m.get("role") == "system"] + messages[start:]
    return kept, len(messages) - len(kept)


class ScriptedOllamaServer(ScriptedLLMServer):
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port)
        self.truncated: list[int] = []  # messages dropped, per /api/chat or /api/generate request
        self.prompt_tokens: list[int] = []  # the prompt Ollama evaluated, per request
        self.omit_prompt_count = False

    @property
    def base_url(self) -> str:
        # Ollama's form: the host alone; litellm appends /api/chat, /api/generate, /api/show.
        return f"http://{self._host}:{self.port}"

    @property
    def num_ctx_sent(self) -> list[int | None]:
        """``options.num_ctx`` of every chat/generate request, oldest first."""
        return [(body.get("options") or {}).get("num_ctx") for body in self.requests]

    def _knows(self, name: str) -> bool:
        with self._lock:
            return name in self._shown or name.split(":")[0] in self._shown


class _OllamaHandler(_Handler):
    @property
    def ollama(self) -> ScriptedOllamaServer:
        return self.server.owner  # type: ignore[attr-defined,no-any-return]

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path.rstrip("/") == "/api/version":
            self._send_json(200, {"version": "0.12.6"})
            return
        self._send_json(404, {"error": "404 page not found"})

    def _handle_post(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/api/show":
            self._show(raw)
            return
        if path not in ("/api/chat", "/api/generate"):
            # A base ending in /v1 gives /v1/api/chat: Ollama's router answers plain text.
            self._send_json(404, {"error": "404 page not found"})
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            self._send_json(400, {"error": f"invalid character in request body: {exc}"})
            return
        problem = _invalid(body, path)
        if problem is not None:
            self._send_json(400, {"error": problem})
            return
        model = str(body["model"])
        if not self.ollama._knows(model):
            self._send_json(404, {"error": f'model "{model}" not found, try pulling it first'})
            return
        prompt = self._evaluate(body, path)
        spec = self.ollama._take(body, {k.lower(): v for k, v in self.headers.items()})
        if spec is None:
            self._send_json(500, {"error": "scripted server: no reply queued"})
            return
        self.ollama._sleep(spec.delay)
        self._answer(spec, body, path, prompt)

    def _evaluate(self, body: dict[str, Any], path: str) -> int:
        """Fit the prompt into num_ctx as Ollama does; record and return its size."""
        num_ctx = int((body.get("options") or {}).get("num_ctx") or OLLAMA_DEFAULT_NUM_CTX)
        if path == "/api/chat":
            fixed = len(json.dumps(body.get("tools") or []).encode()) // 4
            kept, dropped = fit_to_window(list(body.get("messages") or []), fixed, num_ctx)
            size = fixed + sum(message_tokens(m) for m in kept)
        else:  # /api/generate: the prompt is cut to the window, its start lost
            whole = max(1, len(str(body.get("prompt", "")).encode()) // 4)
            size, dropped = min(whole, num_ctx), int(whole > num_ctx)
        with self.ollama._lock:
            self.ollama.truncated.append(dropped)
            self.ollama.prompt_tokens.append(size)
        return size

    def _answer(self, spec: Reply, body: dict[str, Any], path: str, prompt: int) -> None:
        if isinstance(spec, ErrorReply):
            self._send_json(spec.status, {"error": spec.message}, spec.headers)
            return
        stream = body.get("stream", True) is not False  # Ollama streams unless told not to
        chat = path == "/api/chat"
        text, calls = _reply_parts(spec)
        if calls and not chat:
            # /api/generate has no tool calls: litellm asks for one as JSON text (format
            # "json"), which a model answers with {"name": ..., "arguments": {...}}.
            call = calls[0]["function"]
            text, calls = json.dumps({"name": call["name"], "arguments": call["arguments"]}), []
        lines = [_line(body, chat, piece, []) for piece in _pieces(text, _chunk_size(spec))]
        if calls:
            lines.append(_line(body, chat, "", calls))
        final = _line(body, chat, "", [])
        final.update(done=True, done_reason="stop", total_duration=1_000_000)
        prompt_count, eval_count = _counts(spec, prompt, text, calls)
        if not self.ollama.omit_prompt_count:
            final["prompt_eval_count"] = prompt_count
        final["eval_count"] = eval_count
        if isinstance(spec, StreamBreakReply):
            self._break_ndjson(lines)
        elif stream:
            self._send_ndjson([*lines, final])
            self._write_chunk(b"")  # the stream's end
        else:
            self._send_json(200, _merged(chat, lines, final))

    def _send_ndjson(self, lines: list[dict[str, Any]]) -> None:
        """One JSON object a line, chunked, as Ollama streams."""
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for line in lines:
            self._write_chunk(json.dumps(line).encode() + b"\n")

    def _break_ndjson(self, lines: list[dict[str, Any]]) -> None:
        self._send_ndjson(lines)
        time.sleep(0.02)  # let the client read what was sent, then drop the connection
        self.close_connection = True
        self.connection.close()

    def _show(self, raw: bytes) -> None:
        body = json.loads(raw or b"{}")
        name = str(body.get("model") or body.get("name") or "")
        owner = self.ollama
        with owner._lock:
            owner.show_requests.append(body)
            shown = owner._shown.get(name) or owner._shown.get(name.split(":")[0])
        if shown is None:
            self._send_json(404, {"error": f"model '{name}' not found"})
            return
        context_length, delay = shown
        owner._sleep(delay)
        info = {"general.architecture": "llama", "llama.context_length": context_length}
        self._send_json(
            200,
            {
                "template": "{{ if .Tools }}tools{{ end }}{{ .Prompt }}",
                "details": {"family": "llama", "parameter_size": "8.0B"},
                "model_info": info,
                "capabilities": ["completion", "tools"],
            },
        )


ScriptedOllamaServer.handler_class = _OllamaHandler


def _invalid(body: dict[str, Any], path: str) -> str | None:
    """Ollama's 400 for a malformed request, or None."""
    if not body.get("model"):
        return "model is required"
    options = body.get("options") or {}
    if not isinstance(options, dict):
        return "json: cannot unmarshal options into map[string]interface {}"
    num_ctx = options.get("num_ctx")
    if num_ctx is not None and (isinstance(num_ctx, bool) or not isinstance(num_ctx, int)):
        return f"option num_ctx must be of type integer, got {num_ctx!r}"
    if path == "/api/generate":
        return None if isinstance(body.get("prompt", ""), str) else "prompt must be a string"
    for message in body.get("messages") or []:
        if message.get("role") not in _ROLES:
            return f"invalid role: {message.get('role')!r}"
        if not isinstance(message.get("content", ""), str):
            return (
                "json: cannot unmarshal array into Go struct field Message.content of type string"
            )
        for call in message.get("tool_calls") or []:
            if not isinstance((call.get("function") or {}).get("arguments"), dict):
                return (
                    "json: cannot unmarshal string into Go struct field "
                    "ToolCallFunction.arguments of type map[string]interface {}"
                )
    return None


def _reply_parts(spec: Reply) -> tuple[str, list[dict[str, Any]]]:
    if isinstance(spec, TextReply):
        return spec.text, []
    if isinstance(spec, StreamBreakReply):
        return spec.partial_text, []
    if isinstance(spec, ToolCallsReply):
        calls = [
            {"id": call_id, "function": {"name": name, "arguments": json.loads(arguments)}}
            for call_id, name, arguments in spec.calls
        ]
        return spec.content, calls
    assert isinstance(spec, EmptyReply)
    return "", []


def _chunk_size(spec: Reply) -> int:
    return int(getattr(spec, "chunk_size", 5))


def _counts(spec: Reply, prompt: int, text: str, calls: list[dict[str, Any]]) -> tuple[int, int]:
    usage = getattr(spec, "usage", None)
    if usage is not None:
        return int(usage[0]), int(usage[1])
    out = text + json.dumps(calls) if calls else text
    return prompt, max(1, len(out.encode()) // 4)


def _line(
    body: dict[str, Any], chat: bool, text: str, calls: list[dict[str, Any]]
) -> dict[str, Any]:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    line: dict[str, Any] = {"model": body["model"], "created_at": stamp}
    if chat:
        line["message"] = {"role": "assistant", "content": text}
        if calls:
            line["message"]["tool_calls"] = calls
    else:
        line["response"] = text
    line["done"] = False
    return line


def _merged(chat: bool, lines: list[dict[str, Any]], final: dict[str, Any]) -> dict[str, Any]:
    """The non-streaming answer: one object, the text joined, the counts of the last line."""
    whole = dict(final)
    if chat:
        message = {"role": "assistant", "content": "".join(x["message"]["content"] for x in lines)}
        calls = [c for x in lines for c in x["message"].get("tool_calls", [])]
        if calls:
            message["tool_calls"] = calls
        whole["message"] = message
    else:
        whole["response"] = "".join(x["response"] for x in lines)
    return whole
