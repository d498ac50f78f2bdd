"""Which session store a command uses: the SQLite file, or a PostgreSQL server.

A PostgreSQL URL selects the shared store, a path the SQLite file; which one a
command uses is resolved by the CLI (``harness9.config.store_location``: the flag,
the environment, ``config.toml``), never here. psycopg is imported only once a URL
is given: ``sessions list`` on SQLite pays nothing.

``SessionStore`` is the manager protocol every command talks to; both
``harness9.store.sqlite.Manager`` and ``harness9.store.postgres.PostgresManager``
fill it in completely.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness9.errors import ConfigError, UsageError
from harness9.store.blobs import BlobStore
from harness9.store.search import SearchHit
from harness9.store.session import (
    ChatSession,
    Checkpoint,
    CorruptRow,
    ForkOrigin,
    SessionInfo,
    SubAgentLink,
    UsageTotals,
)

if TYPE_CHECKING:
    from harness9.store.export import SessionSnapshot

SCHEMES = ("postgresql://", "postgres://")


class StoredSession(ChatSession, Protocol):
    """A session of a persistent store: reads also report the rows they had to skip, and
    its whole list of checkpoints can be read (``sessions show``, export)."""

    corrupt_rows: list[CorruptRow]

    def list_checkpoints(self) -> list[Checkpoint]: ...


class UsageStore(Protocol):
    """Where each model call's usage is added to its session's totals."""

    def add_usage(
        self,
        session_id: str,
        *,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
        cost_usd: float | None = None,
        summary: bool = False,
        cache_write_tokens: int = 0,
    ) -> None: ...


class SessionStore(UsageStore, Protocol):
    """What every command needs from a session store (SQLite file or PostgreSQL server)."""

    location: str  # the file or the URL (without password), for messages
    read_only: bool  # opened for reading only (an SQLite store its user cannot write)

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...

    def close(self) -> None: ...

    def new_session(self) -> StoredSession: ...

    def open_session(self, session_id: str) -> StoredSession: ...

    def resolve_id(self, prefix: str) -> str: ...

    def list_sessions(self, limit: int = 0, *, children: bool = False) -> list[SessionInfo]: ...

    def new_child_session(
        self, parent_id: str, tool_call_id: str, description: str = ""
    ) -> StoredSession:
        """A new session for the sub-agent that ``parent_id``'s `task` call runs."""
        ...

    def link_child(self, link: SubAgentLink) -> None: ...

    def subagent_link(self, session_id: str) -> SubAgentLink | None: ...

    def children(self, session_id: str) -> list[tuple[SubAgentLink, SessionInfo]]: ...

    def subagent_usage(self, session_id: str) -> UsageTotals:
        """What the sub-agents below ``session_id`` consumed (its own totals exclude it)."""
        ...

    def sessions_older_than(self, cutoff_unix: float) -> list[SessionInfo]: ...

    def session_info(self, session_id: str) -> SessionInfo: ...

    def usage_totals(self, session_id: str) -> UsageTotals: ...

    def usage_by_session(self) -> dict[str, UsageTotals]: ...

    def search(
        self,
        query: str,
        *,
        limit: int = 20,
        session_id: str | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> list[SearchHit]:
        """``on_progress(done, total)`` follows any indexing the search does first."""
        ...

    def number_hits(self, hits: Sequence[SearchHit]) -> list[SearchHit]:
        """The hits with ``number`` set: each message's place in its session."""
        ...

    def unindexed_count(self) -> int:
        """Messages a search would still have to index first (0 where indexing is at write)."""
        ...

    def delete_session(self, session_id: str) -> None: ...

    def delete_if_empty(self, session_id: str) -> bool: ...

    def delete_sessions(
        self, session_ids: Iterable[str], *, updated_before: float | None = None
    ) -> list[str]: ...

    def delete_sessions_older_than(
        self, cutoff_unix: float, *, keep: Iterable[str] = ()
    ) -> list[str]: ...

    def snapshot(self, session_id: str) -> SessionSnapshot: ...

    def restore(self, snap: SessionSnapshot, *, new_id: bool = False) -> str: ...

    def discard_unfinished_imports(self) -> list[str]:
        """Remove what imports that died half-way left behind (never visible); return their ids."""
        ...

    def blob_store(self) -> BlobStore | None:
        """Where offloaded tool outputs go; None: the default files in $HARNESS9_HOME."""
        ...

    def fork_session(self, session_id: str, at: int | None = None) -> str:
        """A new session with messages 1..``at`` (all without it) and the checkpoints
        the session had then; its id. The origin is not changed."""
        ...

    def fork_origin(self, session_id: str) -> ForkOrigin | None: ...

    def fork_origins(self) -> dict[str, ForkOrigin]: ...

    def forks_of(self, session_id: str) -> list[tuple[str, int]]: ...


def is_database_url(text: str) -> bool:
    return text.strip().lower().startswith(SCHEMES)


def redacted_url(url: str) -> str:
    """``url`` without its password, for messages."""
    if "@" not in url:
        return url
    head, _, tail = url.rpartition("@")
    if ":" in head.split("//", 1)[-1]:
        scheme, _, rest = head.partition("//")
        return f"{scheme}//{rest.split(':', 1)[0]}:***@{tail}"
    return url


OnDeleted = Callable[[str], None] | None


def open_url(url: str, *, on_session_deleted: OnDeleted = None) -> SessionStore:
    """The store at ``url``: a PostgreSQL URL, or a path to an SQLite file.

    ``on_session_deleted`` is called with each deleted session's id once the deletion
    is committed (whoever keeps files beside the store removes them there).
    """
    if is_database_url(url):
        try:
            from harness9.store.postgres import PostgresManager
        except ImportError as exc:
            raise ConfigError(
                f"a PostgreSQL store needs psycopg: pip install 'harness9[postgres]' ({exc.msg})"
            ) from None
        return PostgresManager(url, on_session_deleted=on_session_deleted)
    from harness9.store.sqlite import Manager

    return Manager(sqlite_file_of(url), on_session_deleted=on_session_deleted)


def sqlite_file_of(target: str) -> str:
    """The SQLite file that ``target`` names: a path, or an ``sqlite:///`` URL.

    ``sqlite:///abs/path`` names ``/abs/path``, as a ``file:`` URL would, and so does
    SQLAlchemy's four-slash ``sqlite:////abs/path``. Any other ``scheme://`` is refused
    (UsageError), never taken for a relative path such as ``./sqlite:/abs/path``.
    """
    text = target.strip()
    scheme, sep, rest = text.partition("://")
    if text.lower().startswith("sqlite:") and not sep:
        scheme, sep, rest = "sqlite", ":", ""  # sqlite:x.db: a URL without its slashes
    elif not sep or "/" in scheme or not scheme.replace("+", "").isalnum():
        return os.path.expanduser(text)  # a plain path (``./a://b`` stays a path)
    if scheme.lower() != "sqlite":
        raise UsageError(
            f"{redacted_url(text)!r} is neither a postgresql:// URL, an sqlite:///PATH URL "
            "nor a file path"
        )
    from urllib.parse import unquote

    if not rest.startswith("/") or "?" in rest or "#" in rest:
        raise UsageError(
            f"{text!r} is not an sqlite:///PATH URL (an absolute path after sqlite://, "
            "no host and no ?options): e.g. sqlite:///home/me/sessions.db"
        )
    return "/" + unquote(rest).lstrip("/")


def open_store(location: str | Path, *, on_session_deleted: OnDeleted = None) -> SessionStore:
    """The store at ``location`` (a PostgreSQL URL or the SQLite file), created if missing.

    The CLI resolves the location (``harness9.config.store_location``): the store reads
    no configuration.
    """
    if isinstance(location, str) and is_database_url(location):
        return open_url(location, on_session_deleted=on_session_deleted)
    from harness9.store.sqlite import open_manager

    return open_manager(Path(location), on_session_deleted=on_session_deleted)


def open_existing_store(
    location: str | Path, *, on_session_deleted: OnDeleted = None
) -> SessionStore | None:
    """The store at ``location``, or None when it is an SQLite file that does not exist
    yet (reading must not create one).

    A PostgreSQL store always opens: the server exists, and an empty schema reads as empty.
    """
    if isinstance(location, str) and is_database_url(location):
        return open_url(location, on_session_deleted=on_session_deleted)
    from harness9.store.sqlite import open_existing_manager

    return open_existing_manager(Path(location), on_session_deleted=on_session_deleted)
