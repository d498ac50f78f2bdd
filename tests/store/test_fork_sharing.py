"""A fork shares its origin's messages instead of copying them (harness9.store.lineage).

Every reader sees the inherited part: reads, `sessions show`, export, search and
history_search, counts, /undo; the ids stay the origin's; deleting the origin (or any
base) hands the shared rows over, so every fork stays intact; forks of forks work; a
fork's todo list is the one it had at the fork point. On both stores.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness9.config import db_path
from harness9.schema import Message, TodoItem
from harness9.store.backend import SessionStore, open_url
from harness9.store.session import Checkpoint
from tests.support.cli import chat, cli
from tests.support.llm_server import ScriptedLLMServer, TextReply, ToolCallsReply


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The store under test: the default SQLite file, or the test PostgreSQL."""
    if request.param == "postgres":
        from harness9.config import use_database_url

        yield request.getfixturevalue("pg_url")
        use_database_url(None)  # --database-url is per process; CliRunner shares it
    else:
        yield str(db_path())


def h9(url: str, *args: str, input: str | None = None):  # noqa: ANN201 (a click Result)
    """``harness9 [--database-url URL] ARGS`` for the store under test."""
    flags = ["--database-url", url] if "://" in url else []
    return cli(*flags, *args, input=input)


def contents(store: SessionStore, sid: str) -> list[str]:
    return [m.content for m in store.open_session(sid).get_messages()]


def session_of(store: SessionStore, texts: list[str]) -> tuple[str, list[int]]:
    s = store.new_session()
    return s.session_id, s.add_messages([Message("user", t) for t in texts])


def test_a_forks_search_finds_its_inherited_messages_under_its_own_id(url: str):
    with open_url(url) as store:
        sid, ids = session_of(store, ["alpha needle", "plain", "gamma needle", "later needle"])
        fork = store.fork_session(sid, 3)
        [own] = store.open_session(fork).add_messages([Message("user", "own needle")])

        hits = store.number_hits(store.open_session(fork).search("needle"))
        in_origin = store.search("needle", session_id=sid)
        everywhere = store.search("needle")

    assert sorted((h.session_id, h.message_id, h.number) for h in hits) == [
        (fork, ids[0], 1),
        (fork, ids[2], 3),
        (fork, own, 4),
    ]
    assert sorted(h.message_id for h in in_origin) == [ids[0], ids[2], ids[3]]
    # Across sessions a shared message is found once, in the session that holds it.
    assert sorted((h.session_id, h.message_id) for h in everywhere) == sorted(
        [(sid, ids[0]), (sid, ids[2]), (sid, ids[3]), (fork, own)]
    )


def test_history_search_in_a_fork_reaches_the_inherited_part(llm_server: ScriptedLLMServer):
    with open_url(str(db_path())) as store:
        sid, _ = session_of(store, ["the password is swordfish", "noted"])
        fork = store.fork_session(sid)
    seen: list[str] = []

    def reply(body: dict) -> object:
        if body["messages"][-1]["role"] == "tool":
            seen.append(body["messages"][-1]["content"])
            return TextReply("found")
        return ToolCallsReply(calls=(("h1", "history_search", '{"query": "swordfish"}'),))

    llm_server.respond_with(reply)
    assert chat(llm_server, "what was it?\n", "--resume", fork).exit_code == 0
    assert seen and "swordfish" in seen[0]


def test_sessions_show_and_export_of_a_fork_hold_the_inherited_messages_and_import_back(
    url: str,
):
    with open_url(url) as store:
        sid, ids = session_of(store, [f"m{i}" for i in range(4)])
        s = store.open_session(sid)
        s.add_checkpoint(Checkpoint(ids[1], "sum", "summarization", 9, 3, 2, 1))
        s.add_messages([Message("user", "m4"), Message("user", "m5")])
        fork = store.fork_session(sid, 4)
        store.open_session(fork).add_messages([Message("user", "mine")])

    shown = json.loads(h9(url, "sessions", "show", fork, "--json").stdout)
    exported = h9(url, "sessions", "export", fork, "--format", "json").stdout
    assert h9(url, "sessions", "delete", fork, "--yes").exit_code == 0
    imported = h9(url, "sessions", "import", "-", input=exported)

    assert shown["message_count"] == 5
    assert [m["content"] for m in json.loads(exported)["messages"]] == [
        "m0",
        "m1",
        "m2",
        "m3",
        "mine",
    ]
    assert imported.exit_code == 0, imported.stderr
    with open_url(url) as store:
        assert contents(store, fork) == ["m0", "m1", "m2", "m3", "mine"]
        f = store.open_session(fork)
        [cp] = f.list_checkpoints()
        assert f.get_record(cp.last_message_id).message.content == "m1"
        assert contents(store, sid) == [f"m{i}" for i in range(6)]


