"""A project's ``.mcp.json`` (the ``mcpServers`` object Claude Code, Cursor and VS Code
read) and the approvals that let its servers run.

A ``.mcp.json`` comes with the code checked out, and its servers are programs: none runs
until the user approved it for that directory, once (asked at a terminal, or with
``harness9 mcp approve``). An approval is for the server as written: a changed command,
arguments, environment or URL needs approving again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness9.config import McpServer, harness9_home, mcp_server
from harness9.errors import ConfigError, HarnessError

PROJECT_FILE = ".mcp.json"
APPROVALS_FILE = "mcp_approvals.json"
APPROVALS_LOCK = "mcp_approvals.lock"  # held while the approvals file is read and rewritten
SOURCE_PROJECT = ".mcp.json"
_TRANSPORTS = ("stdio", "http", "streamable-http", "streamableHttp")


def project_servers(workdir: Path) -> list[McpServer]:
    """The servers of ``workdir``'s .mcp.json ([] when there is none); ConfigError for a
    file that cannot be read as one. Each entry is read on its own: a wrong one is a server
    whose ``invalid`` says why (it never starts), and does not take the others down."""
    path = workdir / PROJECT_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None
    servers = data.get("mcpServers", {}) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ConfigError(f'{path}: "mcpServers" must be an object of servers')
    return [_entry(name, entry, path) for name, entry in servers.items()]


def _entry(name: str, entry: Any, path: Path) -> McpServer:
    try:
        return _server(name, entry, path)
    except ConfigError as exc:
        # A name that would break the one line it is reported in is shown quoted.
        shown = name if name.isprintable() and name.strip() else json.dumps(name)
        return McpServer(shown, source=SOURCE_PROJECT, invalid=f"not started: {exc}")


_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand(value: Any, where: str) -> Any:
    """``${VAR}`` and ``${VAR:-default}`` in every string of ``value`` (as Claude Code expands
    them in .mcp.json: a checked-in file names a secret without holding it)."""
    if isinstance(value, dict):
        return {k: expand(v, where) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v, where) for v in value]
    if not isinstance(value, str):
        return value

    def sub(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in os.environ:
            return os.environ[name]
        if default is not None:
            return default
        raise ConfigError(f"{where}: ${{{name}}} is not set in the environment")

    return _VAR_RE.sub(sub, value)


def _server(name: str, entry: Any, path: Path) -> McpServer:
    where = f"its entry in {path}"
    written = entry
    entry = expand(entry, where)
    kind = (
        entry.get("type", "stdio" if "command" in entry else "http")
        if isinstance(entry, dict)
        else "stdio"
    )
    if kind not in _TRANSPORTS:
        raise ConfigError(f"{where}: transport {kind!r} is not supported (stdio or http)")
    server = mcp_server(name, entry, source=SOURCE_PROJECT, where=where)
    # The approval is for the entry as written: a token the user's environment gives it
    # (${VAR}) may change without the checked-out file, or what runs, changing.
    as_written = mcp_server(name, written, source=SOURCE_PROJECT, where=where)
    return replace(server, approval_key=_digest(as_written))


def fingerprint(server: McpServer) -> str:
    """What an approval is for: everything that says what runs and where it connects, as
    its .mcp.json writes it (``${VAR}`` unexpanded)."""
    return server.approval_key or _digest(server)


def _digest(server: McpServer) -> str:
    what = [server.command, list(server.args), dict(server.env), server.cwd, server.url]
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def _approvals_path() -> Path:
    return harness9_home() / APPROVALS_FILE


def _load_approvals(*, strict: bool = False) -> dict[str, dict[str, str]]:
    """The approvals file's contents ({} when there is none). A file that cannot be read
    as approvals approves nothing; ``strict`` (before writing it) is a HarnessError then,
    so that writing one approval never wipes the others."""
    path = _approvals_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        if strict:
            why = exc.strerror if isinstance(exc, OSError) else "not valid JSON"
            raise HarnessError(f"cannot read {path} ({why}): fix or remove it") from None
        return {}
    if not isinstance(data, dict):
        if strict:
            raise HarnessError(f"cannot read {path} (not a JSON object): fix or remove it")
        return {}
    return data


def is_approved(workdir: Path, server: McpServer) -> bool:
    """Config servers always run; a .mcp.json server once approved for ``workdir`` as it is."""
    if server.source != SOURCE_PROJECT:
        return True
    approved = _load_approvals().get(str(workdir), {})
    return isinstance(approved, dict) and approved.get(server.name) == fingerprint(server)


def approve(workdir: Path, server: McpServer) -> None:
    """Remember that ``server`` of ``workdir``'s .mcp.json may run; HarnessError when the
    file cannot be written. Two approvals at once (two terminals) both stay: the file is
    read, changed and replaced under a lock, through a temporary file of its own."""
    path = _approvals_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path.with_name(APPROVALS_LOCK)):
            data = _load_approvals(strict=True)
            entry = data.get(str(workdir))
            entry = entry if isinstance(entry, dict) else {}
            entry[server.name] = fingerprint(server)
            data[str(workdir)] = entry
            _replace(path, json.dumps(data, indent=2, sort_keys=True))
    except OSError as exc:  # a read-only home, a full disk
        raise HarnessError(
            f"cannot save the approval of {server.name} in {path}: {exc.strerror or exc}"
        ) from None


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock`` (created if need be) across processes; where
    there is no fcntl (Windows) the write is still atomic, only not serialised."""
    with lock.open("a", encoding="utf-8") as fh:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not on POSIX
            yield
            return
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _replace(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: a temporary file no other writer uses, then
    os.replace (removed again when anything fails)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def all_servers(configured: tuple[McpServer, ...], workdir: Path) -> list[McpServer]:
    """config.toml's servers, then .mcp.json's (a name config.toml already uses is the
    config's: the user's own file wins over a checked-out one)."""
    taken = {s.name for s in configured}
    return [*configured, *(s for s in project_servers(workdir) if s.name not in taken)]
