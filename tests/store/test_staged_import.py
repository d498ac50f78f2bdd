"""Importing a large export in bounded steps: others keep saving, nobody sees half a session.

The other processes are real (subprocesses with their own Manager), as a running chat
is; an interrupted import is a real process killed with SIGKILL. Waits are asserted
against a generous bound (2 s, against steps of ~100 ms), never a tight timing.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness9.cli import app
from harness9.schema import Message, TodoItem
from harness9.store import Manager, SessionNotFoundError
from harness9.store.export import (
    ImportFormatError,
    SessionSnapshot,
    export_json,
    parse_export,
)
from harness9.store.retention import apply_retention
from harness9.store.session import SessionInfo, StoredMessage, UsageTotals
from harness9.store.staged_import import (
    ImportInProgressError,
    ImportTakenOverError,
    discard_unfinished,
)
from tests.support.cli import BackgroundProcess, wait_until

REPO = Path(__file__).resolve().parents[2]
GENEROUS_WAIT_S = 2.0
SID = "0b5c3f0e-6d2a-4c8e-9f1a-2b3c4d5e6f70"

# Saves one message every 20 ms until told to stop, and each time looks for the
# imported session the way users do: by searching a word of its first message, and by
# opening it. Reports every save's wait and everything it saw.
OBSERVER = """
import json, sys, time
from pathlib import Path
from harness9.schema import Message
from harness9.store import Manager, SessionNotFoundError
db, chat_id, imported, ready, stop = sys.argv[1:6]
waits, errors, hits, opened = [], [], [], []
with Manager(db) as m:
    s = m.open_session(chat_id)
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
        if not opened:
            hits.append(len(m.search("zebra")))
            try:
                opened.append(len(m.open_session(imported).get_records()))
            except SessionNotFoundError:
                pass
        time.sleep(0.02)
print(json.dumps({"waits": waits, "errors": errors, "hits": hits, "opened": opened}))
"""

# Imports the export in FILE into DB (what `harness9 sessions import` does).
IMPORTER = """
import sys
from pathlib import Path
from harness9.store import Manager
from harness9.store.export import parse_export
db, path = sys.argv[1:3]
with Manager(db) as m:
    m.restore(parse_export(Path(path).read_text()))
