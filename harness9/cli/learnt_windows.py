"""What harness9 remembers per model and API base across chats, in $HARNESS9_HOME:

- ``learnt_windows``: the window a server named when it refused a request as too long
  ("model<TAB>api base<TAB>tokens" a line). A new session on the same model and API base
  starts with it instead of overflowing once to learn it again (llama-cpp-python's server
  says its window nowhere else).
- ``window_warnings``: the guessed windows already warned about ("model<TAB>api base" a
  line), so the warning is said once, not on every run.

A home that cannot be written keeps nothing: the window is learnt, the warning said, again.
"""

from __future__ import annotations

import os
from pathlib import Path

LEARNT_WINDOWS_FILE = "learnt_windows"
WINDOW_WARNINGS_FILE = "window_warnings"


def _path(name: str) -> Path:
    from harness9.config import harness9_home

    return harness9_home() / name


def _lines(name: str) -> list[str]:
    try:
        return _path(name).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []


def _server(model: str, api_base: str | None) -> str:
    return f"{model}\t{api_base or ''}"


def learnt_window(model: str, api_base: str | None) -> int | None:
    """The window ``model``'s server at ``api_base`` last named, or None."""
    key = _server(model, api_base) + "\t"
    for line in reversed(_lines(LEARNT_WINDOWS_FILE)):
        if line.startswith(key) and line[len(key) :].isdigit():
            return int(line[len(key) :]) or None
    return None


def remember_window(model: str, api_base: str | None, window: int) -> None:
    """Keep ``window`` as the one ``model``'s server at ``api_base`` named (replacing any
    earlier)."""
    key = _server(model, api_base) + "\t"
    kept = [line for line in _lines(LEARNT_WINDOWS_FILE) if not line.startswith(key)]
    path = _path(LEARNT_WINDOWS_FILE)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}")
        partial.write_text("".join(f"{x}\n" for x in [*kept, f"{key}{window}"]), "utf-8")
        partial.replace(path)
    except OSError:
        pass


def first_warning(model: str, api_base: str | None) -> bool:
    """True the first time a guessed window is warned about for ``model`` at ``api_base``
    (and remembered, so that the next time is not)."""
    key = _server(model, api_base)
    if key in _lines(WINDOW_WARNINGS_FILE):
        return False
    path = _path(WINDOW_WARNINGS_FILE)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(key + "\n")
    except OSError:
        pass
    return True
