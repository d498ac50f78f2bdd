"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests and scripts.

It is a real HTTP server, so litellm talks to it exactly as it would to a hosted
model: ``--model openai/<name> --api-base <server.base_url>``. Each test queues
the replies it expects, in order; a request with nothing queued gets HTTP 500
"scripted server: no reply queued" so an under-scripted test fails loudly.

    with ScriptedLLMServer() as server:
        server.reply_text("hello", usage=(12, 3))
        server.reply_tool_calls([("call_1", "bash", '{"command": "ls"}')])
        ...
        assert server.requests[0]["stream"] is True

``respond_with(fn)`` installs a dynamic responder consulted before the queue:
``fn(request_body)`` returns a reply spec (or a plain string, meaning a text
reply), or None to fall through to the queue.

Streaming follows OpenAI: SSE ``data: {...}`` chunks with chunked transfer
encoding, tool-call arguments split over several deltas (parallel calls by
``index``), a final ``choices: []`` chunk carrying ``usage`` when the request
asked for ``stream_options.include_usage``, then ``data: [DONE]``.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

NO_REPLY_MESSAGE = "scripted server: no reply queued"


@dataclass(slots=True, frozen=True)
class TextReply:
    text: str
    usage: tuple[int, ...] | None = None  # (prompt, completion[, cached]) tokens; None: estimated
    chunk_size: int = 5  # characters per streamed delta
    delay: float = 0.0  # seconds to wait before answering
    chunk_delay: float = 0.0  # seconds between streamed deltas (a slow model)


@dataclass(slots=True, frozen=True)
class ToolCallsReply:
    calls: tuple[tuple[str, str, str], ...]  # (id, name, arguments_json)
    content: str = ""
    usage: tuple[int, int] | None = None
    chunk_size: int = 5
    delay: float = 0.0
    chunk_delay: float = 0.0


@dataclass(slots=True, frozen=True)
class ErrorReply:
    status: int
    message: str
    type: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    # More fields of the error object (llama.cpp's n_prompt_tokens and n_ctx).
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class StreamBreakReply:
    """Starts a 200 response, sends ``partial_text``, then drops the connection."""

    partial_text: str
    chunk_size: int = 5
    delay: float = 0.0


@dataclass(slots=True, frozen=True)
class DeadStreamReply:
    """A 200 whose stream then ends with no text, no tool call and no usage: how
    llama-cpp-python's server fails a streamed request that is over its window. With
    ``finish`` the stream still says ``finish_reason: stop``; without, it just ends."""

    finish: bool = False
    delay: float = 0.0


@dataclass(slots=True, frozen=True)
class EmptyReply:
    """An assistant message with empty content and no tool calls."""

    usage: tuple[int, int] | None = None
    delay: float = 0.0


Reply = TextReply | ToolCallsReply | ErrorReply | StreamBreakReply | EmptyReply | DeadStreamReply
Responder = Callable[[dict[str, Any]], "Reply | str | None"]

_DEFAULT_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
}


