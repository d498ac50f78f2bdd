"""Long writes in bounded steps: another process saving meanwhile never waits long or fails.

The other process is real (a subprocess with its own Manager), as a running chat is.
Waits are asserted against a generous bound (2 s, against steps of ~100 ms and the
5 s lock timeout that used to be hit), never a tight timing.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from harness9.schema import Message
from harness9.store import Manager, fts_index
from harness9.store.fts_index import is_behind
from harness9.store.migrations import MIGRATIONS, SCHEMA_VERSION
from harness9.store.sqlite import STEP_MAX_UNITS
from tests.support.cli import BackgroundProcess, wait_until

REPO = Path(__file__).resolve().parents[2]
GENEROUS_WAIT_S = 2.0

# Saves one message every 20 ms until told to stop; reports every save's wait.
WRITER = """
import json, sys, time
from pathlib import Path
from harness9.schema import Message
from harness9.store import Manager
db, sid, ready, stop = sys.argv[1:5]
waits, errors = [], []
with Manager(db) as m:
    s = m.open_session(sid)
    Path(ready).touch()
    i = 0
    while not Path(stop).exists():
        t0 = time.monotonic()
        try:
            s.add_messages([Message("user", f"saved {i}")])
            waits.append(time.monotonic() - t0)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        i += 1
        time.sleep(0.02)
