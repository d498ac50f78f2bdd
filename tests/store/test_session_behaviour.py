"""The Session specification (seed §4-§5), run against both implementations."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness9.schema import Message, TodoItem, ToolCall
from harness9.store import Checkpoint, CheckpointedSession, Manager, MemorySession, Session
from harness9.store.session import ChatSession
from tests.support.history import user


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def session(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CheckpointedSession]:
    if request.param == "memory":
        yield MemorySession()
        return
    if request.param == "postgres":
        from harness9.store.postgres import PostgresManager

        with PostgresManager(request.getfixturevalue("pg_url")) as pg:
            yield pg.new_session()
        return
    with Manager(tmp_path / "sessions.db") as manager:
        yield manager.new_session()


def cp(last_message_id: int, summary: str = "sum") -> Checkpoint:
    return Checkpoint(last_message_id, summary, "summarization", 1000, 200, 10, 3)


def test_both_implementations_satisfy_the_protocols(session):
    assert isinstance(session, Session)
    assert isinstance(session, CheckpointedSession)


def test_every_implementation_is_what_a_chat_runs_on(session):
    # Pins and remembered settings too: the engine holds any of them.
    assert isinstance(session, ChatSession)


def test_session_id_is_a_uuid_string(session):
    assert len(session.session_id) == 36
    assert session.session_id.count("-") == 4


def test_new_session_has_no_messages(session):
    assert session.get_messages() == []


def test_get_messages_zero_returns_all_oldest_first(session):
    session.add_messages([user("a"), Message("assistant", "b")])
    session.add_messages([user("c")])
    assert [m.content for m in session.get_messages(0)] == ["a", "b", "c"]


def test_get_messages_limit_returns_newest_n_oldest_first(session):
    session.add_messages([user(str(i)) for i in range(5)])
    assert [m.content for m in session.get_messages(2)] == ["3", "4"]


def test_get_messages_limit_above_count_returns_all(session):
    session.add_messages([user("a"), user("b")])
    assert [m.content for m in session.get_messages(10)] == ["a", "b"]


def test_add_messages_returns_increasing_ids(session):
    first = session.add_messages([user("a"), user("b")])
    second = session.add_messages([user("c")])
    assert len(first) == 2 and len(second) == 1
    assert first[0] < first[1] < second[0]


def test_add_messages_of_nothing_adds_nothing(session):
    assert session.add_messages([]) == []
    assert session.get_messages() == []


def test_tool_calls_and_tool_results_round_trip(session):
    call = Message(
        "assistant",
        "let me look",
        [ToolCall("call_1", "read_file", '{"path": "a.py"}'), ToolCall("call_2", "bash", "{}")],
    )
    result = Message("tool", "print(1)", tool_call_id="call_1")
    session.add_messages([user("q"), call, result])
    assert session.get_messages() == [user("q"), call, result]


def test_pop_returns_and_removes_the_newest_message(session):
    session.add_messages([user("a"), Message("assistant", "b")])
    assert session.pop_message() == Message("assistant", "b")
    assert session.get_messages() == [user("a")]


def test_pop_on_empty_session_returns_none(session):
    assert session.pop_message() is None


def test_ids_are_not_reused_after_pop(session):
    (first,) = session.add_messages([user("a")])
    session.pop_message()
    (second,) = session.add_messages([user("b")])
    assert second > first


def test_clear_removes_every_message(session):
    session.add_messages([user("a"), user("b")])
    session.clear()
    assert session.get_messages() == []
    assert session.pop_message() is None


def test_clear_keeps_the_todo_list(session):
    session.save_todos([TodoItem("write tests")])
    session.add_messages([user("a")])
    session.clear()
    assert session.get_todos() == [TodoItem("write tests")]


def test_get_todos_is_none_when_never_saved(session):
    assert session.get_todos() is None


def test_save_todos_replaces_the_whole_list(session):
    session.save_todos([TodoItem("a"), TodoItem("b", "in_progress")])
    session.save_todos([TodoItem("c", "completed")])
    assert session.get_todos() == [TodoItem("c", "completed")]


def test_save_todos_keeps_order_and_status(session):
    items = [TodoItem("one", "completed"), TodoItem("two", "in_progress"), TodoItem("three")]
    session.save_todos(items)
    assert session.get_todos() == items


def test_saving_an_empty_todo_list_reads_back_as_none(session):
    session.save_todos([TodoItem("a")])
    session.save_todos([])
    assert session.get_todos() is None


def test_mutating_a_returned_message_does_not_change_the_store(session):
    session.add_messages([Message("assistant", "x", [ToolCall("c1", "bash", "{}")])])
    got = session.get_messages()[0]
    got.content = "changed"
    got.tool_calls.append(ToolCall("c2", "bash", "{}"))
    assert session.get_messages() == [Message("assistant", "x", [ToolCall("c1", "bash", "{}")])]


def test_mutating_an_added_message_afterwards_does_not_change_the_store(session):
    msg = user("original")
    session.add_messages([msg])
    msg.content = "changed"
    assert session.get_messages() == [user("original")]


def test_get_records_carries_ids_and_times(session):
    ids = session.add_messages([user("a"), user("b")])
    records = session.get_records()
    assert [r.id for r in records] == ids
    assert [r.message.content for r in records] == ["a", "b"]
    assert all(r.created_at > 0 for r in records)


def test_get_records_after_id_returns_only_later_messages(session):
    ids = session.add_messages([user("a"), user("b"), user("c")])
    assert [r.message.content for r in session.get_records(after_id=ids[0])] == ["b", "c"]


def test_get_records_limit_and_after_id_combine(session):
    ids = session.add_messages([user(str(i)) for i in range(5)])
    assert [r.message.content for r in session.get_records(2, after_id=ids[0])] == ["3", "4"]


def test_add_checkpoint_returns_it_with_id_and_time(session):
    ids = session.add_messages([user("a"), user("b")])
    stored = session.add_checkpoint(cp(ids[0]))
    assert stored.id > 0
    assert stored.created_at > 0
    assert (stored.last_message_id, stored.summary, stored.tokens_before) == (ids[0], "sum", 1000)


def test_latest_checkpoint_is_none_without_checkpoints(session):
    assert session.latest_checkpoint() is None


def test_latest_checkpoint_is_the_last_added(session):
    ids = session.add_messages([user("a"), user("b"), user("c")])
    session.add_checkpoint(cp(ids[0], "first"))
    second = session.add_checkpoint(cp(ids[1], "second"))
    assert session.latest_checkpoint() == second


def test_list_checkpoints_is_oldest_first(session):
    ids = session.add_messages([user("a"), user("b")])
    session.add_checkpoint(cp(ids[0], "first"))
    session.add_checkpoint(cp(ids[1], "second"))
    assert [c.summary for c in session.list_checkpoints()] == ["first", "second"]


def test_checkpoint_must_name_a_message_of_the_session(session):
    session.add_messages([user("a")])
    with pytest.raises(ValueError, match="not a message of this session"):
        session.add_checkpoint(cp(999))
    assert session.list_checkpoints() == []


def test_pop_drops_checkpoints_that_cover_the_popped_message(session):
    ids = session.add_messages([user("a"), user("b"), user("c")])
    keep = session.add_checkpoint(cp(ids[1], "covers a, b"))
    session.add_checkpoint(cp(ids[2], "covers a, b, c"))
    session.pop_message()
    assert session.list_checkpoints() == [keep]


def test_clear_drops_every_checkpoint(session):
    ids = session.add_messages([user("a")])
    session.add_checkpoint(cp(ids[0]))
    session.clear()
    assert session.latest_checkpoint() is None
