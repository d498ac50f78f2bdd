"""The bash tool: one shell command in the working directory, with consent, timeout and a cap."""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

from harness9.schema import ToolDefinition
from harness9.store.session import OffloadLink
from harness9.tools.base import (
    Approval,
    OutputSink,
    ToolContext,
    ToolInterrupted,
    ToolResult,
    refusal,
)

DEFAULT_TIMEOUT = 120  # seconds
MAX_TIMEOUT = 600
HEAD_BYTES = 20 * 1024  # output kept from the start ...
TAIL_BYTES = 20 * 1024  # ... and from the end; the middle is dropped as it streams
READ_CHUNK = 64 * 1024
# Of a command the user stopped, the end of its output the model is told (what it was
# doing when stopped); the rest is not kept.
STOPPED_TAIL_CHARS = 4000
# After the shell exits, a background job may still hold the pipe open; stop
# waiting for it after this long instead of hanging the turn.
DRAIN_GRACE = 1.0

DECLINED = "the user declined to run this command"
REFUSED_NO_TTY = (
    "refused: shell commands need confirmation; re-run harness9 with --yes to allow them"
)


class HeadTail:
    """Keeps the first ``head`` and last ``tail`` bytes of a stream in bounded memory."""

    def __init__(self, head: int = HEAD_BYTES, tail: int = TAIL_BYTES) -> None:
        self._head_cap, self._tail_cap = head, tail
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            # Trim lazily (at twice the cap) so the copy cost stays amortised.
            if len(self._tail) > 2 * self._tail_cap:
                del self._tail[: -self._tail_cap]

    def render(self) -> str:
        tail = bytes(self._tail[-self._tail_cap :]) if self._tail_cap else b""
        omitted = self.total - len(self._head) - len(tail)
        head = self._head.decode("utf-8", errors="replace")
        if omitted <= 0:
            return head + tail.decode("utf-8", errors="replace")
        return (
            head + f"\n... {omitted} bytes omitted ...\n" + tail.decode("utf-8", errors="replace")
        )


class BashTool:
    name = "bash"

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            description=(
                "Run a bash command in the working directory and return its combined "
                "stdout and stderr followed by the exit code. Stdin is closed (no interactive "
                f"programs). Long output keeps only its first and last {HEAD_BYTES // 1024} KB. "
                "The user may be asked to approve the command."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The bash command to run."},
                    "timeout": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_TIMEOUT,
                        "description": (
                            f"Seconds before the command is killed. Default {DEFAULT_TIMEOUT}, "
                            f"at most {MAX_TIMEOUT}."
                        ),
                    },
                },
                "required": ["command"],
            },
        )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        command: str = args["command"]
        timeout: int = args.get("timeout", DEFAULT_TIMEOUT)
        if not ctx.assume_yes and not is_auto_approved(command, ctx.auto_approve):
            why = refusal(
                ctx,
                lambda: Approval("bash", command, f"Run: {command}?"),
                refused=REFUSED_NO_TTY,
                declined_as=DECLINED,
            )
            if why is not None:
                return ToolResult(content=why, is_error=True, metadata={"ran": False})
        return run_command(command, ctx, timeout)


# Names that hold credentials by convention (matched on the upper-cased name). A name
# matching any of them is removed from a command's environment unless the user lists it in
# HARNESS9_BASH_PASS_ENV (comma-separated), the deliberate way to hand one secret on.
_SECRET_NAME_RE = re.compile(
    r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE_KEY|API_KEY|ACCESS_KEY|SESSION_KEY)"
    r"|_KEY$|^KEY$"
    r"|^(AWS|AZURE|ARM|GOOGLE|GCLOUD|GCP|CLOUDSDK|DIGITALOCEAN|HEROKU|DOCKER_AUTH)_"
    r"|^(DATABASE_URL|MYSQL_PWD)$"
)
PASS_ENV_VAR = "HARNESS9_BASH_PASS_ENV"


def is_secret_name(name: str) -> bool:
    return _SECRET_NAME_RE.search(name.upper()) is not None


# Anything that could chain, redirect, substitute or background another command.
_SHELL_SYNTAX = re.compile(r"[;&|<>`$(){}\n\\*?\[\]~!#]")


def is_auto_approved(command: str, allowed: tuple[str, ...]) -> bool:
    """True when ``command`` is one of ``allowed`` (e.g. "git status") plus plain arguments.

    A listed command followed by words counts (``ls -la src``); anything that can
    run a second command or write a file (``;``, ``|``, ``>``, ``$(...)``, globs)
    never does, so ``ls; rm -rf ~`` is still asked about.
    """
    text = command.strip()
    if not allowed or not text or _SHELL_SYNTAX.search(text):
        return False
    words = text.split()
    for entry in allowed:
        prefix = entry.split()
        if prefix and words[: len(prefix)] == prefix:
            return True
    return False


