"""Keys typed while a turn runs, at a terminal: kept for the prompt, not shown mid-reply.

The terminal normally echoes each key and turns Enter into a newline. While the agent
works, both hurt: the echo lands inside the reply being written, and prompt_toolkit, which
reads the keys only once the next prompt shows, then takes each typed-ahead Enter for
Ctrl-J (a new line in the same message), so two messages typed ahead became one. During
a turn the terminal neither echoes nor translates (Ctrl-C still interrupts); a question
asked inside the turn (an approval) gets the terminal as it normally is.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any, TextIO

# The terminal's own settings while a turn runs with them changed: (fd, settings).
_normal: list[tuple[int, list[Any]]] = []


def _attributes(fd: int) -> list[Any] | None:
    try:
        import termios

        return termios.tcgetattr(fd)
    except (ImportError, OSError, ValueError):
        return None  # not a terminal, or no termios (Windows)


def _set(fd: int, attributes: list[Any]) -> None:
    import termios

    with contextlib.suppress(OSError, ValueError, termios.error):
        termios.tcsetattr(fd, termios.TCSANOW, attributes)


@contextlib.contextmanager
def keys_kept_quiet(stream: TextIO | None = None) -> Iterator[None]:
    """While the block runs: typed keys are not echoed, Enter stays Enter, and they wait,
    unread, for the next prompt; the terminal's settings come back afterwards."""
    stream = stream if stream is not None else sys.stdin
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        fd = -1
    normal = _attributes(fd) if fd >= 0 and stream.isatty() else None
    if normal is None:
        yield
        return
    import termios

    quiet = [*normal]
    quiet[0] = normal[0] & ~termios.ICRNL  # iflag: Enter arrives as Enter (\r)
    quiet[3] = normal[3] & ~(termios.ECHO | termios.ICANON)  # lflag: no echo, no line
    quiet[6] = [*normal[6]]
    quiet[6][termios.VMIN], quiet[6][termios.VTIME] = 1, 0
    _set(fd, quiet)
    _normal.append((fd, normal))
    try:
        yield
    finally:
        _normal.pop()
        _set(fd, normal)


@contextlib.contextmanager
def answering() -> Iterator[None]:
    """A question asked during a turn: the terminal as it normally is (the answer is shown
    as it is typed, Enter ends it), then quiet again."""
    if not _normal:
        yield
        return
    fd, normal = _normal[-1]
    quiet = _attributes(fd)
    _set(fd, normal)
    try:
        yield
    finally:
        if quiet is not None:
            _set(fd, quiet)
