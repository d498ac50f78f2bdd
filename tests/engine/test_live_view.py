"""The view kept between model calls equals the view rebuilt from the store, after any event.

``LiveViews.load`` reads only the rows after the newest one it holds; these tests
check it against ``load_view`` (a from-scratch read) after appends, compactions,
``/undo``, and another process appending to the same session, on SQLite and in memory.
The engine's policy keeps its views so; a policy given none reads each view whole, and
sends the same requests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness9.config import ContextOptions, Settings
from harness9.context.policy import ContextPolicy
from harness9.context.stubs import is_summary, offload_source
from harness9.context.view import FreshViews, load_view
from harness9.engine.setup import build_engine
from harness9.engine.views import LiveViews
from harness9.request import Request, system_message
from harness9.schema import Message, ToolCall, ToolDefinition
from harness9.store import Manager, MemorySession
from harness9.store.holding import HoldingSession
from harness9.store.session import (
    STUB_STUBBED,
    Checkpoint,
    CheckpointedSession,
    Stub,
)
from harness9.tokens import estimate_tokens
from tests.support.cli import REPO_ROOT, cli_env
from tests.support.history import ScriptedSummarizer
from tests.support.stores import LockedMemorySession

SYSTEM = Message("system", "You are a test agent.")


def exchange(i: int) -> list[Message]:
    call = ToolCall(f"c{i}", "read_file", f'{{"path": "f{i}.txt"}}')
    return [
        Message("assistant", "", [call]),
        Message("tool", f"contents of f{i}.txt: value {i * 37}", tool_call_id=f"c{i}"),
    ]


def assert_fresh(views: LiveViews, session: CheckpointedSession) -> None:
    measured = views.load(session, SYSTEM)
    expected = load_view(session, SYSTEM)
    assert measured.view.messages == expected.messages
    assert measured.view.ids == expected.ids
    # Equal texts are not enough: a stub or an offloaded result carries its data.
    assert [offload_source(m) for m in measured.view.messages] == [
        offload_source(m) for m in expected.messages
    ]
    assert measured.tokens == estimate_tokens(expected.messages)


def checkpoint_at(
    session: CheckpointedSession,
    *,
    stub_newest: bool = False,
    instructions: list[str] | None = None,
) -> Checkpoint:
    """A checkpoint folding the older half of the log (and stubbing its newest result),
    keeping ``instructions`` verbatim."""
    ids = [r.id for r in session.get_records()]
    last = ids[len(ids) // 2 - 1]
    stubs = {ids[-1]: Stub(STUB_STUBBED, 9)} if stub_newest else {}
    cp = Checkpoint(last, f"summary up to {last}", "test", 100, 50, len(ids), 3, stubs=stubs)
    cp.instructions = list(instructions or [])
    return session.add_checkpoint(cp)


def test_appends_are_read_as_new_rows_only(tmp_path: Path) -> None:
    views = LiveViews()
    with Manager(tmp_path / "s.db") as m:
        s = m.new_session()
        s.add_messages([Message("user", "read the files"), *exchange(0)])
        assert_fresh(views, s)
        assert views.rows_read == 3
        for i in range(1, 6):
            s.add_messages(exchange(i))
            assert_fresh(views, s)
        # The first load read the log; every later one only the two rows just appended.
        assert views.rebuilds == 1
        assert views.rows_read == 3 + 5 * 2


def test_a_compaction_replaces_the_view(tmp_path: Path) -> None:
    views = LiveViews()
    with Manager(tmp_path / "s.db") as m:
        s = m.new_session()
        s.add_messages([Message("user", "go"), *exchange(0), *exchange(1), *exchange(2)])
        assert_fresh(views, s)
        checkpoint_at(s, stub_newest=True)
        assert_fresh(views, s)
        assert views.rebuilds == 2
        view = views.load(s, SYSTEM).view
        assert view.messages[1].content.startswith("[Conversation Summary]\nsummary up to")
        newest = view.ids[-1]
        assert view.messages[-1].content == (
            f'[stubbed] 9 tokens stubbed; offload_recall(id="msg_{newest}") for it'
        )
        s.add_messages(exchange(3))
        assert_fresh(views, s)


def test_undo_of_the_newest_rows_rebuilds_the_view(tmp_path: Path) -> None:
    views = LiveViews()
    with Manager(tmp_path / "s.db") as m:
        s = m.new_session()
        s.add_messages([Message("user", "go"), *exchange(0), *exchange(1)])
        assert_fresh(views, s)
        s.pop_message()
        s.pop_message()
        assert_fresh(views, s)
        assert len(views.load(s, SYSTEM).view.messages) == 4
        s.add_messages(exchange(5))  # new ids, never the popped ones
        assert_fresh(views, s)


def test_undo_past_a_checkpoint_drops_it_and_the_view_follows(tmp_path: Path) -> None:
    views = LiveViews()
    with Manager(tmp_path / "s.db") as m:
        s = m.new_session()
        s.add_messages([Message("user", "go"), *exchange(0)])
        checkpoint_at(s)
        assert_fresh(views, s)
        while s.get_records():
            s.pop_message()
            assert_fresh(views, s)
        assert views.load(s, SYSTEM).view.messages == [SYSTEM]


def test_rows_another_process_appends_to_the_same_session_are_seen(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    views = LiveViews()
    with Manager(db) as m:
        s = m.new_session()
        s.add_messages([Message("user", "go"), *exchange(0)])
        assert_fresh(views, s)
        code = (
            "import sys\n"
            "from harness9.store import Manager\n"
            "from harness9.schema import Message\n"
            "with Manager(sys.argv[1]) as m:\n"
            "    m.open_session(sys.argv[2]).add_messages([Message('user', 'from elsewhere')])\n"
        )
        subprocess.run(
            [sys.executable, "-c", code, str(db), s.session_id],
            check=True,
            env=cli_env(),
            cwd=REPO_ROOT,
            timeout=60,
        )
        s.add_messages(exchange(1))
        assert_fresh(views, s)
        contents = [msg.content for msg in views.load(s, SYSTEM).view.messages]
        assert contents.index("from elsewhere") == 4  # in id order, before this process's rows


def test_messages_held_by_a_locked_database_are_never_kept(tmp_path: Path) -> None:
    views = LiveViews()
    inner = LockedMemorySession("held")
    held = HoldingSession(inner, retry_s=0)
    held.add_messages([Message("user", "go")])
    assert_fresh(views, held)
    inner.locked = True
    held.add_messages([Message("user", "held back")])
    assert held.held and views.load(held, SYSTEM).view.messages[-1].content == "held back"
    inner.locked = False
    held.flush()
    held.add_messages([Message("user", "saved at last")])
    assert_fresh(views, held)
    assert [m.content for m in views.load(held, SYSTEM).view.messages[1:]] == [
        "go",
        "held back",
        "saved at last",
    ]


class CountingMemorySession(MemorySession):
    """Counts the reads of a whole checkpoint (summary, recall index, instructions)."""

    reads = 0

    def latest_checkpoint(self) -> Checkpoint | None:
        self.reads += 1
        return super().latest_checkpoint()


def test_the_checkpoint_is_read_whole_only_when_another_one_replaces_it() -> None:
    views = LiveViews()
    s = CountingMemorySession("count")
    s.add_messages([Message("user", "go"), *exchange(0), *exchange(1)])
    checkpoint_at(s, instructions=["always answer in French"])
    system = views.load(s, SYSTEM).view.messages[0]
    assert s.reads == 1 and "always answer in French" in system.content
    for i in range(2, 8):
        s.add_messages(exchange(i))
        measured = views.load(s, SYSTEM)
        # Its key alone told the view nothing changed; the kept words are still sent.
        assert measured.view.messages[0] == system
        assert system_message(measured.parts) == system
    assert s.reads == 1
    checkpoint_at(s, instructions=["and keep it short"])
    assert "and keep it short" in views.load(s, SYSTEM).view.messages[0].content
    assert s.reads == 2


@pytest.mark.parametrize("store", ["sqlite", "memory", "postgresql"])
def test_every_store_names_its_latest_checkpoint_without_reading_it(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if store == "memory":
        s: Any = MemorySession("mem")
        manager = None
    elif store == "sqlite":
        manager = Manager(tmp_path / "s.db")
        s = manager.new_session()
    else:
        from harness9.store.postgres import PostgresManager

        manager = PostgresManager(request.getfixturevalue("pg_url"))
        s = manager.new_session()
    try:
        assert s.latest_checkpoint_key() is None
        s.add_messages([Message("user", "go"), *exchange(0), *exchange(1)])
        first = checkpoint_at(s, instructions=["keep this"])
        s.add_messages(exchange(2))
        second = checkpoint_at(s)
        latest = s.latest_checkpoint()
        assert latest.id == second.id != first.id
        assert s.latest_checkpoint_key() == (latest.id, latest.last_message_id, latest.created_at)
        while s.get_records()[-1].id >= second.last_message_id:
            s.pop_message()  # /undo of the rows the newest checkpoint covers drops it
        previous = s.latest_checkpoint()
        assert previous is not None and previous.id == first.id
        assert s.latest_checkpoint_key() == (first.id, first.last_message_id, previous.created_at)
    finally:
        if manager is not None:
            manager.close()


EVENTS = st.lists(
    st.sampled_from(
        ["append", "append", "append", "checkpoint", "undo", "elsewhere", "checkpoint elsewhere"]
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(events=EVENTS)
def test_any_sequence_of_events_leaves_the_kept_view_equal_to_a_fresh_one(
    tmp_path_factory, events: list[str]
) -> None:
    db = tmp_path_factory.mktemp("live") / "s.db"
    views = LiveViews()
    with Manager(db) as m, Manager(db) as other:
        s = m.new_session()
        elsewhere = other.open_session(s.session_id)
        s.add_messages([Message("user", "start")])
        for n, event in enumerate(events):
            if event == "append":
                s.add_messages(exchange(n))
            elif event == "elsewhere":
                elsewhere.add_messages([Message("user", f"note {n}")])
            elif event == "undo":
                s.pop_message()
            elif len(s.get_records()) < 2:
                pass
            elif event == "checkpoint elsewhere":
                checkpoint_at(elsewhere, instructions=[f"instruction {n}"])
            else:
                checkpoint_at(s, stub_newest=n % 2 == 0)
            assert_fresh(views, s)


def test_after_undo_in_chat_the_next_request_no_longer_carries_the_undone_exchange(llm_server):
    from typer.testing import CliRunner

    from harness9.cli import app

    llm_server.reply_text("first answer")
    llm_server.reply_text("second answer")
    argv = ["chat", "--model", "openai/test-model", "--api-base", llm_server.base_url, "--yes"]

    result = CliRunner().invoke(app, argv, input="first question\n/undo\nsecond question\n")

    assert result.exit_code == 0, result.output
    sent = [[m["content"] for m in body["messages"][1:]] for body in llm_server.requests]
    assert sent == [["first question"], ["second question"]]


def test_the_engines_policy_reads_only_the_rows_added_since_its_last_call(
    llm_server, manager, tmp_path: Path
) -> None:
    (tmp_path / "f.txt").write_text("forty-two")
    llm_server.reply_tool_calls([("c1", "read_file", '{"path": "f.txt"}')])
    llm_server.reply_text("it says forty-two")
    llm_server.reply_text("you are welcome")
    settings = Settings("openai/test-model", llm_server.base_url)
    session = manager.new_session()
    engine = build_engine(settings, ContextOptions(), session, tmp_path, 128_000, stream=False)
    views = engine.policy.views
    assert isinstance(views, LiveViews)

    engine.run_turn("read f.txt")  # two calls: [user], then + [call, result]
    assert (views.rebuilds, views.rows_read) == (1, 1 + 2)
    engine.run_turn("thanks")  # one call: + [answer, user]

    assert len(session.get_records()) == 6
    assert (views.rebuilds, views.rows_read) == (1, 1 + 2 + 2)


def test_a_policy_given_no_views_reads_each_view_whole_from_the_store() -> None:
    policy = ContextPolicy(ContextOptions(), ScriptedSummarizer(), 128_000)
    assert isinstance(policy.views, FreshViews)


TOOLS = [ToolDefinition("read_file", "Reads a file.", {"type": "object", "properties": {}})]


def requests_of_a_growing_session(db: Path, views: LiveViews | None) -> list[Request]:
    """The requests a policy in a 4K window prepares while a session grows past its
    threshold (compacted), is pinned to, and has its newest exchange undone."""
    summarizer = ScriptedSummarizer("**Goal:** read the files.")
    policy = ContextPolicy(ContextOptions(), summarizer, 4_000, views=views)
    requests: list[Request] = []
    with Manager(db) as m:
        s = m.new_session()
        s.add_messages([Message("user", "read the files")])
        for i in range(24):
            requests.append(policy.prepare(s, SYSTEM, TOOLS, ["read_file"]))
            s.add_messages(exchange(i))
            s.add_messages([Message("user", f"and now file {i + 1} " + "x" * 800)])
            if i == 5:
                s.add_pin("answer in French")
            if i == 9:
                s.pop_message()
                s.pop_message()
    return requests


def test_a_policy_without_views_sends_what_the_cached_views_send(tmp_path: Path) -> None:
    cached = requests_of_a_growing_session(tmp_path / "cached.db", LiveViews())
    fresh = requests_of_a_growing_session(tmp_path / "fresh.db", None)

    assert any(is_summary(m) for m in cached[-1].messages)  # compacted on the way
    assert "answer in French" in cached[-1].messages[0].content
    assert [(r.system, r.messages, r.tools, r.estimated, r.shown_tokens) for r in fresh] == [
        (r.system, r.messages, r.tools, r.estimated, r.shown_tokens) for r in cached
    ]