"""


def big_snapshot(n: int, *, sid: str = SID) -> SessionSnapshot:
    """An export of ``n`` messages; only the first says "zebra", every one says "quagga"."""
    records = [
        StoredMessage(
            k + 1,
            Message("user" if k % 2 == 0 else "assistant", f"quagga message {k} " + "x" * 40),
            1000.0 + k,
        )
        for k in range(n)
    ]
    records[0] = StoredMessage(1, Message("user", "zebra crossing quagga"), 1000.0)
    info = SessionInfo(sid, 1000.0, 1000.0 + n, n, "zebra crossing quagga")
    usage = UsageTotals(model_calls=12, input_tokens=9000, output_tokens=700, cost_usd=0.25)
    return SessionSnapshot(info, records, [TodoItem("tidy up")], [], usage=usage)


def raw_count(db: Path, sql: str, *args: object) -> int:
    conn = sqlite3.connect(db)
    try:
        (n,) = conn.execute(sql, args).fetchone()
    finally:
        conn.close()
    return int(n)


def assert_invisible(manager: Manager, sid: str) -> None:
    assert sid not in [i.id for i in manager.list_sessions()]
    with pytest.raises(SessionNotFoundError):
        manager.open_session(sid)
    with pytest.raises(SessionNotFoundError):
        manager.resolve_id(sid[:8])
    assert manager.search("quagga") == []


def test_importing_50000_messages_lets_another_process_save_and_shows_nothing_half_done(
    manager: Manager, db: Path, tmp_path: Path
):
    chat = manager.new_session()
    observer = BackgroundProcess(
        OBSERVER, str(db), chat.session_id, SID, tmp=tmp_path, name="observer"
    )
    snap = big_snapshot(50_000)
    try:
        sid = manager.restore(snap, new_id=True)  # fresh ids: the observer's fall in between
        # Let the observer look once more: a save after this point is followed by a look
        # at the finished session, and the save after that shows the look is done.
        saved = manager.session_info(chat.session_id).message_count
        wait_until(
            lambda: manager.session_info(chat.session_id).message_count >= saved + 2,
            "the observer saves twice after the import",
        )
    finally:
        report = observer.finish()
    waits = report["waits"]
    assert report["errors"] == []
    assert len(waits) >= 3, "the observer saved too rarely to have raced the import"
    assert max(waits) < GENEROUS_WAIT_S, f"longest wait {max(waits):.2f} s"
    # Whatever the observer looked at, it saw no session or all of it.
    assert set(report["opened"]) <= {50_000} and set(report["hits"]) <= {0, 1}
    with manager.read() as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM messages WHERE session_id = ?", (sid,))]
        between = conn.execute(
            "SELECT count(*) FROM messages WHERE session_id = ? AND id > ? AND id < ?",
            (chat.session_id, ids[0], ids[-1]),
        ).fetchone()[0]
    assert between > 0, "the import never let the other writer in"
    assert len(ids) == 50_000 and manager.session_info(sid).message_count == 50_000
    saved = [m.content for m in manager.open_session(chat.session_id).get_messages()]
    assert saved == [f"saved {i}" for i in range(len(waits))]


def test_an_import_killed_half_way_leaves_nothing_visible_and_the_retry_succeeds(
    manager: Manager, db: Path, tmp_path: Path
):
    export = tmp_path / "big.json"
    export.write_text(export_json(big_snapshot(200_000)))
    proc = subprocess.Popen(
        [sys.executable, "-c", IMPORTER, str(db), str(export)],
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 120
        while raw_count(db, "SELECT count(*) FROM messages WHERE session_id = ?", SID) < 1000:
            assert proc.poll() is None, "the import finished before it could be killed"
            assert time.monotonic() < deadline, "the import never got going"
            time.sleep(0.005)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    left = raw_count(db, "SELECT count(*) FROM messages WHERE session_id = ?", SID)
    assert 1000 <= left < 200_000
    assert_invisible(manager, SID)

    # The retry removes what the dead import left, then imports the whole session.
    small = big_snapshot(3)
    assert manager.restore(small) == SID
    assert [r.message.content for r in manager.open_session(SID).get_records()] == [
        r.message.content for r in small.records
    ]
    assert raw_count(db, "SELECT count(*) FROM messages WHERE session_id = ?", SID) == 3
    assert raw_count(db, "SELECT count(*) FROM session_imports") == 0
    assert len(manager.search("quagga")) == 3


def test_a_bad_message_late_in_the_file_leaves_nothing_behind(manager: Manager, db: Path):
    snap = big_snapshot(20_000)
    snap.records[-1] = StoredMessage(20_000, Message("user", "half a pair \ud800"), 5.0)
    with pytest.raises(ImportFormatError, match="not valid Unicode"):
        manager.restore(snap)
    assert_invisible(manager, SID)
    assert raw_count(db, "SELECT count(*) FROM messages") == 0
    assert raw_count(db, "SELECT count(*) FROM session_imports") == 0
    snap.records[-1] = StoredMessage(20_000, Message("user", "mended"), 5.0)
    assert manager.restore(snap) == SID
    assert manager.session_info(SID).message_count == 20_000


def _claim_by_hand(db: Path, *, pid: int, touched: float) -> None:
    """What a dead importer leaves: its claim row and some messages, no session row."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute(
            "INSERT INTO session_imports VALUES (?, 'tok', 0, 0, ?, ?, ?, ?)",
            (SID, pid, socket.gethostname(), touched, touched),
        )
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, created_at) "
            "VALUES (?, 'user', 'quagga orphan', 1.0)",
            [(SID,)] * 10,
        )
    finally:
        conn.close()