class ScriptedLLMServer:
    # The request handler: another protocol's server (tests/support/ollama_server.py,
    # tests/support/gemini_server.py) subclasses this one and names its own.
    handler_class: type[BaseHTTPRequestHandler] | None = None

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host, self._port = host, port
        self._lock = threading.Lock()
        self._queue: deque[Reply] = deque()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._responder: Responder | None = None
        # Ollama's POST /api/show: model name -> (context length, seconds to wait first).
        self._shown: dict[str, tuple[int, float]] = {}
        # GET routes answered with fixed JSON (a local server's window: llama.cpp's /props,
        # vLLM's /v1/models, LM Studio's /api/v0/models), path -> body.
        self._routes: dict[str, Any] = {}
        self.get_requests: list[str] = []
        self.show_requests: list[dict[str, Any]] = []
        # (arrived, answered) perf_counter() seconds of each chat request, parallel to
        # ``requests``: when its body was read and when its reply was fully sent.
        self._timings: list[tuple[float, float]] = []
        # Bodies of requests whose client closed the connection during their delay.
        self._abandoned: list[dict[str, Any]] = []
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> ScriptedLLMServer:
        if self._httpd is not None:
            return self
        httpd = _QuietServer((self._host, self._port), self.handler_class or _Handler)
        httpd.daemon_threads = True
        httpd.owner = self  # type: ignore[attr-defined]
        self._httpd = httpd
        self._stopping.clear()
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()  # wakes handlers sleeping in a scripted delay
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}/v1"

    # -- what was received -----------------------------------------------------------------
    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every JSON body received, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """Headers of every request (lower-cased names), parallel to ``requests``."""
        with self._lock:
            return list(self._headers)

    @property
    def abandoned(self) -> list[dict[str, Any]]:
        """Requests whose client closed the connection before their scripted delay ended."""
        with self._lock:
            return list(self._abandoned)

    @property
    def timings(self) -> list[tuple[float, float]]:
        """(arrived, answered) ``time.perf_counter()`` of each chat request (a copy)."""
        with self._lock:
            return list(self._timings)

    @property
    def pending(self) -> int:
        """Replies still queued."""
        with self._lock:
            return len(self._queue)

    # -- the script ------------------------------------------------------------------------
    def reply(self, spec: Reply) -> None:
        with self._lock:
            self._queue.append(spec)

    def reply_text(
        self,
        text: str,
        *,
        usage: tuple[int, ...] | None = None,
        chunk_size: int = 5,
        delay: float = 0.0,
        chunk_delay: float = 0.0,
    ) -> None:
        self.reply(
            TextReply(
                text, usage=usage, chunk_size=chunk_size, delay=delay, chunk_delay=chunk_delay
            )
        )

    def reply_tool_calls(
        self,
        calls: list[tuple[str, str, str]],
        *,
        content: str = "",
        usage: tuple[int, int] | None = None,
        chunk_size: int = 5,
        delay: float = 0.0,
    ) -> None:
        self.reply(
            ToolCallsReply(
                tuple(calls), content=content, usage=usage, chunk_size=chunk_size, delay=delay
            )
        )

    def reply_error(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.reply(
            ErrorReply(
                status,
                message,
                type=type,
                code=code,
                headers=headers or {},
                delay=delay,
                extra=extra or {},
            )
        )

    def reply_stream_break(
        self, partial_text: str, *, chunk_size: int = 5, delay: float = 0.0
    ) -> None:
        self.reply(StreamBreakReply(partial_text, chunk_size=chunk_size, delay=delay))

    def reply_empty(self, *, usage: tuple[int, int] | None = None, delay: float = 0.0) -> None:
        self.reply(EmptyReply(usage=usage, delay=delay))

    def reply_delay(self, seconds: float, then: Reply | None = None) -> None:
        """Wait ``seconds`` before answering with ``then`` (an empty reply by default)."""
        self.reply(replace(then if then is not None else EmptyReply(), delay=seconds))

    def show_model(self, name: str, context_length: int, *, delay: float = 0.0) -> None:
        """Answer Ollama's ``POST /api/show`` and Lemonade's ``GET /models/{name}`` for
        ``name`` with this context length (each in its server's own shape); other names
        get a 404. Both are recorded in ``show_requests``."""
        with self._lock:
            self._shown[name] = (context_length, delay)

    def serve_get(self, path: str, body: Any) -> None:
        """Answer ``GET path`` (from the server's root, e.g. ``/props``) with ``body``."""
        with self._lock:
            self._routes[path.rstrip("/")] = body

    @property
    def root_url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def respond_with(self, fn: Responder | None) -> None:
        """Consult ``fn(body)`` before the queue; None from it falls through to the queue."""
        with self._lock:
            self._responder = fn

    # -- used by the handler ---------------------------------------------------------------
    def _take(self, body: dict[str, Any], headers: dict[str, str]) -> Reply | None:
        with self._lock:
            self._requests.append(body)
            self._headers.append(headers)
            responder = self._responder
        if responder is not None:
            spec = responder(body)
            if isinstance(spec, str):
                return TextReply(spec)
            if spec is not None:
                return spec
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)


def is_summary_request(body: dict[str, Any]) -> bool:
    """A summariser's call, whatever its prompt: chat requests always offer the tools."""
    return not body.get("tools")


