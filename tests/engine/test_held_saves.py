"""No reply lost to a locked database: saves retry, then hold, then save with the next write.

The lock is held by a real second process (plain sqlite3, BEGIN EXCLUSIVE), as
a hand-run sqlite3 shell or a backup would hold it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness9.config import ContextOptions
from harness9.context.policy import ContextPolicy
from harness9.engine import events as ev
from harness9.engine.engine import AgentEngine, EngineOptions
from harness9.engine.prompt import PromptBuilder
from harness9.provider import LLMProvider
from harness9.schema import Message
from harness9.store import Checkpoint, Manager, StoreBusyError, StoreError
from harness9.store.holding import HoldingSession, held_notice
from harness9.tools import default_registry
from tests.support.llm_server import TextReply

# Holds the write lock from ready until the release file appears (or for a fixed time).
LOCKER = """
import sqlite3, sys, time
from pathlib import Path
db, ready, release, seconds = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4])
conn = sqlite3.connect(db, isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
ready.touch()
end = time.monotonic() + seconds
while not release.exists() and time.monotonic() < end:
    time.sleep(0.01)
conn.execute("ROLLBACK")
"""


class Locker:
    def __init__(self, db: Path, tmp: Path, seconds: float = 60.0) -> None:
        self.ready, self.release = tmp / "lock-ready", tmp / "lock-release"
        self.ready.unlink(missing_ok=True)
        self.release.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                LOCKER,
                str(db),
                str(self.ready),
                str(self.release),
                str(seconds),
            ]
        )
        deadline = time.monotonic() + 30
        while not self.ready.exists():
            assert self.proc.poll() is None and time.monotonic() < deadline, "no lock taken"
            time.sleep(0.01)

    def unlock(self) -> None:
        self.release.touch()
        assert self.proc.wait(timeout=30) == 0


@pytest.fixture
def manager(db: Path) -> Iterator[Manager]:
    with Manager(db, lock_wait_s=0.1) as m:  # each attempt gives up fast: the test stays short
        yield m


def contents(manager: Manager, sid: str) -> list[str]:
    return [m.content for m in manager.open_session(sid).get_messages()]


def test_a_lock_held_for_a_while_delays_a_save_but_does_not_fail_it(
    manager: Manager, db: Path, tmp_path: Path
):
    told: list[str] = []
    s = HoldingSession(manager.new_session(), on_held=told.append, retry_s=20.0)
    locker = Locker(db, tmp_path, seconds=1.0)
    s.add_messages([Message("assistant", "the reply")])
    locker.unlock()
    assert contents(manager, s.session_id) == ["the reply"]
    assert told == [] and s.held == []


def test_a_save_that_outlasts_its_retries_is_held_shown_once_and_saved_by_the_next_write(
    manager: Manager, db: Path, tmp_path: Path
):
    told: list[str] = []
    saved: list[str] = []
    inner = manager.new_session()
    inner.add_messages([Message("user", "question")])
    s = HoldingSession(inner, on_held=told.append, on_saved=saved.append, retry_s=0.3)
    locker = Locker(db, tmp_path)
    try:
        s.add_messages([Message("assistant", "answer one")])
        s.add_messages([Message("tool", "result", tool_call_id="c1")])
        assert told == [held_notice(1)]  # one line, not one per save
        assert [m.content for m in s.held] == ["answer one", "result"]
        # What the next request is built from still has the reply and the result.
        assert [m.content for m in s.get_messages()] == ["question", "answer one", "result"]
        assert [r.id for r in s.get_records()] == [1, 2, 3]
    finally:
        locker.unlock()
    assert contents(manager, s.session_id) == ["question"]  # nothing written while locked
    s.add_messages([Message("user", "next question")])
    assert contents(manager, s.session_id) == [
        "question",
        "answer one",
        "result",
        "next question",
    ]
    assert s.held == [] and saved == ["saved the 2 held messages to the session database"]


def test_a_checkpoint_naming_a_held_message_gets_its_real_id(
    manager: Manager, db: Path, tmp_path: Path
):
    s = HoldingSession(manager.new_session(), retry_s=0.2)
    other = manager.new_session()
    s.add_messages([Message("user", "q")])
    locker = Locker(db, tmp_path)
    try:
        s.add_messages([Message("assistant", "a")])
        provisional = s.get_records()[-1].id
        with pytest.raises(StoreBusyError):
            s.add_checkpoint(Checkpoint(provisional, "summary", "summarize", 10, 5, 2, 1))
    finally:
        locker.unlock()
    other.add_messages([Message("user", "another session takes the next id")])
    cp = s.add_checkpoint(Checkpoint(provisional, "summary", "summarize", 10, 5, 2, 1))
    stored = manager.open_session(s.session_id).get_records()
    assert [r.message.content for r in stored] == ["q", "a"]
    assert cp.last_message_id == stored[-1].id != provisional


def test_a_chat_reply_saved_into_a_locked_database_is_kept_shown_and_saved_next_turn(
    llm_server, manager: Manager, db: Path, tmp_path: Path
):
    session = manager.new_session()
    lockers: list[Locker] = []

    def lock_then_reply(body):
        if not lockers:  # the first turn's user message is saved; lock before the reply
            lockers.append(Locker(db, tmp_path))
        return TextReply("first reply")

    llm_server.respond_with(lock_then_reply)
    provider = LLMProvider("openai/test-model", api_base=llm_server.base_url, backoff_base=0.01)
    seen: list[ev.Event] = []
    opts = ContextOptions(strategy="summarize", smart_triggers=False, offload=False)
    engine = AgentEngine(
        provider,
        default_registry(),
        tmp_path,
        session=session,
        policy=ContextPolicy(opts, provider, 128_000),
        prompt_builder=PromptBuilder(tmp_path),
        on_event=seen.append,
        options=EngineOptions(assume_yes=True, save_retry_s=0.3),
    )
    try:
        result = engine.run_turn("hello")
        assert result.reply is not None and result.reply.content == "first reply"
        notices = [e.text for e in seen if isinstance(e, ev.Notice)]
        assert notices == [held_notice(1)]
        assert contents(manager, session.session_id) == ["hello"]
    finally:
        lockers[0].unlock()
    llm_server.respond_with(lambda body: TextReply("second reply"))
    engine.run_turn("again")
    assert contents(manager, session.session_id) == [
        "hello",
        "first reply",
        "again",
        "second reply",
    ]
    # The second request carried the held reply: the model never lost it either.
    sent = [m["content"] for m in llm_server.requests[-1]["messages"][1:]]
    assert sent == ["hello", "first reply", "again"]
    assert engine.flush_held() == 0


def test_a_full_disk_fails_its_write_once_and_is_not_held_for_later(
    manager: Manager, db: Path, tmp_path: Path
):
    # Holding is for a lock, which passes by itself. A full disk is reported by the
    # write that met it; held, the same write would fail again at every later save and
    # once more at exit, repeating an error the user has already seen.
    inner = manager.new_session()
    inner.add_messages([Message("user", "question")])
    s = HoldingSession(inner, retry_s=0.2)
    locker = Locker(db, tmp_path)
    try:
        s.add_messages([Message("assistant", "held by the lock")])
    finally:
        locker.unlock()
    (pages,) = manager.conn.execute("PRAGMA page_count").fetchone()
    manager.conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own SQLITE_FULL path

    with pytest.raises(StoreError, match="disk is full") as err:
        s.add_messages([Message("tool", "x" * 200_000, tool_call_id="c1")])

    assert not isinstance(err.value, StoreBusyError)
    assert [m.content for m in s.held] == ["held by the lock"]  # what the lock held stays
    manager.conn.execute("PRAGMA max_page_count = 1073741823")
    assert s.flush()  # nothing of the failed write comes back
    assert contents(manager, s.session_id) == ["question", "held by the lock"]