print(json.dumps({"waits": waits, "errors": errors}))
"""


class Writer(BackgroundProcess):
    """A second process saving to ``sid`` while the test runs a long write."""

    def __init__(self, db: Path, sid: str, tmp: Path) -> None:
        super().__init__(WRITER, str(db), sid, tmp=tmp)

    def saves(self) -> tuple[list[float], list[str]]:
        report = self.finish()
        return report["waits"], report["errors"]


def insert_unindexed(db: Path, sid: str, n: int) -> None:
    """``n`` messages of varied words, written straight to the file (fast) and not indexed."""
    with Manager(db) as m, m.transaction() as conn:
        conn.execute(
            "WITH RECURSIVE k(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM k WHERE x < ?) "
            "INSERT INTO messages (session_id, role, content, created_at) "
            "SELECT ?, 'user', 'word' || (x % 977) || ' parser compile ' || x || "
            "' alpha beta gamma delta ' || (x * 7919 % 10007), 1000.0 FROM k",
            (n, sid),
        )
        conn.execute("UPDATE sessions SET message_count = message_count + ? WHERE id = ?", (n, sid))


def test_a_search_catching_up_100000_messages_lets_another_process_save(
    manager: Manager, db: Path, tmp_path: Path
):
    big, chat = manager.new_session(), manager.new_session()
    insert_unindexed(db, big.session_id, 100_000)
    big.add_messages([Message("user", "the nightly build broke")])
    writer = Writer(db, chat.session_id, tmp_path)
    steps: list[tuple[int, int]] = []
    try:
        hits = manager.search(
            "nightly", on_progress=lambda done, total: steps.append((done, total))
        )
    finally:
        waits, errors = writer.saves()
    assert [h.snippet.count("nightly") for h in hits] == [1]
    assert errors == []
    assert len(waits) >= 3, "the writer saved too rarely to have raced the catch-up"
    assert max(waits) < GENEROUS_WAIT_S, f"longest wait {max(waits):.2f} s"
    total = steps[0][1]  # the writer's saves made before the search started count too
    assert total >= 100_001 and steps[0] == (0, total) and steps[-1] == (total, total)
    # Steps grow to what ~0.1 s holds on this machine (fewer on a fast, idle one), never
    # past the cap: 100,000 messages cannot go in one transaction.
    sizes = [b[0] - a[0] for a, b in zip(steps, steps[1:], strict=False)]
    assert len(sizes) >= 3 and max(sizes) <= STEP_MAX_UNITS, sizes
    saved = [m.content for m in manager.open_session(chat.session_id).get_messages()]
    assert saved == [f"saved {i}" for i in range(len(waits))]


def test_a_search_finds_what_was_stored_before_it_not_necessarily_what_came_during_it(
    manager: Manager, db: Path
):
    s = manager.new_session()
    insert_unindexed(db, s.session_id, 5_000)
    s.add_messages([Message("user", "before the search")])
    later = manager.new_session()

    def write_during(done: int, total: int) -> None:
        if done == 0:
            later.add_messages([Message("user", "during the search")])

    assert [h.message_id for h in manager.search("before", on_progress=write_during)]
    with manager.read() as conn:
        assert is_behind(conn), "the message written during the search is left for the next"
    assert len(manager.search("during")) == 1


def test_no_progress_is_reported_when_the_index_is_up_to_date(manager: Manager):
    manager.new_session().add_messages([Message("user", "hello there")])
    manager.search("hello")
    calls: list[tuple[int, int]] = []
    manager.search("hello", on_progress=lambda d, t: calls.append((d, t)))
    assert calls == []


def test_deleting_many_old_sessions_lets_another_process_save(
    manager: Manager, db: Path, tmp_path: Path
):
    old = [manager.new_session() for _ in range(400)]
    for s in old:
        s.add_messages([Message("user", f"old {k} alpha beta") for k in range(50)])
    manager.search("alpha")  # indexed rows make deletes dearer: each is removed from the index
    with manager.transaction() as conn:
        conn.execute("UPDATE sessions SET updated_at = 1000.0")
    chat = manager.new_session()
    writer = Writer(db, chat.session_id, tmp_path)
    try:
        deleted = manager.delete_sessions_older_than(2000.0)
    finally:
        waits, errors = writer.saves()
    assert sorted(deleted) == sorted(s.session_id for s in old)
    assert errors == [] and max(waits) < GENEROUS_WAIT_S
    assert [i.id for i in manager.list_sessions()] == [chat.session_id]
    assert manager.search("alpha") == []


def test_a_session_written_to_during_a_stepped_delete_is_kept(manager: Manager):
    sessions = [manager.new_session() for _ in range(30)]
    for s in sessions:
        s.add_messages([Message("user", "idle")])
    with manager.transaction() as conn:
        conn.execute("UPDATE sessions SET updated_at = 1000.0")
    last = sessions[-1]  # listed most recently updated first: the last one goes last
    candidates = [i.id for i in manager.sessions_older_than(2000.0)]
    last.add_messages([Message("user", "still in use")])  # after the listing, before its step
    deleted = manager.delete_sessions(candidates, updated_before=2000.0)
    assert last.session_id not in deleted and len(deleted) == 29
    assert [i.id for i in manager.list_sessions()] == [last.session_id]


def test_another_deferred_index_rides_on_the_same_bounded_catch_up(
    manager: Manager, db: Path, monkeypatch: pytest.MonkeyPatch
):
    # What a later migration adds: a table, a mark column with DEFAULT 0, no back-fill.
    with manager.transaction() as conn:
        conn.execute("CREATE VIRTUAL TABLE messages_extra USING fts5(body, tokenize='trigram')")
        conn.execute("ALTER TABLE fts_state ADD COLUMN extra_upto INTEGER NOT NULL DEFAULT 0")
    monkeypatch.setattr(
        fts_index,
        "INDEXES",
        [
            *fts_index.INDEXES,
            fts_index.DeferredIndex("messages_extra", "extra_upto", "new.content"),
        ],
    )
    s = manager.new_session()
    insert_unindexed(db, s.session_id, 3_000)
    steps: list[tuple[int, int]] = []
    manager.search("parser", on_progress=lambda d, t: steps.append((d, t)))
    # Level indexes advance together over one range: each message is counted once.
    assert steps[0] == (0, 3_000) and steps[-1] == (3_000, 3_000)
    with manager.read() as conn:
        assert conn.execute("SELECT count(*) FROM messages_extra").fetchone() == (3_000,)
        assert conn.execute("SELECT indexed_upto, extra_upto FROM fts_state").fetchone() == (
            3_000,
            3_000,
        )
        assert not fts_index.is_behind(conn)


# Like WRITER, for a store an older harness9 left at an older schema: plain SQL that both
# schemas accept, and harness9's lock polling (a Manager would upgrade the file itself).
LEGACY_WRITER = """
import json, sqlite3, sys, time
from pathlib import Path
from harness9.store.locking import begin_immediate
db, sid, ready, stop = sys.argv[1:5]
waits, errors = [], []
conn = sqlite3.connect(db, isolation_level=None)
Path(ready).touch()
i = 0
while not Path(stop).exists():
    t0 = time.monotonic()
    try:
        begin_immediate(conn)
        conn.execute(
            "INSERT INTO messages (session_id, role, content, created_at) VALUES (?, 'user', ?, 1)",
            (sid, f"saved {i}"),
        )
        conn.execute("COMMIT")
        waits.append(time.monotonic() - t0)
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    i += 1
    time.sleep(0.02)
