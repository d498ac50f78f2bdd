"""The terminal closing (SIGHUP) or a ``kill`` (SIGTERM) ends a chat the way Ctrl-D does.

By default either signal kills the interpreter on the spot: the bash command running
stays behind (it has its own process group, out of the terminal's reach), the call
that started it never gets a result, and an empty session the chat opened is left in
the store. Instead, the first such signal raises ``Stopped`` (a KeyboardInterrupt, so
every path that cleans up after Ctrl-C runs: the command's process group is killed, the
turn keeps what it finished and answers the unfinished call as interrupted), and the
chat loop then leaves as at end of input. After a hang-up the terminal is gone, so the
standard streams are pointed at /dev/null first: the clean-up neither blocks nor fails
on writes to it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from types import FrameType


class Stopped(KeyboardInterrupt):
    """harness9 was told to stop: its terminal closed (SIGHUP) or it got SIGTERM."""


_stopped = threading.Event()


def stop_requested() -> bool:
    """True once SIGHUP or SIGTERM arrived: the chat loop ends after what is running."""
    return _stopped.is_set()


def _detach_from_terminal() -> None:
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            with contextlib.suppress(OSError):
                os.dup2(devnull, fd)
        os.close(devnull)


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    if _stopped.is_set():
        return  # one stop is enough: the clean-up it started must not be interrupted
    _stopped.set()
    if signum == getattr(signal, "SIGHUP", None):
        _detach_from_terminal()
    raise Stopped


def install() -> None:
    """Handle SIGHUP and SIGTERM as above (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for name in ("SIGHUP", "SIGTERM"):  # no SIGHUP on Windows
        signum = getattr(signal, name, None)
        if signum is not None:
            signal.signal(signum, _on_signal)