def child_env() -> dict[str, str]:
    """The environment for a command: ours minus everything named like a credential.

    Output goes into the session database and back to the model, so ``env`` or a
    crash dump must not be able to copy a key or token there. Names listed in
    ``HARNESS9_BASH_PASS_ENV`` (comma-separated) are passed on anyway.
    """
    allowed = {n.strip() for n in os.environ.get(PASS_ENV_VAR, "").split(",") if n.strip()}
    return {k: v for k, v in os.environ.items() if k in allowed or not is_secret_name(k)}


# The command runs under this guard, in the same process group: a watcher waits on a pipe
# only harness9 writes to and kills the whole group when the pipe ends, i.e. when
# harness9 is gone, however it went (kill -9 included), so no command outlives it. The
# watcher holds neither the output nor the pipe's number for the command ($2: closed);
# once the command ends normally the guard stops the watcher and exits with its status.
_GUARD = """
{ read -r -u "$2" _; kill -KILL 0; } </dev/null >/dev/null 2>&1 &
watcher=$!
eval "exec $2<&-"
bash -c "$1"
status=$?
kill "$watcher" 2>/dev/null
exit "$status"
"""


def _start(command: str, ctx: ToolContext, lifeline: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["bash", "-c", _GUARD, "harness9-bash", command, str(lifeline)],
        cwd=ctx.workdir,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # Its own process group, so a timeout or Ctrl-C kills every child too.
        start_new_session=True,
        pass_fds=(lifeline,),
    )


def run_command(command: str, ctx: ToolContext, timeout: float) -> ToolResult:
    lifeline, held = os.pipe()  # the guard reads ``lifeline``; only we hold ``held``
    try:
        proc = _start(command, ctx, lifeline)
    except BaseException:
        os.close(held)
        raise
    finally:
        os.close(lifeline)
    try:
        return _supervise(proc, command, ctx, timeout)
    finally:
        os.close(held)


def _supervise(
    proc: subprocess.Popen[bytes], command: str, ctx: ToolContext, timeout: float
) -> ToolResult:
    assert proc.stdout is not None
    out = HeadTail()
    # The whole output streams to the offload store when there is one, so a command
    # printing hundreds of megabytes stays recallable without being held in memory.
    sink = ctx.open_output("bash", json.dumps({"command": command})) if ctx.open_output else None
    timed_out = False
    started = time.monotonic()
    try:
        if ctx.on_output is not None:
            ctx.on_output(b"")  # started: the watcher shows it running from now on
        timed_out = _pump(proc, out, timeout, sink, ctx.on_output)
        if timed_out:
            _kill_group(proc)
        exit_code = proc.wait()
    except BaseException as exc:  # KeyboardInterrupt above all: never leave it running
        _kill_group(proc)
        proc.wait()
        if sink is not None:
            sink.abort()
        if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, ToolInterrupted):
            # The model is told what the command had printed, and that it was stopped.
            raise ToolInterrupted(
                stopped_result(out, time.monotonic() - started), ran=True
            ) from exc
        raise
    finally:
        proc.stdout.close()
    metadata = {
        "exit_code": None if timed_out else exit_code,
        "timed_out": timed_out,
        "bytes": out.total,
    }
    if timed_out:
        trailer = f"timed out after {_fmt_seconds(timeout)}s (the command was killed)"
    else:
        trailer = f"exit code: {exit_code}"
    if sink is not None:
        if sink.over_limits:
            offloaded = sink.finish(metadata=metadata)
            return ToolResult(
                content=f"{offloaded.summary}\n{trailer}",
                is_error=timed_out,
                metadata=metadata,
                offloaded=OffloadLink(offloaded.id, offloaded.token_size),
            )
        sink.abort()
    text = out.render()
    if text and not text.endswith("\n"):
        text += "\n"
    return ToolResult(
        content=(text or "(no output)\n") + trailer, is_error=timed_out, metadata=metadata
    )


def stopped_result(out: HeadTail, seconds: float) -> str:
    """A command stopped by the user: the end of what it printed, and that it was stopped."""
    text = out.render()
    if len(text) > STOPPED_TAIL_CHARS:
        text = "... " + text[-STOPPED_TAIL_CHARS:]
    if text and not text.endswith("\n"):
        text += "\n"
    return f"{text}[interrupted by the user after {int(seconds)}s: the command was stopped]"


def _pump(
    proc: subprocess.Popen[bytes],
    out: HeadTail,
    timeout: float,
    sink: OutputSink | None = None,
    watch: Callable[[bytes], None] | None = None,
) -> bool:
    """Stream the output into ``out`` until EOF or the deadline; True when it timed out.

    Reads incrementally (never ``communicate()``), so a command printing
    hundreds of megabytes costs only the head and tail buffers.
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if now >= deadline:
                return exited_at is None  # the shell itself finished: not a timeout
            if exited_at is not None and now - exited_at > DRAIN_GRACE:
                return False  # a background job holds the pipe; stop reading
            if sel.select(timeout=min(0.25, deadline - now)):
                data = os.read(fd, READ_CHUNK)
                if not data:
                    return False
                out.feed(data)
                if sink is not None:
                    sink.write(data)
                if watch is not None:
                    watch(data)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(proc.pid, signal.SIGKILL)


def _fmt_seconds(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"