print(json.dumps({"waits": waits, "errors": errors}))
"""


def raw_top_id(db: Path) -> int:
    """The newest message's id, read with plain sqlite3 (no upgrade, no write)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (n,) = conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()
    finally:
        conn.close()
    return int(n)


def test_upgrading_a_large_store_from_before_the_search_index_lets_another_process_save(
    db: Path, tmp_path: Path
):
    # Schema version 3: before migration 4 created the index and back-filled it in the
    # upgrade's one transaction: 3.6 s with the write lock held at this size, measured).
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
        "applied_at REAL NOT NULL)"
    )
    for number, (name, sql) in enumerate(MIGRATIONS[:3], start=1):
        conn.executescript(sql)
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 0)", (number, name))
    conn.execute("PRAGMA user_version = 3")
    sid = "6f1c3a52-1b9e-4b52-9a86-0f3d5b3f9c11"
    conn.execute("INSERT INTO sessions (id, created_at, updated_at) VALUES (?, 1, 1)", (sid,))
    conn.execute(
        "WITH RECURSIVE k(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM k WHERE x < 400000) "
        "INSERT INTO messages (session_id, role, content, created_at) "
        "SELECT ?, 'user', 'word' || (x % 977) || ' parser compile ' || x || "
        "' alpha beta gamma delta ' || (x * 7919 % 10007), 1000.0 FROM k",
        (sid,),
    )
    conn.execute(
        "INSERT INTO messages (session_id, role, content, created_at) "
        "VALUES (?, 'user', 'the nightly build broke', 1)",
        (sid,),
    )
    conn.close()
    writer = BackgroundProcess(LEGACY_WRITER, str(db), sid, tmp=tmp_path)
    try:
        # The writer is saving when the upgrade starts (its first save is committed).
        wait_until(lambda: raw_top_id(db) > 400_001, "the writer's first save is committed")
        with Manager(db) as m:  # the upgrade, then the first search's bounded catch-up
            hits = m.search("nightly")
            searched = m.search('"saved 0"')
    finally:
        report = writer.finish(timeout=60)
    waits = report["waits"]
    assert report["errors"] == []
    assert len(waits) >= 3, "the writer saved too rarely to have raced the upgrade"
    assert max(waits) < GENEROUS_WAIT_S, f"longest wait {max(waits):.2f} s"
    assert [h.snippet.count("nightly") for h in hits] == [1]
    assert len(searched) == 1  # written by the other process during the upgrade
    with Manager(db) as m, m.read() as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        # Caught up, the index holds what migration 4's back-fill would have put there.
        (rows,) = conn.execute("SELECT count(*) FROM messages_fts").fetchone()
        (messages,) = conn.execute(
            "SELECT count(*) FROM messages WHERE id <= (SELECT indexed_upto FROM fts_state)"
        ).fetchone()
    assert rows == messages > 400_001
