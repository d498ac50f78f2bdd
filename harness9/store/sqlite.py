"""The SQLite session store: one Manager owns the connection, sessions share it.

Every write is one ``BEGIN IMMEDIATE`` transaction that rolls back on any
exception, so a failure never leaves half a write, and two processes on one
file queue for the write lock instead of failing with "database is locked".

Long writes (the search index's catch-up, deleting many sessions) run as many
short transactions, each sized to hold the lock for about STEP_TARGET_S, with
the lock free for a moment between them; a writer waiting for the lock polls
often (harness9.store.locking), so it gets in at the first gap. No writer then
waits much longer than one step, however much work the long write has left.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness9.schema import Message
from harness9.store import fts_index, sqlite_search
from harness9.store.codec import (
    CHECKPOINT_COLUMNS,
    CHECKPOINT_FIELDS,
    checkpoint_values,
    encode_facts,
    message_values,
    select_checkpoints,
)
from harness9.store.lineage import family
from harness9.store.locking import BUSY_TIMEOUT_MS, begin_immediate, is_busy
from harness9.store.migrations import SCHEMA_VERSION, SchemaError, check_version, migrate
from harness9.store.scrub import map_message, scrub_surrogates
from harness9.store.search import (
    SearchHit,
    to_fts_query,
)
from harness9.store.session import (
    Checkpoint,
    CorruptRow,
    OffloadLink,
    SessionNotFoundError,
    SessionSettings,
    StoreBusyError,
    StoredMessage,
    StoreError,
    check_session_id,
    offload_links,
)
from harness9.store.sessions import INFO_SQL_BYTES, aged_sql
from harness9.store.sql_manager import SqlManagerBase
from harness9.store.sql_session import (
    REMEMBER_CONFLICT_SQL,
    REMEMBER_SQL,
    SELECT_RECORDS,
    SqlSessionBase,
    settings_values,
)
from harness9.store.titles import first_title

if TYPE_CHECKING:
    from harness9.store.export import SessionSnapshot

STEP_TARGET_S = 0.1  # how long one step of a long write aims to hold the lock
STEP_PAUSE_S = 0.01  # the lock stays free at least this long between two steps
STEP_MAX_UNITS = 50_000  # however fast the machine, a step never does more than this

# (done, total) after each step of a long catch-up; the store itself never prints.
ProgressCallback = Callable[[int, int], None]

_INSERT_MESSAGE = (
    "INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, offload_id, "
    "offload_tokens, metadata, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


_RESTORE_MESSAGE = (
    "INSERT INTO messages (id, session_id, role, content, tool_calls, tool_call_id, offload_id, "
    "offload_tokens, metadata, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_CHECKPOINT = (
    f"INSERT INTO compactions (session_id, {CHECKPOINT_COLUMNS}, facts) "
    f"VALUES (?, {', '.join('?' * len(CHECKPOINT_FIELDS))}, ?)"
)
# A session's checkpoints with their data; append ORDER BY.
_SELECT_CHECKPOINTS = select_checkpoints("?")


def advice(detail: str) -> str:
    """What the user can do about a store failure, appended to its one-line error."""
    text = detail.lower()
    if "not a database" in text or "malformed" in text:
        return "; it was left untouched: move it aside or point HARNESS9_HOME elsewhere"
    if "disk is full" in text or "no space" in text:
        return (
            "; the file is intact but this write was not saved: free some disk space "
            "(or point HARNESS9_HOME elsewhere) and retry"
        )
    if "disk i/o error" in text:
        # A full disk shows up like this when SQLite cannot create its -wal/-shm files.
        return "; free some disk space or check the disk, then retry (the file was left as it was)"
    if "locked" in text or "busy" in text:
        return "; another harness9 held it too long: retry in a moment"
    if "permission denied" in text or "readonly" in text or "read-only" in text:
        return "; check that you own it and its directory (or point HARNESS9_HOME elsewhere)"
    if "not a directory" in text:
        return "; a file stands where the directory should be: move it or point HARNESS9_HOME elsewhere"
    return ""


_READ_ONLY_FS = "read-only file system"


def unwritable_cause(path: Path) -> str | None:
    """Why ``path`` (the database) cannot be written, in words; None if it looks writable.

    SQLite says only "unable to open database file" or "attempt to write a readonly
    database"; the user needs to know which directory or file to fix.
    """
    parent = path.parent
    with suppress(OSError):
        if os.statvfs(parent).f_flag & os.ST_RDONLY:
            return f"{parent} is on a {_READ_ONLY_FS}"
    if os.path.isdir(parent) and not os.access(parent, os.W_OK | os.X_OK):
        return f"the directory {parent} is not writable"
    for suffix in ("", "-wal", "-shm"):
        p = Path(str(path) + suffix)
        if p.exists() and not os.access(p, os.R_OK | os.W_OK):
            return f"{p} is not writable"
    return None


def _fix(cause: str, path: Path, *, chmod: bool = True) -> str:
    """What helps: no chmod makes a read-only file system writable."""
    if cause.endswith(_READ_ONLY_FS):
        return (
            "it cannot be made writable from here (remount it read-write), or point "
            "HARNESS9_HOME at a directory on a writable file system"
        )
    example = f" (e.g. chmod u+w {path.parent})" if chmod else ""
    return f"make it writable{example} or point HARNESS9_HOME at a writable directory"


def open_error(path: Path, what: str) -> StoreError:
    lowered = what.lower()
    parent = path.parent
    if os.path.isdir(parent) and not os.access(parent, os.R_OK | os.X_OK):
        return StoreError(
            f"cannot open session database {path}: the directory {parent} cannot be read "
            f"by you{advice('permission denied')}"
        )
    if any(w in lowered for w in ("unable to open", "readonly", "read-only", "permission")):
        cause = unwritable_cause(path)
        if cause is not None:
            return StoreError(f"cannot open session database {path}: {cause}; {_fix(cause, path)}")
    return StoreError(f"cannot open session database {path}: {what}{advice(what)}")


class Manager(SqlManagerBase["SQLiteSession"]):
    """Owner of the one SQLite connection; creates, opens, lists and deletes sessions.

    Safe to share between threads: every use of the connection holds one lock.
    """

    PARAM = "?"
    ORDER_SQL = " ORDER BY updated_at DESC, created_at DESC, rowid DESC"
    INFO_SQL = INFO_SQL_BYTES
    LINK_SQL = (
        "SELECT session_id, parent_id, CAST(tool_call_id AS BLOB), CAST(description AS BLOB) "
        "FROM subagent_sessions"
    )
    PREFIX_MATCH, PREFIX_WILDCARD = "GLOB", "*"

    def __init__(
        self,
        db_path: str | os.PathLike[str],
        *,
        on_session_deleted: Callable[[str], None] | None = None,
        lock_wait_s: float = BUSY_TIMEOUT_MS / 1000,
        read_only: bool = False,
    ) -> None:
        self.path = Path(db_path)
        self.location = str(self.path)
        self.lock_wait_s = lock_wait_s  # how long a write waits for another process's lock
        # Called with each deleted session's id once its deletion is committed. Files kept
        # beside the database (offloaded tool results) belong to whoever wires this up:
        # the store deletes rows, never directories it does not own.
        self.on_session_deleted = on_session_deleted
        # Read-only: for list/show/search/export on a store the user may not write (a
        # read-only home, a backup). Writes raise StoreError; search skips indexing.
        self.read_only = read_only
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._conn = self._connect_read_only() if read_only else self._connect()

    # -- opening -----------------------------------------------------------------

    def _fail(self, what: str) -> StoreError:
        return open_error(self.path, what)

    def _connect(self) -> sqlite3.Connection:
        try:
            if not self.path.parent.exists():
                self.path.parent.mkdir(parents=True, mode=0o700)
                os.chmod(self.path.parent, 0o700)  # mkdir's mode is filtered by the umask
            # Create the file 0600 ourselves so it is never readable by others, not even briefly.
            # O_EXCL: an existing file is never opened here. Closing any descriptor of the
            # database drops every POSIX lock this process holds on it, so another Manager
            # in this process (a thread, a test) would lose its locks mid-transaction and a
            # second process could write at the same time: a corrupt database.
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            pass
        except OSError as exc:
            raise self._fail(exc.strerror or str(exc)) from exc
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._fail(str(exc)) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS:d}")
            # Refuse a newer schema before switching the journal mode: that switch writes the
            # file's header, and a file we will not use must be left exactly as it was.
            check_version(conn)
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if str(mode).lower() != "wal":
                raise self._fail(f"cannot switch to WAL mode (got {mode!r})")
            # In WAL mode NORMAL cannot corrupt the file; it may only lose the last commit on power loss.
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")  # cascades silently do nothing without it
            migrate(conn)
        except SchemaError as exc:
            conn.close()
            raise self._fail(str(exc)) from exc
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise self._fail(str(exc)) from exc
        self._restrict_permissions()
        return conn

    def _connect_read_only(self) -> sqlite3.Connection:
        """Open without writing anything: no file, directory, -wal or -shm is created."""
        from urllib.parse import quote

        base = "file:" + quote(str(self.path.resolve()))
        last: sqlite3.Error | None = None
        # mode=ro reads a WAL database when its -shm exists or can be made; in a read-only
        # directory it cannot, and immutable=1 (nothing can change the file there) reads it.
        for query in ("?mode=ro", "?mode=ro&immutable=1"):
            try:
                conn = sqlite3.connect(
                    base + query, uri=True, isolation_level=None, check_same_thread=False
                )
            except sqlite3.Error as exc:
                last = exc
                continue
            try:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS:d}")
                version = check_version(conn)
            except SchemaError as exc:
                conn.close()
                raise self._fail(str(exc)) from exc
            except sqlite3.Error as exc:
                conn.close()
                last = exc
                continue
            if version < SCHEMA_VERSION:
                conn.close()
                raise self._fail(
                    f"it needs a schema upgrade (version {version} to {SCHEMA_VERSION}), which "
                    "needs write access; run any harness9 command where it is writable first"
                )
            return conn
        raise self._fail(str(last))

    def _restrict_permissions(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(self.path) + suffix)
            try:
                if stat.S_IMODE(p.stat().st_mode) != 0o600:
                    os.chmod(p, 0o600)
            except OSError:
                pass  # absent, or owned by someone else: nothing we may do

    # -- plumbing ----------------------------------------------------------------

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"session database {self.path} is closed")
        return self._conn

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self.conn
            except sqlite3.Error as exc:
                raise StoreError(
                    f"cannot read session database {self.path}: {exc}{advice(str(exc))}"
                ) from exc

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; any exception rolls all of it back and propagates."""
        with self._lock:
            conn = self.conn
            if self.read_only:
                cause = unwritable_cause(self.path) or "it was opened read-only"
                raise StoreError(
                    f"cannot write session database {self.path}: {cause}; "
                    f"{_fix(cause, self.path, chmod=False)}"
                )
            try:
                begin_immediate(conn, self.lock_wait_s)
            except sqlite3.Error as exc:
                raise self._write_error(exc) from exc
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    # SQLite may already have rolled back (disk full): never mask the cause.
                    with suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise self._write_error(exc) from exc
                raise

    def _write_error(self, exc: sqlite3.Error) -> StoreError:
        text = f"cannot write session database {self.path}: {exc}{advice(str(exc))}"
        return StoreBusyError(text) if is_busy(exc) else StoreError(text)

    def in_steps(self, step: Callable[[sqlite3.Connection, int], tuple[int, bool]]) -> int:
        """Run ``step(conn, size)``, each call its own write transaction, until it is done.

        ``step`` does at most ``size`` units of work and returns (units done, finished).
        ``size`` adapts to the measured rate so one step holds the lock for about
        STEP_TARGET_S, and the lock is left free between steps so a waiting writer gets
        in. Each step commits on its own: a failure keeps the steps before it.
        Returns the units done in all.
        """
        size, total = 64, 0
        while True:
            started = time.monotonic()
            with self.transaction() as conn:
                held = time.monotonic()
                done, finished = step(conn, size)
            took = time.monotonic() - held
            total += done
            if finished:
                return total
            if done:
                rate = done / max(took, 0.001)
                size = max(1, min(int(rate * STEP_TARGET_S), size * 4, STEP_MAX_UNITS))
            time.sleep(max(STEP_PAUSE_S, (held - started) / 4))

    # -- sessions (the rest is SqlManagerBase's) -----------------------------------

    def _session(self, session_id: str) -> SQLiteSession:
        return SQLiteSession(self, session_id)

    def new_session(self) -> SQLiteSession:
        session = super().new_session()
        self._restrict_permissions()  # the first write creates -wal/-shm
        return session

    def search(
        self,
        query: str,
        *,
        limit: int = 20,
        session_id: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> list[SearchHit]:
        """Messages matching ``query`` (words ANDed, "phrases"), best bm25 match first.

        First indexes the messages written since the last search (harness9.store.fts_index),
        so every message stored before the call can be found; see ``catch_up_index`` for
        ``on_progress``. Raises SearchQueryError for a query with no reading (see
        harness9.store.search). The queries are harness9.store.sqlite_search's.
        """
        expr = to_fts_query(query)
        if session_id is not None:
            check_session_id(session_id)
        self.catch_up_index(on_progress)
        return sqlite_search.search(self, query, expr, limit=limit, session_id=session_id)

    def unindexed_count(self) -> int:
        """Messages the search index has not caught up with (a read-only store cannot)."""
        with self.read() as conn:
            (n,) = conn.execute(
                "SELECT count(*) FROM messages WHERE id > (SELECT indexed_upto FROM fts_state)"
            ).fetchone()
        return int(n)

    def catch_up_index(self, on_progress: ProgressCallback | None = None) -> int:
        """Index every message stored before this call; return how many were indexed.

        In bounded steps (``in_steps``): a writer waits at most about one step behind
        it, however far behind the index is. The check runs outside a write transaction,
        so a search with nothing to index never waits for another process's write lock.
        ``on_progress(done, total)`` is called before the first step and after each one
        when there is anything to index; ``total`` counts messages once per index.
        """
        if self.read_only:
            return 0  # what is indexed is searched; indexing would be a write
        with self.read() as conn:
            target = fts_index.top_id(conn)
            if not fts_index.is_behind(conn, target):
                return 0
            total = fts_index.backlog(conn, target) if on_progress is not None else 0
        progress = [0]

        def step(conn: sqlite3.Connection, size: int) -> tuple[int, bool]:
            n, finished = fts_index.step(conn, target, size)
            progress[0] += n
            if on_progress is not None:
                on_progress(min(progress[0], total), total)
            return n, finished

        if on_progress is not None:
            on_progress(0, total)
        return self.in_steps(step)

    def delete_sessions_older_than(
        self, cutoff_unix: float, *, keep: Iterable[str] = ()
    ) -> list[str]:
        """Delete every session last updated before ``cutoff_unix`` (except ``keep``).

        In bounded steps, each re-checking the age of what it deletes, so a session
        another process writes to meanwhile is either updated first (and kept) or
        deleted first. Returns the deleted ids, most recently updated first.
        """
        spared = set(self.with_parents(keep))  # a kept sub-agent's session keeps its family
        candidates = [s.id for s in self.sessions_older_than(cutoff_unix) if s.id not in spared]
        return self._delete_aged(candidates, cutoff_unix)

    def _delete_aged(self, ids: list[str], cutoff: float) -> list[str]:
        """Delete those of ``ids`` still last updated before ``cutoff``, step by step.

        Bounded steps (``in_steps``: a few sessions per short transaction, so a chat
        saving meanwhile waits for one step at most); the age is checked again inside
        each step, and a session that is gone or was written to since it was listed is
        skipped.
        """
        pending = deque(ids)
        deleted: list[str] = []

        def step(conn: sqlite3.Connection, size: int) -> tuple[int, bool]:
            work = 0  # messages (plus one per session): what a delete costs
            while pending and work < size:
                sid = pending.popleft()
                row = conn.execute(
                    f"SELECT message_count FROM sessions WHERE id = ? AND {aged_sql('?')}",
                    (sid, cutoff, cutoff),
                ).fetchone()
                if row is None:
                    continue  # gone, or written to since it was listed
                # Its sub-agents' sessions go with it, deepest first. Messages, todos and
                # compactions go by ON DELETE CASCADE.
                for gone in reversed(family(conn, "?", [sid])):
                    conn.execute("DELETE FROM sessions WHERE id = ?", (gone,))
                    removed.append(gone)
                deleted.append(sid)
                work += max(int(row[0]), 0) + 1
            return work, not pending

        removed: list[str] = []  # with the sub-agents' sessions
        try:
            self.in_steps(step)
        finally:
            # Steps that committed stay committed, even when a later one fails.
            self._deleted(removed)
        return deleted

    # -- the driver's half of checkpoints and moving sessions ---------------------------

    def _insert_checkpoint(self, conn: sqlite3.Connection, session_id: str, cp: Checkpoint) -> int:
        values = (session_id, *checkpoint_values(cp), encode_facts(cp.facts))
        cur = conn.execute(_INSERT_CHECKPOINT, values)
        return int(cur.lastrowid or 0)

    @contextmanager
    def _snapshot_read(self) -> Iterator[sqlite3.Connection]:
        with self.read() as conn:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def ids_reusable(self, conn: sqlite3.Connection, table: str, ids: list[int]) -> bool:
        """Whether none of ``ids`` is taken (an id SQLite would hand out next is fine)."""
        for start in range(0, len(ids), 500):  # stay under SQLite's bound-parameter limit
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            sql = f"SELECT 1 FROM {table} WHERE id IN ({marks}) LIMIT 1"
            if conn.execute(sql, chunk).fetchone():
                return False
        return True

    def restore_messages(
        self, conn: sqlite3.Connection, session_id: str, records: list[StoredMessage], keep: bool
    ) -> dict[int, int]:
        new_ids: dict[int, int] = {}
        for r in records:
            values = (
                r.id if keep else None,
                session_id,
                *message_values(r.message, r.offload),
                r.created_at,
            )
            new_ids[r.id] = int(conn.execute(_RESTORE_MESSAGE, values).lastrowid or 0)
        # Kept ids may lie below the search index's mark, where the catch-up never looks.
        # Only these records' range: an import in batches calls this once per batch.
        if keep and records:
            fts_index.index_restored(
                conn, session_id, first_id=records[0].id, last_id=records[-1].id
            )
        return new_ids

    def restore(self, snap: SessionSnapshot, *, new_id: bool = False) -> str:
        """Store ``snap`` in bounded steps, invisible until the last (harness9.store.staged_import).

        A single transaction held the write lock for as long as a large import took.
        """
        from harness9.store.staged_import import import_in_steps

        return import_in_steps(self, snap, new_id=new_id)

    def discard_unfinished_imports(self) -> list[str]:
        """Remove the hidden rows of imports that died half-way (harness9.store.staged_import)."""
        from harness9.store.staged_import import discard_unfinished

        return discard_unfinished(self)

    def blob_store(self) -> None:
        """Offloaded outputs stay in files under $HARNESS9_HOME (the offload default)."""
        return None


class SQLiteSession(SqlSessionBase):
    """One session's history in the Manager's database (see the Session protocol)."""

    PARAM = "?"
    SELECT_CHECKPOINTS = _SELECT_CHECKPOINTS
    SELECT_TODOS = (
        "SELECT CAST(content AS BLOB), CAST(status AS BLOB) FROM todos "
        "WHERE session_id = {p} ORDER BY position"
    )
    _m: Manager

    def _fetch_records(
        self, conn: sqlite3.Connection, sql: str, args: tuple[object, ...]
    ) -> list[Any]:
        try:
            return conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if "decode" not in str(exc):
                raise
            return self._read_undecodable(conn, sql, args)

    @staticmethod
    def _read_undecodable(
        conn: sqlite3.Connection, sql: str, args: tuple[object, ...]
    ) -> list[tuple]:
        """The slow path for rows holding invalid UTF-8: fetch bytes, decode row by row."""
        blob_sql = sql.replace(
            SELECT_RECORDS,
            "SELECT id, CAST(role AS BLOB), CAST(content AS BLOB), CAST(tool_calls AS BLOB), "
            "CAST(tool_call_id AS BLOB), created_at, offload_id, offload_tokens, metadata "
            "FROM messages",
        )
        rows: list[tuple] = []
        for rid, *fields, created, oid, tokens, meta in conn.execute(blob_sql, args):
            try:
                texts = [f.decode("utf-8") if f is not None else None for f in fields]
            except UnicodeDecodeError:
                bad = CorruptRow(rid, "text is not valid UTF-8")
                rows.append((rid, bad, None, None, None, created, oid, tokens, meta))
                continue
            rows.append((rid, *texts, created, oid, tokens, meta))
        return rows

    def _hand_over(self, conn: sqlite3.Connection) -> str | None:
        # The shared_hand_over trigger does the work and records the heir in the row.
        cur = conn.execute("INSERT INTO shared_hand_overs (session_id) VALUES (?)", (self._id,))
        row = conn.execute(
            "SELECT heir_id FROM shared_hand_overs WHERE id = ?", (cur.lastrowid,)
        ).fetchone()
        conn.execute("DELETE FROM shared_hand_overs WHERE id = ?", (cur.lastrowid,))
        return str(row[0]) if row is not None and row[0] is not None else None

    def remember_model(self, settings: SessionSettings) -> None:
        """Record how the session runs (does not count as activity: updated_at stays)."""
        with self._m.transaction() as conn:
            if not self._m._exists(conn, self._id):
                raise SessionNotFoundError(self._id, "it was deleted")
            conn.execute(
                REMEMBER_SQL + " VALUES (?, ?, ?, ?, ?, ?)" + REMEMBER_CONFLICT_SQL,
                (self._id, *settings_values(settings)),
            )

    # -- writes (each one transaction) ------------------------------------------------

    def add_messages(
        self, msgs: list[Message], offloads: Sequence[OffloadLink | None] = ()
    ) -> list[int]:
        """Append ``msgs`` in one transaction; return their new ids, in order."""
        if not msgs:
            return []
        links = offload_links(msgs, offloads)
        try:
            return self._add(msgs, links)
        except UnicodeEncodeError:
            return self._add([map_message(m, scrub_surrogates) for m in msgs], links)

    def _add(self, msgs: list[Message], links: list[OffloadLink | None]) -> list[int]:
        now = time.time()
        sid = self._id
        rows = [(sid, *message_values(m, o), now) for m, o in zip(msgs, links, strict=True)]
        with self._m.transaction() as conn:
            # First, so a deleted session fails before anything is inserted.
            self._touch(conn, now, len(rows), title=first_title(msgs))
            if len(rows) == 1:
                inserted = conn.execute(_INSERT_MESSAGE, rows[0]).lastrowid
                assert inserted is not None  # sqlite3 sets it after every successful INSERT
                last = inserted
            else:
                conn.executemany(_INSERT_MESSAGE, rows)
                # Under BEGIN IMMEDIATE nobody else inserts, and AUTOINCREMENT hands out
                # consecutive ids, so the batch is exactly the last len(rows) ids.
                (last,) = conn.execute("SELECT last_insert_rowid()").fetchone()
        return list(range(last - len(rows) + 1, last + 1))


def open_existing_manager(
    path: Path, *, on_session_deleted: Callable[[str], None] | None = None
) -> Manager | None:
    """The store in ``path``, or None when there is none yet: reading must not create one."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:  # an unreadable home, or a file where the home should be
        raise open_error(path, exc.strerror or str(exc)) from exc
    try:
        return Manager(path, on_session_deleted=on_session_deleted)
    except StoreError:
        if unwritable_cause(path) is None:
            raise
    # Reading needs no write access: list/show/search/export work on a read-only store.
    return Manager(path, on_session_deleted=on_session_deleted, read_only=True)


def open_manager(path: Path, *, on_session_deleted: Callable[[str], None] | None = None) -> Manager:
    """The store in ``path`` (its directory created 0700 if missing). The CLI makes an
    existing home private first (``harness9.config.store_location``)."""
    return Manager(path, on_session_deleted=on_session_deleted)
