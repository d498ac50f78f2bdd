"""The MCP client sessions: one background event loop thread holds every server's session.

The SDK is async; the engine is not. Each server's session lives in one task on the
manager's loop (its transport's contexts are entered and left by that task), and the
engine calls through ``call``, a synchronous wrapper that waits in short slices so a
Ctrl-C reaches the waiting thread and cancels the call. Servers connect in the background
when the manager starts (the prompt does not wait for them); their tools arrive when ready.

Failure is local: a server that does not start, stops, hangs past its timeout or answers
what is not MCP is marked failed with one line saying which and why, its session is
closed, and the next call of one of its tools starts it again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from harness9.config import McpServer, harness9_home
from harness9.tools.mcp.schemas import schema_problem

READY = "ready"
CONNECTING = "connecting"
FAILED = "failed"
OFF = "off"  # not started yet (or stopped on purpose)
NOT_APPROVED = "not approved"
DISABLED = "disabled"
START_AT_LEAST_S = 30.0  # a server may take this long to start, even with a shorter call timeout
# A start that timed out or was called off still stops the server's process: the SDK closes
# its stdin, waits 2 s, then kills it; a wait for the start to settle allows for that.
STOP_GRACE_S = 5.0
WAIT_STEP_S = 0.05  # how often a waiting call looks up (and can take a Ctrl-C)
LOG_DIR = "mcp-logs"
LOG_MAX_BYTES = 1 << 20  # a server's log past this is moved to NAME.log.1 when it starts


@dataclass(slots=True, frozen=True)
class RemoteTool:
    """One tool a server lists: its own name, description and JSON schema, and whether it
    declares that it only reads (``readOnlyHint``)."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool = False


@dataclass(slots=True, frozen=True)
class CallResult:
    """What a call returned, as plain data: content items (the SDK's dicts) and isError."""

    content: list[dict[str, Any]]
    structured: dict[str, Any] | None
    is_error: bool


class ServerUnavailable(Exception):
    """The server cannot take the call: it did not start, stopped, hung or answered garbage."""


@dataclass(slots=True)
class ServerView:
    """What ``mcp list`` and ``/mcp`` show of a server."""

    config: McpServer
    state: str
    error: str
    tools: list[RemoteTool]
    refused: list[str] = field(default_factory=list)  # tools not offered: "name (why)"


@dataclass(slots=True)
class _Server:
    config: McpServer
    state: str = OFF
    error: str = ""
    tools: list[RemoteTool] = field(default_factory=list)
    client: Any = None
    done: threading.Event = field(default_factory=threading.Event)  # the start is settled
    released: threading.Event = field(default_factory=threading.Event)  # the session is closed
    stop: asyncio.Event | None = None
    task: asyncio.Task[None] | None = None  # the task holding the session
    # The start's cancel scope: a start is called off through it, never by cancelling the
    # task, whose cancellation could cut the SDK's shielded stop of the process short.
    starting: Any = None
    generation: int = 0
    http_status: str = ""  # an HTTP server's last error status ("HTTP 401 Unauthorized")
    refused: list[str] = field(default_factory=list)  # tools not offered, with why


