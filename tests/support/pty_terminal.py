"""A real terminal for a real ``harness9`` process: a pseudo-terminal it has as controlling tty.

    with PtyProcess(["chat", "--model", ...], cwd=tmp) as term:
        term.expect("› ")          # what the screen shows (escape sequences left in)
        term.send("hello\\r")       # keys, as typed
        term.hang_up()              # the terminal window closes: SIGHUP, reads fail
        assert term.wait(30) is not None

The child becomes a session leader and opens the pty's slave, so the kernel treats it
as a terminal program: closing the master side hangs the terminal up (SIGHUP to the
session, EIO on reads and writes), exactly as closing a terminal window does.
prompt_toolkit's cursor-position request is turned off (PROMPT_TOOLKIT_NO_CPR), since
nothing here would answer it.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from tests.support.cli import cli_env

# Take the pty as controlling terminal (a session leader opening a tty without O_NOCTTY
# acquires it), then run harness9's entry point as `python -m harness9` would.
_BOOT = (
    "import os, runpy, sys\n"
    "os.close(os.open(os.ttyname(0), os.O_RDWR))\n"
    "sys.argv = ['harness9', *sys.argv[1:]]\n"
    "runpy.run_module('harness9', run_name='__main__', alter_sys=True)\n"
)


class PtyProcess:
    def __init__(
        self,
        argv: list[str],
        *,
        cwd: str | Path | None = None,
        env: dict[str, str] | None = None,
        rows: int = 24,
        columns: int = 100,
    ) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        full_env = cli_env(TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1", **(env or {}))
        full_env.pop("NO_COLOR", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, *argv],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env=full_env,
            start_new_session=True,
        )
        os.close(slave)
        self._master: int | None = master
        self._out = bytearray()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        fd = self._master
        assert fd is not None
        while not self._stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0.05)
            if not ready:
                continue
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the child side is closed
                return
            if not data:
                return
            with self._lock:
                self._out += data

    def screen(self) -> str:
        """Everything written to the terminal so far, decoded."""
        with self._lock:
            return self._out.decode("utf-8", "replace")

    def expect(self, text: str, timeout: float = 60.0, *, after: int = 0) -> int:
        """Wait until ``text`` appears (past offset ``after``); return the offset after it."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.screen()
            at = shown.find(text, after)
            if at >= 0:
                return at + len(text)
            if self.proc.poll() is not None:
                raise AssertionError(f"exited {self.proc.returncode} before {text!r}:\n{shown}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not shown within {timeout}s:\n{shown}")
            time.sleep(0.05)

    def send(self, keys: str) -> None:
        assert self._master is not None, "the terminal is closed"
        os.write(self._master, keys.encode("utf-8"))

    def hang_up(self) -> None:
        """Close the terminal, as closing its window does."""
        self._stop.set()
        self._reader.join(timeout=5)
        if self._master is not None:
            os.close(self._master)
            self._master = None

    def wait(self, timeout: float) -> int | None:
        """The exit status once the process ended within ``timeout`` s, else None."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def __enter__(self) -> PtyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.hang_up()


def drive_pty(
    argv: list[str], env: dict[str, str], steps: list[tuple[str, bytes]], timeout: float = 120
) -> tuple[str, int]:
    """Run ``python -m harness9 ARGV`` on a pty; for each (text, keys) wait until ``text``
    has been printed (since the previous step), then type ``keys``. Returns all it printed
    and its exit code (-9: killed at the timeout)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness9", *argv],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=cli_env(**env),
        close_fds=True,
    )
    os.close(slave)
    seen, mark = b"", 0
    pending = list(steps)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            found = seen.find(pending[0][0].encode(), mark) if pending else -1
            if found >= 0:
                # The next step looks only after this match: a prompt printed in the same
                # read as the text waited for still counts for the step after it.
                mark = found + len(pending[0][0].encode())
                os.write(master, pending.pop(0)[1])
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(master)
    return seen.decode("utf-8", errors="replace"), proc.returncode
