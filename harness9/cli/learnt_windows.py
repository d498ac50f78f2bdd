"""Windows that servers named when they refused a request as too long, remembered across
chats: a new session on the same model and API base starts with that window instead of
overflowing once to learn it again (llama-cpp-python's server says its window nowhere
else). One "model<TAB>api base<TAB>tokens" a line in $HARNESS9_HOME."""

from __future__ import annotations

import os
from pathlib import Path

LEARNT_WINDOWS_FILE = "learnt_windows"


def _path() -> Path:
    from harness9.config import harness9_home

    return harness9_home() / LEARNT_WINDOWS_FILE


def _lines() -> list[str]:
    try:
        return _path().read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []


def _key(model: str, api_base: str | None) -> str:
    return f"{model}\t{api_base or ''}\t"


def learnt_window(model: str, api_base: str | None) -> int | None:
    """The window ``model``'s server at ``api_base`` last named, or None."""
    key = _key(model, api_base)
    for line in reversed(_lines()):
        if line.startswith(key) and line[len(key) :].isdigit():
            return int(line[len(key) :]) or None
    return None


def remember_window(model: str, api_base: str | None, window: int) -> None:
    """Keep ``window`` as the one ``model``'s server at ``api_base`` named (replacing any
    earlier). A home that cannot be written keeps nothing: the next chat learns it again."""
    key = _key(model, api_base)
    kept = [line for line in _lines() if not line.startswith(key)]
    path = _path()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}")
        partial.write_text("".join(f"{x}\n" for x in [*kept, f"{key}{window}"]), "utf-8")
        partial.replace(path)
    except OSError:
        pass