class McpManager:
    """Every configured server's session; thread-safe; ``close`` stops them all."""

    def __init__(
        self,
        servers: list[McpServer],
        *,
        approved: Callable[[McpServer], bool] = lambda _s: True,
        on_notice: Callable[[str], None] | None = None,
    ) -> None:
        self._servers = {s.name: _Server(s) for s in servers}
        for srv in self._servers.values():
            if srv.config.invalid:  # a wrong .mcp.json entry: reported, never started
                srv.state, srv.error = FAILED, srv.config.invalid
            elif not srv.config.enabled:
                srv.state = DISABLED
            elif not approved(srv.config):
                srv.state = NOT_APPROVED
        self.on_notice = on_notice
        self.loaded: set[str] = set()  # tools tool_search found this chat (callable names)
        self._lock = threading.Lock()
        self._restarting = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- lifetime ---------------------------------------------------------------------

    def start(self) -> None:
        """Connect every enabled, approved server in the background; returns at once."""
        for srv in self._servers.values():
            if srv.state == OFF:
                self._connect(srv)

    def connecting(self) -> bool:
        return any(s.state == CONNECTING for s in self._servers.values())

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until no server is still connecting (each at most its own timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for srv in list(self._servers.values()):
            if srv.state == CONNECTING:
                left = _start_timeout(srv.config) + STOP_GRACE_S
                if deadline is not None:
                    left = min(left, max(0.0, deadline - time.monotonic()))
                _wait(srv.done, left)

    def close(self) -> None:
        """Stop every session (and so every stdio server's process), then the loop."""
        loop = self._loop
        if loop is None:
            return
        for srv in self._servers.values():
            if srv.state == CONNECTING:
                srv.state = OFF  # closing, not failing: nothing to report
            self._stop(srv)
        for srv in self._servers.values():
            if srv.task is not None:
                srv.released.wait(5)  # its process is stopped before the loop is
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        self._loop = None

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                _quiet_sdk_logging()
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=run, name="harness9-mcp", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    # -- what the toolset and the listings read ---------------------------------------

    def views(self) -> list[ServerView]:
        return [
            ServerView(s.config, s.state, s.error, list(s.tools), list(s.refused))
            for s in self._servers.values()
        ]

    def names(self) -> list[str]:
        return list(self._servers)

    def unavailable(self, name: str) -> str:
        """Why server ``name``'s tools cannot be called now ("" when they can, or may)."""
        srv = self._servers.get(name)
        return srv.error if srv is not None and srv.state == FAILED else ""

    def tools(self) -> list[RemoteTool]:
        """The tools of every server that listed them (a failed one's are kept: the model
        is told they are unavailable, and a call starts the server again)."""
        return [t for s in self._servers.values() for t in s.tools]

    # -- connecting ---------------------------------------------------------------------

    def _connect(self, srv: _Server) -> None:
        loop = self._ensure_loop()
        srv.state, srv.error = CONNECTING, ""
        srv.done.clear()
        srv.released.clear()
        srv.generation += 1
        asyncio.run_coroutine_threadsafe(self._hold(srv, srv.generation), loop)

    async def _hold(self, srv: _Server, generation: int) -> None:
        """Open the session, list the tools, then keep it open until stopped."""
        srv.stop = asyncio.Event()
        srv.task = asyncio.current_task()
        srv.starting = None
        log = _log_path(srv.config.name)
        _rotate(log)
        started = _log_size(log)
        try:
            with _log_file(log) as errlog:
                await self._session(srv, errlog)
        except BaseException as exc:  # noqa: BLE001 - the server's failure, reported as one line
            if srv.generation == generation and srv.state in (CONNECTING, READY):
                what = "did not start" if srv.state == CONNECTING else "stopped"
                why = f"{describe(exc, srv.config.cwd)}{_status(srv)}{_last_line(log, started)}"
                self._fail(srv, f"{what}: {why}")
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
        finally:
            if srv.generation == generation:  # not a newer attempt's business
                srv.client = None
                if srv.state == READY:
                    srv.state = OFF  # closed on purpose (manager.close)
                srv.done.set()
                srv.released.set()

    async def _session(self, srv: _Server, errlog: Any) -> None:
        import anyio
        from mcp import Client

        cfg = srv.config

        async def on_message(message: Any) -> None:
            if isinstance(message, Exception):  # a line that is not JSON-RPC: not MCP
                self._fail(srv, f"answered garbage: {_garbage(message)}")

        async def on_response(response: Any) -> None:
            if response.status_code >= 400:  # the SDK's error leaves the status out
                srv.http_status = f"HTTP {response.status_code} {response.reason_phrase}".strip()

        srv.http_status = ""
        transport = _transport(cfg, errlog, on_response)
        with anyio.CancelScope(deadline=anyio.current_time() + _start_timeout(cfg)) as scope:
            srv.starting = scope
            async with Client(transport, message_handler=on_message) as client:
                listed = await _list_tools(client)
                srv.tools = [
                    RemoteTool(
                        cfg.name,
                        t.name,
                        t.description or "",
                        dict(t.input_schema),
                        bool(t.annotations and t.annotations.read_only_hint),
                    )
                    for t in listed
                ]
                srv.tools = self._offerable(srv, srv.tools)
                srv.client, srv.state = client, READY
                srv.done.set()
                scope.deadline = math.inf
                assert srv.stop is not None
                await srv.stop.wait()
        if scope.cancelled_caught and srv.state == CONNECTING:  # the deadline, not a stop
            raise TimeoutError

    def _offerable(self, srv: _Server, tools: list[RemoteTool]) -> list[RemoteTool]:
        """``tools`` but those whose input schema a provider would refuse, which would fail
        every request of the chat (harness9.tools.mcp.schemas); each is said in one line."""
        kept, refused = [], []
        for tool in tools:
            why = schema_problem(tool.input_schema)
            if why is None:
                kept.append(tool)
            else:
                refused.append(f"{tool.name} ({why})")
        srv.refused = refused
        if refused and self.on_notice is not None:
            self.on_notice(
                f"mcp: server {srv.config.name}: not offering {', '.join(refused)}: "
                "a model provider refuses every request whose tools have an invalid input schema"
            )
        return kept

    def _fail(self, srv: _Server, why: str) -> None:
        srv.state, srv.error = FAILED, why
        self._stop(srv)
        if self.on_notice is not None:
            self.on_notice(f"mcp: server {srv.config.name} {why}")

    def _stop(self, srv: _Server) -> None:
        """End the session: a ready one is let go; one still starting is cancelled."""
        loop, stop, task = self._loop, srv.stop, srv.task
        if loop is None:
            return
        if srv.client is None and task is not None:
            loop.call_soon_threadsafe(_call_off, srv, task)
        elif stop is not None:
            loop.call_soon_threadsafe(stop.set)

    def ensure(self, name: str) -> None:
        """Have server ``name`` ready: wait for its connection, or start it again after a
        failure; ServerUnavailable when it cannot be had."""
        srv = self._servers[name]
        if srv.state in (NOT_APPROVED, DISABLED):
            raise ServerUnavailable(f"server {name} is {srv.state}")
        if srv.config.invalid:  # starting it again cannot help: its entry is wrong
            raise ServerUnavailable(f"server {name} {srv.error}")
        with self._restarting:  # sub-agents side by side start it once, not once each
            if srv.state in (FAILED, OFF):
                self._connect(srv)
        if srv.state == CONNECTING:
            _wait(srv.done, _start_timeout(srv.config) + STOP_GRACE_S)
        if srv.state != READY:
            raise ServerUnavailable(f"server {name} {srv.error or 'is not ready'}")

    # -- calling --------------------------------------------------------------------------

    def call(
        self,
        server: str,
        tool: str,
        args: dict[str, Any],
        *,
        stop: threading.Event | None = None,
    ) -> CallResult:
        """Call ``tool`` of ``server`` and wait for it (at most the server's timeout).

        ServerUnavailable when the server cannot answer; KeyboardInterrupt (Ctrl-C while
        waiting) cancels the call and propagates."""
        self.ensure(server)
        srv = self._servers[server]
        loop = self._ensure_loop()
        fut = asyncio.run_coroutine_threadsafe(self._call(srv, tool, args), loop)
        deadline = time.monotonic() + srv.config.timeout
        try:
            while True:
                try:
                    return fut.result(WAIT_STEP_S)
                except concurrent.futures.TimeoutError:
                    pass
                if stop is not None and stop.is_set():
                    fut.cancel()
                    raise KeyboardInterrupt
                if time.monotonic() >= deadline:
                    fut.cancel()
                    why = f"hung: {tool} got no answer within {srv.config.timeout:g}s"
                    self._fail(srv, why)
                    raise ServerUnavailable(f"server {server} {why}")
        except BaseException:
            fut.cancel()
            raise

    async def _call(self, srv: _Server, tool: str, args: dict[str, Any]) -> CallResult:
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED
        from pydantic import ValidationError

        client = srv.client
        if client is None:
            raise ServerUnavailable(f"server {srv.config.name} {srv.error or 'is not ready'}")
        srv.http_status = ""  # an earlier answer's status says nothing of this call's
        try:
            result = await client.call_tool(tool, args)
        except MCPError as exc:
            # An HTTP server's refusal (an expired token: 401) is named by its status.
            said = exc.error.message + _status(srv)
            if exc.code == CONNECTION_CLOSED:
                self._fail(srv, f"stopped: {exc.error.message.lower()}{_status(srv)}")
                raise ServerUnavailable(f"server {srv.config.name} {srv.error}") from None
            # The server answered: the call failed, the server is fine.
            return CallResult([{"type": "text", "text": said}], None, True)
        except ValidationError as exc:
            self._fail(srv, f"answered garbage: {exc.error_count()} invalid fields in its reply")
            raise ServerUnavailable(f"server {srv.config.name} {srv.error}") from None
        content = [item.model_dump(by_alias=True, exclude_none=True) for item in result.content]
        return CallResult(content, result.structured_content, bool(result.is_error))


def _call_off(srv: _Server, task: asyncio.Task[None]) -> None:
    """Stop a start (on the loop's thread): through its cancel scope once it has one, so the
    SDK still stops the server's process; before that no process exists, and the task
    itself is cancelled."""
    if srv.starting is not None:
        srv.starting.cancel()
    else:
        task.cancel()


async def _list_tools(client: Any) -> list[Any]:
    tools: list[Any] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools


def _status(srv: _Server) -> str:
    """`` (HTTP 401 Unauthorized)`` when an HTTP server's last answer was an error status."""
    return f" ({srv.http_status})" if srv.http_status else ""


def _transport(cfg: McpServer, errlog: Any, on_response: Callable[[Any], Any]) -> Any:
    if cfg.url:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(
            headers=dict(cfg.headers),
            timeout=httpx2.Timeout(30.0, read=300.0),
            event_hooks={"response": [on_response]},
        )
        return streamable_http_client(cfg.url, http_client=http)
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=cfg.command, args=list(cfg.args), env=dict(cfg.env) or None, cwd=cfg.cwd or None
    )
    return stdio_client(params, errlog=errlog)


