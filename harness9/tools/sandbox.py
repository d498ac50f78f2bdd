"""Confinement of file paths to the working directory.

Paths are resolved with symlinks followed *before* the containment check, so
neither ``../`` nor a symlink pointing outside can reach beyond the workdir.
"""

from __future__ import annotations

from pathlib import Path

from harness9.tools.base import ToolError


class PathEscapeError(ToolError):
    """The path, once resolved, lies outside the working directory."""


def resolve_in_workdir(workdir: Path, path: str | Path) -> Path:
    """The absolute, symlink-resolved form of ``path`` (relative to ``workdir``).

    Absolute paths are accepted only when they resolve inside the workdir.
    Raises ``PathEscapeError`` for anything that escapes, ``ToolError`` for
    paths that cannot be resolved at all.
    """
    root = workdir.resolve()
    raw = str(path)
    if "\0" in raw:
        raise ToolError("invalid path: it contains a NUL byte")
    try:
        # An absolute ``raw`` replaces ``root`` in the join, which is what we want.
        resolved = (root / raw).resolve(strict=False)
    except (OSError, RuntimeError, ValueError) as exc:  # RuntimeError: symlink loop (3.11)
        raise ToolError(f"cannot resolve path {raw}: {exc}") from exc
    if not resolved.is_relative_to(root):
        raise PathEscapeError(f"path escapes the working directory: {raw}")
    return resolved


def display_path(workdir: Path, resolved: Path) -> str:
    """The workdir-relative form shown to the model ("." for the workdir itself)."""
    rel = resolved.relative_to(workdir.resolve()).as_posix()
    return rel or "."