def test_a_live_import_of_the_same_session_is_refused_in_one_line(harness9_home: Path):
    db = harness9_home / "sessions.db"
    with Manager(db) as manager:
        _claim_by_hand(db, pid=os.getpid(), touched=time.time())  # this process: alive
        with pytest.raises(ImportInProgressError, match=r"being imported by another harness9"):
            manager.restore(big_snapshot(3))
    result = CliRunner().invoke(
        app, ["sessions", "import", "-"], input=export_json(big_snapshot(3))
    )
    assert result.exit_code == 1
    assert "being imported by another harness9" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_retention_removes_an_import_idle_for_too_long(manager: Manager, db: Path):
    _claim_by_hand(db, pid=os.getpid(), touched=time.time() - 3600)
    assert_invisible(manager, SID)
    assert apply_retention(manager, 0) == []  # retention off: sessions stay, leftovers go
    assert raw_count(db, "SELECT count(*) FROM messages") == 0
    assert raw_count(db, "SELECT count(*) FROM session_imports") == 0


def test_a_recent_import_of_a_running_process_is_left_alone(manager: Manager, db: Path):
    _claim_by_hand(db, pid=os.getpid(), touched=time.time())
    assert discard_unfinished(manager) == []
    assert raw_count(db, "SELECT count(*) FROM messages") == 10


def test_usage_totals_survive_export_and_import(manager: Manager):
    s = manager.new_session()
    s.add_messages([Message("user", "hello")])
    manager.add_usage(s.session_id, input_tokens=1200, output_tokens=80, cost_usd=0.5)
    manager.add_usage(
        s.session_id, input_tokens=300, output_tokens=20, cached_tokens=100, summary=True
    )
    text = export_json(manager.snapshot(s.session_id))
    manager.delete_session(s.session_id)
    manager.restore(parse_export(text))
    assert manager.usage_totals(s.session_id) == UsageTotals(
        2, 1500, 100, 100, 0.5, 1, 1, 300, 20, 0.0, 1
    )
    assert export_json(manager.snapshot(s.session_id)) == text


def test_an_export_without_usage_still_imports_with_none(manager: Manager):
    doc = json.loads(export_json(big_snapshot(2)))
    del doc["usage"]
    manager.restore(parse_export(json.dumps(doc)))
    assert manager.usage_totals(SID) == UsageTotals()


def test_a_bad_usage_value_is_refused_before_anything_is_written(manager: Manager):
    doc = json.loads(export_json(big_snapshot(2)))
    doc["usage"]["output_tokens"] = -3
    with pytest.raises(ImportFormatError, match=r"usage.output_tokens is -3"):
        parse_export(json.dumps(doc))


def test_an_import_taken_over_by_a_cleaner_stops_and_leaves_nothing(manager: Manager, db: Path):
    # A cleaner that finds the claim idle for too long (here: a clock an hour ahead) takes
    # it over; the importer stops at its next step instead of publishing half a session.
    errors: list[BaseException] = []

    def run_import() -> None:
        with Manager(db) as importer:
            try:
                importer.restore(big_snapshot(200_000))
            except BaseException as exc:  # reported by the assertions below
                errors.append(exc)

    t = threading.Thread(target=run_import)
    t.start()
    deadline = time.monotonic() + 120
    while raw_count(db, "SELECT count(*) FROM messages WHERE session_id = ?", SID) < 1000:
        assert t.is_alive() and time.monotonic() < deadline, errors
        time.sleep(0.005)
    assert discard_unfinished(manager, now=time.time() + 3600) == [SID]
    t.join(120)
    assert len(errors) == 1 and isinstance(errors[0], ImportTakenOverError), errors
    assert "was cancelled" in str(errors[0])
    assert_invisible(manager, SID)
    assert raw_count(db, "SELECT count(*) FROM messages") == 0
    assert raw_count(db, "SELECT count(*) FROM session_imports") == 0
