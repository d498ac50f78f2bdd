"""SQLiteSession and Manager: schema, transactions, ids, permissions, ordering."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from freezegun import freeze_time

from harness9.config import db_path
from harness9.schema import Message, TodoItem, ToolCall
from harness9.store import (
    AmbiguousSessionError,
    Checkpoint,
    CorruptRow,
    Manager,
    SessionNotFoundError,
    StoreError,
    open_manager,
)
from harness9.store.backend import SessionStore, open_url
from harness9.store.migrations import MIGRATIONS, SCHEMA_VERSION


@pytest.fixture
def manager(store_url: str, backend: str) -> Iterator[SessionStore]:
    if backend == "postgres":
        with open_url(store_url) as pg:
            yield pg
        return
    with Manager(store_url) as m:
        yield m


def raw(db: Path) -> sqlite3.Connection:
    """A plain connection of our own, to inspect or sabotage the file."""
    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


def columns(conn: sqlite3.Connection, table: str) -> list[tuple[str, str, int]]:
    return [
        (name, type_, notnull)
        for _, name, type_, notnull, *_ in conn.execute(f"PRAGMA table_info({table})")
    ]


# -- schema ------------------------------------------------------------------


def test_final_schema(manager: Manager, db: Path):
    conn = raw(db)
    assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    assert len(MIGRATIONS) == SCHEMA_VERSION
    assert "create_session_usage" in [name for name, _ in MIGRATIONS]
    assert "index_cjk_trigram" in [name for name, _ in MIGRATIONS]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    fts_shadow = {
        f"{t}_{s}"
        for t in ("messages_fts", "messages_cjk")
        for s in ("config", "content", "data", "docsize", "idx")
    }
    assert tables == {
        "sessions",
        "messages",
        "todos",
        "compactions",
        "schema_migrations",
        "sqlite_sequence",
        "messages_fts",
        "messages_cjk",
        *fts_shadow,
        "fts_state",
        "session_usage",
        "session_settings",
        "compaction_data",
        "compaction_details",
        "session_imports",
        "session_pins",
        "session_forks",
        "compaction_instructions",
        "subagent_sessions",
        "inherited_messages",
        "shared_hand_overs",
        "todo_lists",
    }
    assert columns(conn, "session_pins") == [
        ("id", "INTEGER", 0),
        ("session_id", "TEXT", 1),
        ("text", "TEXT", 1),
        ("created_at", "REAL", 1),
    ]
    assert columns(conn, "session_forks") == [
        ("session_id", "TEXT", 1),
        ("origin_id", "TEXT", 1),
        ("origin_message", "INTEGER", 1),
    ]
    assert columns(conn, "compaction_instructions") == [
        ("compaction_id", "INTEGER", 0),
        ("messages", "TEXT", 1),
    ]
    assert columns(conn, "subagent_sessions") == [
        ("session_id", "TEXT", 1),
        ("parent_id", "TEXT", 1),
        ("tool_call_id", "TEXT", 1),
        ("description", "TEXT", 1),
    ]
    assert columns(conn, "session_imports") == [
        ("session_id", "TEXT", 1),
        ("token", "TEXT", 1),
        ("first_id", "INTEGER", 1),
        ("last_id", "INTEGER", 1),
        ("pid", "INTEGER", 1),
        ("host", "TEXT", 1),
        ("started_at", "REAL", 1),
        ("touched_at", "REAL", 1),
    ]
    assert columns(conn, "session_usage") == [
        ("session_id", "TEXT", 1),
        ("model_calls", "INTEGER", 1),
        ("input_tokens", "INTEGER", 1),
        ("output_tokens", "INTEGER", 1),
        ("cached_tokens", "INTEGER", 1),
        ("cost_usd", "REAL", 1),
        ("unpriced_calls", "INTEGER", 1),
        ("summary_calls", "INTEGER", 1),
        ("summary_input_tokens", "INTEGER", 1),
        ("summary_output_tokens", "INTEGER", 1),
        ("summary_cost_usd", "REAL", 1),
        ("summary_unpriced_calls", "INTEGER", 1),
        ("cache_write_tokens", "INTEGER", 1),
    ]
    assert columns(conn, "sessions") == [
        ("id", "TEXT", 0),
        ("created_at", "REAL", 1),
        ("updated_at", "REAL", 1),
        ("title", "TEXT", 1),
        ("message_count", "INTEGER", 1),
        ("imported_at", "REAL", 0),
    ]
    assert columns(conn, "session_settings") == [
        ("session_id", "TEXT", 1),
        ("model", "TEXT", 1),
        ("context_window", "INTEGER", 1),
        ("api_base", "TEXT", 1),
        ("workdir", "TEXT", 1),
        ("count_samples", "TEXT", 1),
    ]
    assert columns(conn, "messages") == [
        ("id", "INTEGER", 0),
        ("session_id", "TEXT", 1),
        ("role", "TEXT", 1),
        ("content", "TEXT", 1),
        ("tool_calls", "TEXT", 0),
        ("tool_call_id", "TEXT", 0),
        ("created_at", "REAL", 1),
        ("offload_id", "TEXT", 0),
        ("offload_tokens", "INTEGER", 0),
        ("metadata", "TEXT", 0),
    ]
    assert columns(conn, "fts_state") == [
        ("id", "INTEGER", 0),
        ("indexed_upto", "INTEGER", 1),
        ("cjk_indexed_upto", "INTEGER", 1),
    ]
    assert conn.execute("SELECT id, indexed_upto, cjk_indexed_upto FROM fts_state").fetchall() == [
        (1, 0, 0)
    ]
    assert columns(conn, "todos") == [
        ("session_id", "TEXT", 1),
        ("position", "INTEGER", 1),
        ("content", "TEXT", 1),
        ("status", "TEXT", 1),
    ]
    assert columns(conn, "compactions") == [
        ("id", "INTEGER", 0),
        ("session_id", "TEXT", 1),
        ("last_message_id", "INTEGER", 1),
        ("summary", "TEXT", 1),
        ("strategy", "TEXT", 1),
        ("tokens_before", "INTEGER", 1),
        ("tokens_after", "INTEGER", 1),
        ("messages_before", "INTEGER", 1),
        ("messages_after", "INTEGER", 1),
        ("created_at", "REAL", 1),
        ("facts", "TEXT", 0),
    ]
    assert columns(conn, "compaction_details") == [
        ("compaction_id", "INTEGER", 0),
        ("recall_index", "TEXT", 1),
        ("rewrites", "TEXT", 1),
        ("state_note", "TEXT", 1),
    ]
    assert columns(conn, "compaction_data") == [
        ("compaction_id", "INTEGER", 0),
        ("data", "TEXT", 1),
    ]
    fks = {
        t: [(r[2], r[3], r[4], r[6]) for r in conn.execute(f"PRAGMA foreign_key_list({t})")]
        for t in ("messages", "todos", "compactions")
    }
    assert fks == {t: [("sessions", "session_id", "id", "CASCADE")] for t in fks}
    indexes = {
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        )
    }
    assert indexes == {
        "idx_messages_session",
        "idx_sessions_updated",
        "idx_compactions_session",
        "idx_session_pins",
        "idx_session_forks_origin",
        "subagent_sessions_parent",
        "idx_inherited_messages_base",
        "idx_todo_lists_session",
    }
    # A fork's base is never deleted under it (the hand-over trigger goes first).
    assert sorted(
        (r[2], r[3], r[4], r[6])
        for r in conn.execute("PRAGMA foreign_key_list(inherited_messages)")
    ) == [("sessions", "base_id", "id", "NO ACTION"), ("sessions", "session_id", "id", "CASCADE")]
    assert sorted(
        (r[2], r[3], r[4], r[6]) for r in conn.execute("PRAGMA foreign_key_list(subagent_sessions)")
    ) == [("sessions", "parent_id", "id", "CASCADE"), ("sessions", "session_id", "id", "CASCADE")]
    assert conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages_fts'").fetchone() == (
        "CREATE VIRTUAL TABLE messages_fts USING fts5(body, tokenize = 'unicode61')",
    )
    triggers = {
        (name, table)
        for name, table in conn.execute(
            "SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'"
        )
    }
    # No insert trigger: messages are indexed by the next search (migration 5).
    assert triggers == {
        ("messages_fts_delete", "messages"),
        ("messages_fts_update", "messages"),
        ("messages_cjk_delete", "messages"),
        ("messages_cjk_update", "messages"),
        ("sessions_hand_over_shared", "sessions"),
        ("shared_hand_over", "shared_hand_overs"),
    }
    assert conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages_cjk'").fetchone() == (
        "CREATE VIRTUAL TABLE messages_cjk USING fts5(body, tokenize = 'trigram')",
    )


def test_migrations_are_recorded_by_name(manager: Manager, db: Path):
    rows = (
        raw(db).execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    )
    assert rows == [(i, name) for i, (name, _) in enumerate(MIGRATIONS, start=1)]


@pytest.mark.sqlite_only
def test_connection_uses_wal_foreign_keys_and_busy_timeout(manager: Manager):
    conn = manager.conn
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
    assert conn.execute("PRAGMA busy_timeout").fetchone() == (5000,)


def test_reopening_keeps_sessions_and_does_not_rerun_migrations(db: Path):
    with Manager(db) as m:
        sid = m.new_session().session_id
        m.open_session(sid).add_messages([Message("user", "hi")])
    with Manager(db) as m:
        assert m.open_session(sid).get_messages() == [Message("user", "hi")]
    assert raw(db).execute("SELECT count(*) FROM schema_migrations").fetchone() == (SCHEMA_VERSION,)


def test_a_partial_old_schema_is_migrated_forward(db: Path):
    conn = raw(db)
    conn.execute("BEGIN")
    for statement in MIGRATIONS[0][1].split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    conn.execute("COMMIT")
    conn.close()
    with Manager(db) as m:
        m.new_session().save_todos([TodoItem("works")])
    assert raw(db).execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


# -- opening failures ------------------------------------------------------------


def test_a_file_that_is_not_a_database_is_reported_and_left_untouched(db: Path):
    db.write_bytes(b"this is my thesis, not a database" * 100)
    before = db.read_bytes()
    with pytest.raises(StoreError, match=r"sessions\.db.*not a database.*left untouched"):
        Manager(db)
    assert db.read_bytes() == before


def test_a_newer_schema_version_is_refused(db: Path):
    raw(db).execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match=rf"schema version {SCHEMA_VERSION + 1}.*upgrade harness9"):
        Manager(db)


def test_a_foreign_sqlite_database_is_refused(db: Path):
    raw(db).execute("CREATE TABLE photos (id INTEGER)")
    with pytest.raises(StoreError, match="some other program"):
        Manager(db)
    assert raw(db).execute("SELECT name FROM sqlite_master").fetchall() == [("photos",)]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory")
def test_an_unreadable_directory_is_a_store_error(tmp_path: Path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o000)
    try:
        with pytest.raises(StoreError, match="locked"):
            Manager(locked / "sessions.db")
    finally:
        locked.chmod(0o700)


def test_a_file_in_place_of_the_home_directory_is_a_store_error(tmp_path: Path):
    (tmp_path / "home").write_text("oops")
    with pytest.raises(StoreError, match=r"cannot open session database .*home/sessions\.db"):
        Manager(tmp_path / "home" / "sessions.db")


def test_a_directory_in_place_of_the_file_is_a_store_error(db: Path):
    db.mkdir()
    with pytest.raises(StoreError, match=r"cannot open session database .*sessions\.db"):
        Manager(db)


def test_using_a_closed_manager_is_a_store_error(db: Path):
    m = Manager(db)
    s = m.new_session()
    m.close()
    with pytest.raises(StoreError, match="closed"):
        s.get_messages()


# -- permissions -------------------------------------------------------------------


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_home_directory_is_0700_and_database_files_0600(harness9_home: Path):
    old = os.umask(0o022)
    try:
        with open_manager(db_path()) as m:
            m.new_session().add_messages([Message("user", "secret")])
            db = harness9_home / "sessions.db"
            assert mode(harness9_home) == 0o700
            assert mode(db) == 0o600
            assert mode(Path(f"{db}-wal")) == 0o600
            assert mode(Path(f"{db}-shm")) == 0o600
    finally:
        os.umask(old)


def test_an_existing_world_readable_database_is_tightened_to_0600(db: Path):
    Manager(db).close()
    db.chmod(0o644)
    Manager(db).close()
    assert mode(db) == 0o600


# -- ids ------------------------------------------------------------------------

MALFORMED_IDS = [
    "",
    "x",
    "not-a-uuid",
    "../../etc/passwd",
    "12345678123456781234567812345678",  # a UUID without hyphens
    "{12345678-1234-5678-1234-567812345678}",
    "12345678-1234-5678-1234-567812345678\n",
    "12345678-1234-5678-1234-567812345678/..",
    "ABCDEF01-1234-5678-1234-567812345678",
    "a" * 10_000,
    "' OR 1=1 --",
]


@pytest.mark.parametrize("bad", MALFORMED_IDS)
def test_open_session_with_a_malformed_id_is_not_found(manager: Manager, bad: str):
    manager.new_session()
    with pytest.raises(SessionNotFoundError):
        manager.open_session(bad)


def test_open_session_with_a_well_formed_unknown_id_is_not_found(manager: Manager):
    with pytest.raises(SessionNotFoundError, match="no session with id"):
        manager.open_session(str(uuid.uuid4()))


@pytest.mark.parametrize("bad", ["../victim", "..", "/", ""])
def test_delete_with_a_malformed_id_touches_no_path(manager: Manager, tmp_path: Path, bad: str):
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "tool_results").mkdir()
    with pytest.raises(SessionNotFoundError):
        manager.delete_session(bad)
    assert victim.is_dir()
    assert (tmp_path / "tool_results").is_dir()


def test_new_sessions_get_distinct_canonical_uuids(manager: Manager):
    ids = {manager.new_session().session_id for _ in range(20)}
    assert len(ids) == 20
    assert all(str(uuid.UUID(i)) == i for i in ids)


def insert_session(db: Path, sid: str) -> None:
    raw(db).execute("INSERT INTO sessions (id, created_at, updated_at) VALUES (?, 1, 1)", (sid,))


def test_resolve_id_expands_a_unique_prefix(manager: Manager):
    sid = manager.new_session().session_id
    assert manager.resolve_id(sid[:6]) == sid
    assert manager.resolve_id(sid.upper()) == sid


def test_resolve_id_reports_an_ambiguous_prefix(manager: Manager, db: Path):
    insert_session(db, "abcd0000-0000-4000-8000-000000000001")
    insert_session(db, "abcd0000-0000-4000-8000-000000000002")
    with pytest.raises(AmbiguousSessionError, match="'abcd' is ambiguous"):
        manager.resolve_id("abcd")


@pytest.mark.parametrize("prefix", ["ffff", "*", "%", "zz", ""])
def test_resolve_id_of_no_match_is_not_found(manager: Manager, db: Path, prefix: str):
    insert_session(db, "abcd0000-0000-4000-8000-000000000001")
    with pytest.raises(SessionNotFoundError):
        manager.resolve_id(prefix)


# -- listing -----------------------------------------------------------------------


def test_list_sessions_reports_count_and_title(manager: Manager):
    s = manager.new_session()
    s.add_messages(
        [Message("system", "be brief"), Message("user", "Fix the\n  flaky   test\tplease")]
    )
    s.add_messages([Message("assistant", "ok"), Message("user", "second question")])
    (info,) = manager.list_sessions()
    assert (info.id, info.message_count, info.title) == (
        s.session_id,
        4,
        "Fix the flaky test please",
    )


def test_title_is_cut_to_sixty_characters(manager: Manager):
    s = manager.new_session()
    s.add_messages([Message("user", "word " * 40)])
    (info,) = manager.list_sessions()
    assert len(info.title) == 60
    assert info.title.endswith("…")


def test_title_is_empty_until_a_user_message_arrives(manager: Manager):
    s = manager.new_session()
    s.add_messages([Message("assistant", "hello")])
    assert manager.list_sessions()[0].title == ""
    s.add_messages([Message("user", "now a question")])
    assert manager.list_sessions()[0].title == "now a question"


def test_popping_the_only_user_message_clears_the_title(manager: Manager):
    s = manager.new_session()
    s.add_messages([Message("user", "oops")])
    s.pop_message()
    assert (manager.list_sessions()[0].title, manager.list_sessions()[0].message_count) == ("", 0)


def test_clear_resets_count_and_title(manager: Manager):
    s = manager.new_session()
    s.add_messages([Message("user", "a"), Message("assistant", "b")])
    s.clear()
    info = manager.list_sessions()[0]
    assert (info.message_count, info.title) == (0, "")


def test_list_sessions_is_most_recently_updated_first(manager: Manager):
    with freeze_time("2026-03-01 12:00:00") as clock:
        a = manager.new_session()
        clock.tick(10)
        b = manager.new_session()
        clock.tick(10)
        c = manager.new_session()
        clock.tick(10)
        a.add_messages([Message("user", "bump a")])
        assert [i.id for i in manager.list_sessions()] == [a.session_id, c.session_id, b.session_id]
        assert manager.list_sessions()[0].updated_at == 1772366430.0  # 12:00:30 UTC


def test_equal_update_times_list_the_newest_created_first(manager: Manager):
    with freeze_time("2026-03-01 12:00:00"):
        ids = [manager.new_session().session_id for _ in range(4)]
        assert [i.id for i in manager.list_sessions()] == ids[::-1]


def test_list_sessions_limit(manager: Manager):
    with freeze_time("2026-03-01") as clock:
        ids = []
        for _ in range(3):
            ids.append(manager.new_session().session_id)
            clock.tick(1)
    assert [i.id for i in manager.list_sessions(limit=2)] == ids[:0:-1]


def test_sessions_older_than_uses_the_last_update(manager: Manager):
    with freeze_time("2026-03-01") as clock:
        old = manager.new_session()
        recent = manager.new_session()
        clock.tick(100)
        recent.add_messages([Message("user", "still here")])
        cutoff = 1772323200.0 + 50  # 2026-03-01 00:00:50 UTC
        assert [i.id for i in manager.sessions_older_than(cutoff)] == [old.session_id]


# -- delete ----------------------------------------------------------------------------


def count_rows(db: Path, table: str, sid: str) -> int:
    return (
        raw(db).execute(f"SELECT count(*) FROM {table} WHERE session_id = ?", (sid,)).fetchone()[0]
    )


def test_delete_cascades_to_messages_todos_and_checkpoints(manager: Manager, db: Path):
    s = manager.new_session()
    ids = s.add_messages([Message("user", "a"), Message("assistant", "b")])
    s.save_todos([TodoItem("t")])
    s.add_checkpoint(Checkpoint(ids[0], "sum", "summarization", 10, 5, 2, 1))
    other = manager.new_session()
    other.add_messages([Message("user", "keep me")])
    manager.delete_session(s.session_id)
    assert [count_rows(db, t, s.session_id) for t in ("messages", "todos", "compactions")] == [
        0,
        0,
        0,
    ]
    assert other.get_messages() == [Message("user", "keep me")]
    with pytest.raises(SessionNotFoundError):
        manager.open_session(s.session_id)


def test_deleting_calls_the_hook_with_each_deleted_id_after_the_commit(db: Path):
    seen: list[tuple[str, bool]] = []

    def hook(sid: str) -> None:  # the row is already gone when the hook runs
        with raw(db) as conn:
            row = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone()
        seen.append((sid, row is None))

    with Manager(db, on_session_deleted=hook) as m:
        a, b, keep = (m.new_session().session_id for _ in range(3))
        m.delete_sessions([a, b])
        assert m.delete_if_empty(keep)
    assert seen == [(a, True), (b, True), (keep, True)]


def test_a_failed_deletion_calls_no_hook(db: Path):
    seen: list[str] = []
    with Manager(db, on_session_deleted=seen.append) as m:
        sid = m.new_session().session_id
        with pytest.raises(SessionNotFoundError):
            m.delete_sessions([sid, "0" * 8 + "-0000-4000-8000-" + "0" * 12])
        assert seen == [] and [i.id for i in m.list_sessions()] == [sid]


def test_delete_of_an_unknown_session_raises_not_found(manager: Manager):
    with pytest.raises(SessionNotFoundError):
        manager.delete_session(str(uuid.uuid4()))


def test_delete_sessions_deletes_none_if_one_is_missing(manager: Manager):
    s = manager.new_session()
    with pytest.raises(SessionNotFoundError):
        manager.delete_sessions([s.session_id, str(uuid.uuid4())])
    assert manager.open_session(s.session_id).session_id == s.session_id


def test_writing_to_a_deleted_session_raises_not_found(manager: Manager):
    s = manager.new_session()
    manager.delete_session(s.session_id)
    with pytest.raises(SessionNotFoundError):
        s.add_messages([Message("user", "late")])


def test_checkpointing_a_deleted_session_says_it_was_deleted(manager: Manager):
    s = manager.new_session()
    ids = s.add_messages([Message("user", "a")])
    manager.delete_session(s.session_id)
    # Its messages went with it, but the error names the cause, not a foreign message.
    with pytest.raises(SessionNotFoundError, match="it was deleted"):
        s.add_checkpoint(Checkpoint(ids[0], "sum", "summarization", 10, 5, 1, 1))


# -- crash safety: a failure injected mid-transaction by a trigger -----------------------


def fail_when(db: Path, trigger_sql: str) -> None:
    raw(db).execute(trigger_sql)


@pytest.fixture
def filled(manager: Manager):
    s = manager.new_session()
    ids = s.add_messages([Message("user", "first"), Message("assistant", "second")])
    s.save_todos([TodoItem("old todo")])
    s.add_checkpoint(Checkpoint(ids[1], "sum", "summarization", 10, 5, 2, 1))
    return s


def snapshot(manager: Manager, s):
    info = manager.session_info(s.session_id)
    return (
        s.get_messages(),
        s.get_todos(),
        s.list_checkpoints(),
        info.message_count,
        info.title,
        info.updated_at,
    )


def test_failed_add_leaves_nothing_behind(manager: Manager, db: Path, filled):
    before = snapshot(manager, filled)
    fail_when(
        db,
        "CREATE TRIGGER t BEFORE INSERT ON messages WHEN NEW.content = 'boom' BEGIN SELECT RAISE(ABORT, 'injected'); END",
    )
    with pytest.raises(StoreError, match="injected"):
        filled.add_messages([Message("user", "fine"), Message("user", "boom")])
    assert snapshot(manager, filled) == before


def test_failed_pop_keeps_the_message_and_its_checkpoint(manager: Manager, db: Path, filled):
    before = snapshot(manager, filled)
    fail_when(
        db,
        "CREATE TRIGGER t BEFORE UPDATE OF updated_at ON sessions BEGIN SELECT RAISE(ABORT, 'injected'); END",
    )
    with pytest.raises(StoreError, match="injected"):
        filled.pop_message()
    assert snapshot(manager, filled) == before


def test_failed_clear_keeps_everything(manager: Manager, db: Path, filled):
    before = snapshot(manager, filled)
    fail_when(
        db,
        "CREATE TRIGGER t BEFORE UPDATE OF updated_at ON sessions BEGIN SELECT RAISE(ABORT, 'injected'); END",
    )
    with pytest.raises(StoreError, match="injected"):
        filled.clear()
    assert snapshot(manager, filled) == before


def test_failed_save_todos_keeps_the_old_list(manager: Manager, db: Path, filled):
    before = snapshot(manager, filled)
    fail_when(
        db,
        "CREATE TRIGGER t BEFORE INSERT ON todos WHEN NEW.position = 1 BEGIN SELECT RAISE(ABORT, 'injected'); END",
    )
    with pytest.raises(StoreError, match="injected"):
        filled.save_todos([TodoItem("new 1"), TodoItem("new 2")])
    assert snapshot(manager, filled) == before


def test_failed_delete_keeps_every_session(manager: Manager, db: Path, filled):
    other = manager.new_session()
    other.save_todos([TodoItem("guarded")])
    fail_when(
        db,
        "CREATE TRIGGER t BEFORE DELETE ON todos WHEN OLD.content = 'guarded' BEGIN SELECT RAISE(ABORT, 'injected'); END",
    )
    with pytest.raises(StoreError, match="injected"):
        manager.delete_sessions([filled.session_id, other.session_id])
    assert {i.id for i in manager.list_sessions()} == {filled.session_id, other.session_id}
    assert filled.get_messages() == [Message("user", "first"), Message("assistant", "second")]


def test_a_store_just_migrated_deletes_after_another_connection_changes_the_schema(
    manager: Manager, db: Path, filled
):
    # SQLite 3.40 failed this cascade with "no such table: sessions" on the connection
    # that had run the migrations (as `manager` did, on a new file).
    raw(db).execute("CREATE TABLE added_by_another_process (x)")
    assert manager.delete_sessions([filled.session_id]) == [filled.session_id]
    assert manager.list_sessions() == []


def test_the_store_stays_writable_after_a_failed_write(manager: Manager, db: Path, filled):
    fail_when(
        db,
        "CREATE TRIGGER t BEFORE INSERT ON messages WHEN NEW.content = 'boom' BEGIN SELECT RAISE(ABORT, 'injected'); END",
    )
    with pytest.raises(StoreError):
        filled.add_messages([Message("user", "boom")])
    filled.add_messages([Message("user", "after")])
    assert filled.get_messages()[-1] == Message("user", "after")


# -- corrupt rows ----------------------------------------------------------------------


def test_a_corrupt_tool_calls_row_is_skipped_and_reported(manager: Manager, db: Path):
    s = manager.new_session()
    ids = s.add_messages(
        [
            Message("user", "a"),
            Message("assistant", "", [ToolCall("c", "bash", "{}")]),
            Message("user", "c"),
        ]
    )
    raw(db).execute("UPDATE messages SET tool_calls = '[{\"id\": ' WHERE id = ?", (ids[1],))
    assert s.get_messages() == [Message("user", "a"), Message("user", "c")]
    assert s.corrupt_rows == [CorruptRow(ids[1], "tool_calls is not valid JSON")]


def test_tool_calls_of_the_wrong_shape_are_reported(manager: Manager, db: Path):
    s = manager.new_session()
    ids = s.add_messages([Message("assistant", "", [ToolCall("c", "bash", "{}")])])
    raw(db).execute("UPDATE messages SET tool_calls = '{\"id\": 1}' WHERE id = ?", (ids[0],))
    assert s.get_messages() == []
    assert s.corrupt_rows == [CorruptRow(ids[0], "tool_calls is not a list of tool calls")]


def test_invalid_utf8_text_is_skipped_and_reported(manager: Manager, db: Path):
    s = manager.new_session()
    ids = s.add_messages([Message("user", "a"), Message("user", "b")])
    raw(db).execute("UPDATE messages SET content = CAST(X'FFFE41' AS TEXT) WHERE id = ?", (ids[0],))
    assert s.get_messages() == [Message("user", "b")]
    assert s.corrupt_rows == [CorruptRow(ids[0], "text is not valid UTF-8")]


def test_corrupt_rows_are_refreshed_by_each_read(manager: Manager, db: Path):
    s = manager.new_session()
    ids = s.add_messages([Message("assistant", "", [ToolCall("c", "bash", "{}")])])
    raw(db).execute("UPDATE messages SET tool_calls = 'nope' WHERE id = ?", (ids[0],))
    s.get_messages()
    raw(db).execute("UPDATE messages SET tool_calls = NULL WHERE id = ?", (ids[0],))
    s.get_messages()
    assert s.corrupt_rows == []


def test_pop_of_a_corrupt_newest_row_fails_and_keeps_it(manager: Manager, db: Path):
    s = manager.new_session()
    ids = s.add_messages(
        [Message("user", "a"), Message("assistant", "", [ToolCall("c", "bash", "{}")])]
    )
    raw(db).execute("UPDATE messages SET tool_calls = 'nope' WHERE id = ?", (ids[1],))
    with pytest.raises(StoreError, match=f"message row {ids[1]}"):
        s.pop_message()
    assert count_rows(db, "messages", s.session_id) == 2


# -- odd content --------------------------------------------------------------------------


def test_a_lone_surrogate_is_stored_as_a_replacement_character(manager: Manager):
    s = manager.new_session()
    s.add_messages([Message("assistant", "bad \ud800 char")])
    assert s.get_messages() == [Message("assistant", "bad \ufffd char")]


def test_huge_content_round_trips(manager: Manager, backend: str):
    s = manager.new_session()
    big = "é" * 3_000_000 + "\x00end"
    s.add_messages([Message("tool", big, tool_call_id="c1")])
    # PostgreSQL text cannot hold NUL: that store keeps U+FFFD in its place (documented).
    expected = big if backend == "sqlite" else big.replace("\x00", "\ufffd")
    assert s.get_messages()[0].content == expected


# -- concurrency ----------------------------------------------------------------------------


def test_threads_sharing_a_manager_lose_no_message(manager: Manager):
    s = manager.new_session()

    def writer(n: int) -> None:
        for i in range(25):
            s.add_messages([Message("user", f"{n}-{i}")])

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(s.get_messages()) == 100
    assert manager.session_info(s.session_id).message_count == 100


def test_two_managers_on_one_file_queue_instead_of_failing(db: Path):
    with Manager(db) as a, Manager(db) as b:
        sid = a.new_session().session_id
        sa, sb = a.open_session(sid), b.open_session(sid)
        conn = raw(db)
        conn.execute("BEGIN IMMEDIATE")  # another process holds the write lock for a moment
        timer = threading.Timer(0.3, lambda: conn.execute("COMMIT"))
        timer.start()
        sa.add_messages([Message("user", "waited")])
        timer.join()
        sb.add_messages([Message("user", "second")])
        assert [m.content for m in sa.get_messages()] == ["waited", "second"]


def test_title_of_a_message_led_by_a_long_run_of_blanks_is_still_found(manager: Manager):
    s = manager.new_session()
    s.add_messages([Message("user", " \n" * 2000 + "the actual question")])
    assert manager.list_sessions()[0].title == "the actual question"