def describe(exc: BaseException, cwd: str = "") -> str:
    """One line for a failure, the first real error inside an exception group (``cwd``:
    the server's configured directory, which a missing one names instead of its command)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "no answer within its timeout"
    from mcp.shared.exceptions import MCPError  # only failures of a started session get here

    if isinstance(exc, MCPError):
        return exc.error.message.lower()
    if isinstance(exc, FileNotFoundError):
        if cwd and exc.filename == cwd:
            return f"its cwd does not exist ({cwd})"
        return f"command not found ({exc.filename or exc})"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _garbage(exc: Exception) -> str:
    """What a server wrote that is not MCP: the line itself, when the SDK kept it."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        errors = exc.errors()
        if errors and isinstance(errors[0].get("input"), str):
            return f"{errors[0]['input'][:80]!r} is not an MCP message"
    return describe(exc)


def _quiet_sdk_logging() -> None:
    """The SDK logs a server's failures with tracebacks; they go to the log file, not the
    terminal (harness9 says what failed in one line)."""
    import logging

    logger = logging.getLogger("mcp")
    if logger.handlers:
        return
    handler: logging.Handler
    try:
        path = _log_path("client")
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8")
    except OSError:  # a home that cannot hold logs (read-only): not a reason to fail
        handler = logging.NullHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False