# -- wire format ---------------------------------------------------------------------------


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _usage(spec_usage: tuple[int, ...] | None, body: dict[str, Any], out_text: str) -> dict:
    if spec_usage is None:
        # Deterministic stand-in: bytes / 4 of the messages and, as OpenAI counts them in
        # ``prompt_tokens``, the tool definitions.
        tools = body.get("tools") or []
        sent = len(json.dumps(body.get("messages", []))) + (len(json.dumps(tools)) if tools else 0)
        prompt = max(1, sent // 4)
        spec_usage = (prompt, max(1, len(out_text.encode()) // 4))
    prompt, completion, *cached = spec_usage
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached:  # (prompt, completion, cached): OpenAI's prompt-cache report
        usage["prompt_tokens_details"] = {"cached_tokens": cached[0]}
    return usage


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client that was killed mid-request (chaos runs): not a server bug
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked streams, so an abrupt close is detectable
    # TCP_NODELAY, as hosted APIs' servers and httpcore's client sockets set it. Without it
    # a reply's body (written after its headers) waits in the kernel for the client's
    # delayed ACK, ~40 ms per call, and timings taken here (bench_overhead.py) count that
    # wait as harness9's or litellm's.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # keep test output clean

    @property
    def owner(self) -> ScriptedLLMServer:
        return self.server.owner  # type: ignore[attr-defined]

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        try:
            self._handle_post()
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (e.g. its timeout fired during a scripted delay).
            self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0].rstrip("/")
        owner = self.owner
        with owner._lock:
            owner.get_requests.append(path)
            routed = owner._routes.get(path)
        if routed is not None:
            self._send_json(200, routed)
            return
        if "/models/" in path:
            self._lemonade_model(unquote(path.rsplit("/models/", 1)[1]))
            return
        self._send_json(404, _error_body(f"no route for GET {self.path}", None, None))

    def _lemonade_model(self, name: str) -> None:
        """Lemonade's ``GET /models/{name}``: the context size in ``recipe_options``."""
        owner = self.owner
        with owner._lock:
            owner.show_requests.append({"name": name})
            shown = owner._shown.get(name)
        if shown is None:
            self._send_json(404, _error_body(f"model '{name}' not found", None, None))
            return
        context_length, delay = shown
        owner._sleep(delay)
        self._send_json(
            200, {"id": name, "recipe": "llamacpp", "recipe_options": {"ctx_size": context_length}}
        )

    def _wait_for_client(self, seconds: float) -> bool:
        """The scripted delay; False as soon as the client closes the connection during
        it (a cancelled request), which ``abandoned`` then lists."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0 and not self.owner._stopping.is_set():
            readable, _, _ = select.select([self.connection], [], [], min(left, 0.02))
            if not readable:
                continue
            try:
                data = self.connection.recv(1, socket.MSG_PEEK)
            except OSError:
                data = b""
            if not data:
                return False
            self.owner._sleep(end - time.monotonic())  # a pipelined request: just wait
        return True

    def _handle_post(self) -> None:
        arrived = time.perf_counter()  # the headers are in; the body is read below
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/api/show"):
            self._show(raw)
            return
        if not path.endswith("/chat/completions"):
            self._send_json(404, _error_body(f"no route for POST {self.path}", None, None))
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            self._send_json(400, _error_body(f"invalid JSON body: {exc}", None, None))
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        refused = _invalid_tool_schema(body)
        if refused is not None:
            with self.owner._lock:
                self.owner._requests.append(body)
            self._send_json(400, refused)
            return
        try:
            self._answer(body, headers)
        finally:
            with self.owner._lock:
                self.owner._timings.append((arrived, time.perf_counter()))

    def _answer(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        spec = self.owner._take(body, headers)
        if spec is None:
            self._send_json(500, _error_body(NO_REPLY_MESSAGE, "server_error", None))
            return
        if not self._wait_for_client(spec.delay):
            with self.owner._lock:
                self.owner._abandoned.append(body)
            self.close_connection = True
            return
        if self.owner._stopping.is_set():
            self.close_connection = True
            return
        stream = bool(body.get("stream"))
        if isinstance(spec, ErrorReply):
            err_type = spec.type or _DEFAULT_ERROR_TYPES.get(spec.status, "server_error")
            payload = _error_body(spec.message, err_type, spec.code)
            payload["error"].update(spec.extra)
            self._send_json(spec.status, payload, spec.headers)
        elif isinstance(spec, StreamBreakReply):
            self._break(spec, body, stream)
        elif isinstance(spec, DeadStreamReply):
            self._dead_stream(spec, body)
        elif stream:
            self._stream(spec, body)
        else:
            self._send_json(200, _completion(spec, body))

    def _show(self, raw: bytes) -> None:
        """Ollama's model details: the context length under ``<architecture>.context_length``."""
        body = json.loads(raw or b"{}")
        owner = self.owner
        with owner._lock:
            owner.show_requests.append(body)
            shown = owner._shown.get(str(body.get("name") or body.get("model") or ""))
        if shown is None:
            self._send_json(404, {"error": f"model '{body.get('name')}' not found"})
            return
        context_length, delay = shown
        owner._sleep(delay)
        if owner._stopping.is_set():
            self.close_connection = True
            return
        info = {"general.architecture": "llama", "llama.context_length": context_length}
        self._send_json(200, {"template": "{{ .Prompt }}", "model_info": info})

    # -- plain responses ---------------------------------------------------------------------
    def _send_json(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    # -- streaming ---------------------------------------------------------------------------
    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, payload: dict | str, pause: float = 0.0) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self._write_chunk(f"data: {text}\n\n".encode())
        self.owner._sleep(pause)

    def _stream(self, spec: Reply, body: dict[str, Any]) -> None:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        model = body.get("model", "scripted")
        chunk = _chunk_factory(model, include_usage)
        self._start_stream()
        self._event(chunk({"role": "assistant", "content": ""}))
        text = ""
        finish = "stop"
        if isinstance(spec, TextReply | ToolCallsReply):
            text = spec.text if isinstance(spec, TextReply) else spec.content
            for piece in _pieces(text, spec.chunk_size):
                self._event(chunk({"content": piece}), spec.chunk_delay)
        if isinstance(spec, ToolCallsReply):
            finish = "tool_calls"
            for index, (call_id, name, arguments) in enumerate(spec.calls):
                head = {"index": index, "id": call_id, "type": "function"}
                head["function"] = {"name": name, "arguments": ""}
                self._event(chunk({"tool_calls": [head]}))
                # Several argument pieces per call, as OpenAI sends them.
                for piece in _pieces(arguments, max(1, min(spec.chunk_size, len(arguments) // 2))):
                    delta = {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                    self._event(chunk(delta), spec.chunk_delay)
        self._event(chunk({}, finish_reason=finish))
        if include_usage:
            out = text + "".join(a for _, _, a in getattr(spec, "calls", ()))
            usage = _usage(getattr(spec, "usage", None), body, out)
            final = chunk(None)
            final["usage"] = usage
            self._event(final)
        self._event("[DONE]")
        self._write_chunk(b"")  # the terminating zero-length chunk

    def _dead_stream(self, spec: DeadStreamReply, body: dict[str, Any]) -> None:
        """200, the role, then the end: no text, no usage (a finish reason if ``finish``)."""
        chunk = _chunk_factory(body.get("model", "scripted"), include_usage=False)
        self._start_stream()
        self._event(chunk({"role": "assistant", "content": ""}))
        if spec.finish:
            self._event(chunk({}, finish_reason="stop"))
        self._event("[DONE]")
        self._write_chunk(b"")

    def _break(self, spec: StreamBreakReply, body: dict[str, Any], stream: bool) -> None:
        if stream:
            chunk = _chunk_factory(body.get("model", "scripted"), include_usage=False)
            self._start_stream()
            self._event(chunk({"role": "assistant", "content": ""}))
            for piece in _pieces(spec.partial_text, spec.chunk_size):
                self._event(chunk({"content": piece}))
        else:
            # Promise a longer body than is sent: the client sees a truncated response.
            data = json.dumps({"id": "chatcmpl-broken", "choices": [{"message": {"content": ""}}]})
            cut = data.encode()[: len(data) // 2]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data) + 100))
            self.end_headers()
            self.wfile.write(cut)
            self.wfile.flush()
        # Drop the connection mid-body, without the chunked terminator.
        time.sleep(0.02)  # let the client read what was sent first
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


def _chunk_factory(model: str, include_usage: bool) -> Callable[..., dict]:
    created = int(time.time())

    def chunk(delta: dict | None, finish_reason: str | None = None) -> dict:
        out: dict[str, Any] = {
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": []
            if delta is None
            else [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        if include_usage:
            out["usage"] = None
        return out

    return chunk


def _completion(spec: Reply, body: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": ""}
    finish = "stop"
    out_text = ""
    if isinstance(spec, TextReply):
        message["content"] = out_text = spec.text
    elif isinstance(spec, ToolCallsReply):
        finish = "tool_calls"
        message["content"] = spec.content or None
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in spec.calls
        ]
        out_text = spec.content + "".join(a for _, _, a in spec.calls)
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "scripted"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": _usage(getattr(spec, "usage", None), body, out_text),
    }


def _invalid_tool_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's refusal of a request one of whose tools' ``parameters`` is not a JSON Schema
    (draft 2020-12) of an object, in its words, e.g. ``Invalid schema for function 'f':
    [] is not of type 'object', 'boolean'.`` (code ``invalid_function_parameters``)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    for i, tool in enumerate(body.get("tools") or []):
        function = tool.get("function") or {}
        schema = function.get("parameters")
        if schema is None:
            continue
        if not isinstance(schema, dict) or schema.get("type") != "object":
            got = schema.get("type") if isinstance(schema, dict) else type(schema).__name__
            why = f"schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{got}\"'."
        else:
            try:
                Draft202012Validator.check_schema(schema)
                continue
            except SchemaError as exc:
                why = f"{exc.message}."
        error = _error_body(
            f"Invalid schema for function '{function.get('name')}': {why}",
            "invalid_request_error",
            "invalid_function_parameters",
        )
        error["error"]["param"] = f"tools[{i}].function.parameters"
        return error
    return None


def _error_body(message: str, type_: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}