def test_deleting_an_origin_leaves_every_fork_and_fork_of_a_fork_intact(url: str):
    with open_url(url) as store:
        sid, ids = session_of(store, [f"o{i}" for i in range(4)])
        store.open_session(sid).add_checkpoint(Checkpoint(ids[2], "s", "evict", 9, 3, 3, 1))
        ids += store.open_session(sid).add_messages([Message("user", f"o{i}") for i in range(4, 8)])
        short = store.fork_session(sid, 4)
        long = store.fork_session(sid, 6)
        store.open_session(long).add_messages([Message("user", "long's own")])
        deep = store.fork_session(short, 3)
        store.open_session(deep).add_messages([Message("user", "deep's own")])
        before = {f: store.open_session(f).get_records() for f in (short, long, deep)}
        # Indexed before the delete: the index follows the rows to their new holder.
        assert [h.message_id for h in store.search("o5", session_id=long)] == [ids[5]]

        assert h9(url, "sessions", "delete", sid, "--yes").exit_code == 0

        for f, records in before.items():
            after = store.open_session(f).get_records()
            assert [(r.id, r.message) for r in after] == [(r.id, r.message) for r in records]
            assert store.session_info(f).message_count == len(records)
        assert contents(store, long) == [*(f"o{i}" for i in range(6)), "long's own"]
        assert contents(store, deep) == ["o0", "o1", "o2", "deep's own"]
        # The checkpoints still anchor on the same message, now held by a fork.
        [cp] = store.open_session(long).list_checkpoints()
        assert cp.last_message_id == ids[2]
        assert [h.message_id for h in store.search("o5", session_id=long)] == [ids[5]]
        # And again: the fork that took the rows over can go too.
        store.delete_session(long)
        assert contents(store, short) == ["o0", "o1", "o2", "o3"]
        assert contents(store, deep) == ["o0", "o1", "o2", "deep's own"]
        assert store.open_session(short).pop_message() == Message("user", "o3")
        assert contents(store, deep) == ["o0", "o1", "o2", "deep's own"]


def test_deleting_an_origin_and_its_forks_together_deletes_them_all(url: str):
    with open_url(url) as store:
        sid, _ = session_of(store, ["a", "b", "c"])
        fork = store.fork_session(sid, 2)
        other = store.fork_session(sid)
        store.delete_sessions([fork, sid])
        assert contents(store, other) == ["a", "b", "c"]
        store.delete_sessions([other])
        assert store.list_sessions() == []


def test_a_fork_of_a_fork_sees_the_chain_up_to_its_point(url: str):
    with open_url(url) as store:
        sid, ids = session_of(store, [f"o{i}" for i in range(6)])
        fork = store.fork_session(sid, 4)
        own = store.open_session(fork).add_messages([Message("user", "f0"), Message("user", "f1")])
        store.open_session(sid).add_messages([Message("user", "o6")])
        grand = store.fork_session(fork, 5)
        store.open_session(grand).add_messages([Message("user", "g0")])

        assert contents(store, grand) == ["o0", "o1", "o2", "o3", "f0", "g0"]
        assert [r.id for r in store.open_session(grand).get_records()][:5] == [*ids[:4], own[0]]
        assert contents(store, fork) == ["o0", "o1", "o2", "o3", "f0", "f1"]
        assert contents(store, sid) == [*(f"o{i}" for i in range(6)), "o6"]
        assert store.session_info(grand).message_count == 6


def test_undo_right_after_a_fork_takes_back_only_the_forks_messages(url: str):
    with open_url(url) as store:
        sid, _ = session_of(store, ["q1", "a1", "q2", "a2"])
        fork = store.fork_session(sid)
        f = store.open_session(fork)
        assert f.pop_message() == Message("user", "a2")
        assert f.pop_message() == Message("user", "q2")
        f.add_messages([Message("user", "q2 again")])

        assert contents(store, fork) == ["q1", "a1", "q2 again"]
        assert contents(store, sid) == ["q1", "a1", "q2", "a2"]
        assert store.session_info(fork).message_count == 3
        assert store.session_info(sid).message_count == 4


def test_undo_or_clear_in_the_origin_after_a_fork_leaves_the_fork_its_messages(url: str):
    with open_url(url) as store:
        sid, ids = session_of(store, ["q1", "a1", "q2", "a2"])
        fork = store.fork_session(sid)
        early = store.fork_session(sid, 1)
        o = store.open_session(sid)
        assert o.pop_message() == Message("user", "a2")
        o.add_messages([Message("user", "a2 changed")])

        assert contents(store, sid) == ["q1", "a1", "q2", "a2 changed"]
        assert contents(store, fork) == ["q1", "a1", "q2", "a2"]
        assert [r.id for r in store.open_session(fork).get_records()] == ids
        o.clear()
        assert contents(store, sid) == []
        assert contents(store, fork) == ["q1", "a1", "q2", "a2"]
        assert contents(store, early) == ["q1"]
        store.delete_session(sid)
        assert contents(store, fork) == ["q1", "a1", "q2", "a2"]
        assert contents(store, early) == ["q1"]