def _start_timeout(cfg: McpServer) -> float:
    return max(cfg.timeout, START_AT_LEAST_S)


def _wait(event: threading.Event, timeout: float) -> None:
    """Wait in short slices, so a Ctrl-C reaches this (the main) thread."""
    deadline = time.monotonic() + timeout
    while not event.wait(WAIT_STEP_S) and time.monotonic() < deadline:
        pass


def _log_path(name: str) -> Path:
    return harness9_home() / LOG_DIR / f"{name}.log"


@contextlib.contextmanager
def _log_file(path: Path) -> Iterator[IO[str]]:
    """A stdio server's stderr: its log file, or the null device when the home cannot hold
    one (a read-only HARNESS9_HOME, say): the server runs all the same, unlogged."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = path.open("a", encoding="utf-8", errors="replace")
    except OSError:
        fh = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - closed by the with below
    with fh:
        yield fh


def _rotate(path: Path) -> None:
    """Keep a chatty server's log from growing without end: past LOG_MAX_BYTES it becomes
    NAME.log.1 (replacing the one before), and the server starts a new NAME.log."""
    if _log_size(path) > LOG_MAX_BYTES:
        with contextlib.suppress(OSError):
            path.replace(path.with_name(path.name + ".1"))


def _log_size(path: Path) -> int:
    with contextlib.suppress(OSError):
        return path.stat().st_size
    return 0


def _last_line(path: Path, start: int) -> str:
    """The last line the server wrote on stderr during this attempt, as a hint."""
    try:
        with path.open("rb") as fh:
            fh.seek(start)
            lines = [ln for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return f" (its last words: {lines[-1].strip()[:200]})" if lines else ""