def test_slash_undo_right_after_slash_fork_sends_the_forks_view(llm_server: ScriptedLLMServer):
    llm_server.respond_with(lambda body: TextReply("ok"))

    result = chat(llm_server, "first\nsecond\n/fork\n/undo\nthird\n")

    assert result.exit_code == 0, result.stderr
    assert [m["content"] for m in llm_server.requests[-1]["messages"][1:]] == [
        "first",
        "ok",
        "third",
    ]
    with open_url(str(db_path())) as store:
        [origin] = [i.id for i in store.list_sessions() if store.fork_origin(i.id) is None]
        assert contents(store, origin) == ["first", "ok", "second", "ok"]


def test_a_forks_todo_list_is_the_one_it_had_at_the_fork_point(url: str):
    with open_url(url) as store:
        s = store.new_session()
        s.add_messages([Message("user", "plan it")])
        s.save_todos([TodoItem("read", "in_progress"), TodoItem("write")])
        s.add_messages([Message("assistant", "planned")])  # message 2
        time.sleep(0.01)
        s.save_todos([TodoItem("read", "completed"), TodoItem("write", "in_progress")])
        s.add_messages([Message("assistant", "read it")])  # message 3
        sid = s.session_id

        at_one = store.fork_session(sid, 1)
        at_two = store.fork_session(sid, 2)
        at_end = store.fork_session(sid)
        of_fork = store.fork_session(at_two, 1)

        def todos(fid: str) -> list[TodoItem] | None:
            return store.open_session(fid).get_todos()

        assert todos(at_two) == [TodoItem("read", "in_progress"), TodoItem("write")]
        assert todos(at_end) == [TodoItem("read", "completed"), TodoItem("write", "in_progress")]
        # Message 1 came before the list was first saved (a tool run after it made it).
        assert todos(at_one) is None
        assert todos(of_fork) is None
        assert todos(sid) == todos(at_end)


def test_a_fork_before_any_todo_list_was_saved_has_none(url: str):
    with open_url(url) as store:
        s = store.new_session()
        s.add_messages([Message("user", "one"), Message("assistant", "two")])
        time.sleep(0.01)
        s.save_todos([TodoItem("later")])
        s.add_messages([Message("assistant", "three")])
        assert store.open_session(store.fork_session(s.session_id, 2)).get_todos() is None


def test_a_fork_of_a_session_stored_before_lists_were_kept_gets_its_list_as_it_is(
    tmp_path: Path,
):
    import sqlite3

    with open_url(str(db_path())) as store:
        sid, _ = session_of(store, ["one", "two"])
        store.open_session(sid).save_todos([TodoItem("as it is now")])
    conn = sqlite3.connect(db_path(), isolation_level=None)
    conn.execute("DELETE FROM todo_lists")  # as a store from before todo_lists has it
    conn.close()

    fork = cli("sessions", "fork", sid, "--at", "1").stdout.strip()

    with open_url(str(db_path())) as store:
        assert store.open_session(fork).get_todos() == [TodoItem("as it is now")]


def test_a_forks_checkpoint_must_name_a_message_it_holds(url: str):
    with open_url(url) as store:
        sid, ids = session_of(store, ["a", "b", "c"])
        fork = store.fork_session(sid, 2)
        f = store.open_session(fork)
        f.add_checkpoint(Checkpoint(ids[1], "s", "summarization", 9, 3, 2, 1))  # inherited
        with pytest.raises(ValueError, match="not a message of this session"):
            f.add_checkpoint(Checkpoint(ids[2], "s", "summarization", 9, 3, 2, 1))
        assert store.delete_if_empty(fork) is False


def test_a_clean_up_by_age_that_takes_an_origin_and_a_fork_leaves_the_kept_fork_intact(
    url: str,
):
    # On PostgreSQL one statement deletes both, in an order the planner picks.
    with open_url(url) as store:
        sid, ids = session_of(store, ["a", "b", "c", "d"])
        old_fork = store.fork_session(sid)
        kept = store.fork_session(sid, 3)
        store.open_session(old_fork).add_messages([Message("user", "old's own")])

        gone = store.delete_sessions_older_than(time.time() + 60, keep=[kept])

        assert sorted(gone) == sorted([sid, old_fork])
        assert [(r.id, r.message.content) for r in store.open_session(kept).get_records()] == [
            (ids[0], "a"),
            (ids[1], "b"),
            (ids[2], "c"),
        ]
