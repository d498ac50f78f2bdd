"""Going back (issue 21), end to end through `harness9 chat` and the scripted server:
instructions that survive every compaction, pins, fork, rewind and lineage."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness9.config import db_path
from harness9.schema import Message, ToolCall
from harness9.store import Manager
from tests.support.cli import chat, cli
from tests.support.llm_server import (
    ScriptedLLMServer,
    TextReply,
    ToolCallsReply,
    is_summary_request,
)

RULES = (
    "never edit anything under the migrations/ folder",
    "write every reply in French",
    "the deploy target is staging-eu-3, not production",
)
FOURTH_RULE = "from now on, report each file's line count as well"
KEEPS_NOTHING = "The conversation went on."  # the adversarial summariser's every answer


def request_text(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"], ensure_ascii=False)


class LogReader:
    """The scripted model: every user turn reads ``calls`` log files, then answers.

    Summary requests get ``KEEPS_NOTHING``: a summariser that keeps nothing at all.
    """

    def __init__(self, files: list[str], calls: int = 3) -> None:
        self.files, self.calls = files, calls
        self.turn_calls = 0
        self.n = 0

    def __call__(self, body: dict[str, Any]) -> TextReply | ToolCallsReply:
        if is_summary_request(body):
            return TextReply(KEEPS_NOTHING)
        if body["messages"][-1]["role"] == "user":
            self.turn_calls = 0
        if self.turn_calls < self.calls:
            self.turn_calls += 1
            self.n += 1
            name = self.files[self.n % len(self.files)]
            args = json.dumps({"path": name})
            return ToolCallsReply(calls=((f"call_{self.n}", "read_file", args),))
        return TextReply("Fait.")


def log_files(work: Path, count: int = 8, kb: int = 3) -> list[str]:
    work.mkdir(exist_ok=True)
    names = []
    for i in range(count):
        name = f"app{i}.log"
        line = f"2026-05-17 12:00:{i:02d} INFO worker {i} handled a request in 12 ms\n"
        (work / name).write_text(line * (kb * 1024 // len(line)))
        names.append(name)
    return names


@pytest.fixture
def inline_results(monkeypatch):
    """Offload off: the 3 KB logs stay in the context (a 6K window offloads a result over
    500 tokens), so these sessions compact as often as the tests need."""
    monkeypatch.setenv("HARNESS9_OFFLOAD", "false")


def checkpoints_of(sid: str) -> int:
    with Manager(db_path()) as m:
        return len(m.open_session(sid).list_checkpoints())


def only_session() -> str:
    with Manager(db_path()) as m:
        [info] = m.list_sessions()
    return info.id


# -- 1. instructions survive every compaction ----------------------------------------------


def test_every_rule_is_in_every_request_after_ten_compactions_that_keep_nothing(
    llm_server: ScriptedLLMServer, tmp_path: Path, inline_results: None
):
    work = tmp_path / "w"
    llm_server.respond_with(LogReader(log_files(work)))
    first = "Rules for this job: " + "; ".join(RULES) + ". Now read app0.log."
    lines = [first, "read the next logs", FOURTH_RULE + ". Read more logs."]
    lines += [f"read more logs, batch {i}" for i in range(17)]

    result = chat(
        llm_server, "\n".join(lines) + "\n", "--workdir", str(work), "--context-window", "6000"
    )

    assert result.exit_code == 0, result.stderr
    sid = only_session()
    assert checkpoints_of(sid) >= 10
    chats = [b for b in llm_server.requests if not is_summary_request(b)]
    summaries = [b for b in llm_server.requests if is_summary_request(b)]
    assert summaries  # the summariser was asked, and kept nothing
    fourth_at = next(i for i, b in enumerate(chats) if FOURTH_RULE in request_text(b))
    missing = [
        i
        for i, body in enumerate(chats)
        for rule in (*RULES, *((FOURTH_RULE,) if i >= fourth_at else ()))
        if rule not in request_text(body)
    ]
    assert missing == []
    # Not by luck: those messages were folded long ago (and the summary kept none of
    # them: only a rule worded "never ..." is a fact it preserves); the system repeats them.
    rest = json.dumps(chats[-1]["messages"][1:])
    assert RULES[1] not in rest and RULES[2] not in rest and FOURTH_RULE not in rest
    last = chats[-1]["messages"]
    assert "## Earlier instructions" in last[0]["content"] and RULES[1] in last[0]["content"]


def test_between_two_compactions_the_repeated_instructions_keep_the_prefix_stable(
    llm_server: ScriptedLLMServer, tmp_path: Path
):
    work = tmp_path / "w"
    llm_server.respond_with(LogReader(log_files(work)))
    lines = ["Rules: " + RULES[1], *[f"read logs {i}" for i in range(6)]]

    result = chat(
        llm_server, "\n".join(lines) + "\n", "--workdir", str(work), "--context-window", "6000"
    )

    assert result.exit_code == 0, result.stderr
    chats = [b for b in llm_server.requests if not is_summary_request(b)]
    systems = [b["messages"][0]["content"] for b in chats]
    repeated = [s for s in systems if "## Earlier instructions" in s]
    assert repeated
    # The system message changes only when a checkpoint changes it: far fewer distinct
    # system messages than requests, and each one is used by consecutive requests.
    distinct = list(dict.fromkeys(systems))
    assert len(distinct) <= checkpoints_of(only_session()) + 1 < len(systems)
    runs = [s for i, s in enumerate(systems) if i == 0 or s != systems[i - 1]]
    assert len(runs) == len(distinct)


# -- 2. pins ---------------------------------------------------------------------------


def test_a_pin_is_in_every_request_through_compactions_and_resume(
    llm_server: ScriptedLLMServer, tmp_path: Path, inline_results: None
):
    work = tmp_path / "w"
    llm_server.respond_with(LogReader(log_files(work)))
    pin = "always answer with the ticket number OPS-4821"
    lines = ["hello", f"/pin {pin}", "/pins", *[f"read logs {i}" for i in range(6)]]

    result = chat(
        llm_server, "\n".join(lines) + "\n", "--workdir", str(work), "--context-window", "6000"
    )

    assert result.exit_code == 0, result.stderr
    assert f"pinned as 1: {pin}" in result.stderr and f"[1] {pin}" in result.stderr
    sid = only_session()
    assert checkpoints_of(sid) >= 2
    chats = [b for b in llm_server.requests if not is_summary_request(b)]
    pinned_at = next(i for i, b in enumerate(chats) if "read logs 0" in request_text(b))
    assert not any(pin in request_text(b) for b in chats[:pinned_at])  # the first turn's
    assert all(pin in b["messages"][0]["content"] for b in chats[pinned_at:])
    before = len(llm_server.requests)

    result = chat(
        llm_server,
        "one more\n",
        "--resume",
        sid,
        "--workdir",
        str(work),
        "--context-window",
        "6000",
    )

    assert result.exit_code == 0, result.stderr
    resumed = [b for b in llm_server.requests[before:] if not is_summary_request(b)]
    assert resumed and all(pin in b["messages"][0]["content"] for b in resumed)


def test_unpin_removes_the_note_from_the_next_request(llm_server: ScriptedLLMServer):
    llm_server.respond_with(lambda body: TextReply("ok"))
    lines = ["/pin keep A", "/pin keep B", "first", "/unpin 1", "second", "/unpin 7"]

    result = chat(llm_server, "\n".join(lines) + "\n")

    assert result.exit_code == 0, result.stderr
    first, second = (b["messages"][0]["content"] for b in llm_server.requests)
    assert "1. keep A\n2. keep B" in first
    assert "keep A" not in second and "1. keep B" in second
    assert "no pin 7; /pins lists them" in result.stderr


def test_pins_are_in_sessions_show_and_survive_export_and_import(
    llm_server: ScriptedLLMServer,
):
    llm_server.respond_with(lambda body: TextReply("ok"))
    assert chat(llm_server, "/pin use tabs\nhi\n").exit_code == 0
    sid = only_session()

    shown = cli("sessions", "show", sid)
    data = json.loads(cli("sessions", "show", sid, "--json").stdout)
    exported = cli("sessions", "export", sid, "--format", "json").stdout
    assert cli("sessions", "delete", sid, "--yes").exit_code == 0
    assert cli("sessions", "import", "-", input=exported).exit_code == 0

    assert "1. use tabs" in shown.stdout
    assert data["pins"] == ["use tabs"]
    with Manager(db_path()) as m:
        assert m.open_session(sid).pins() == ["use tabs"]


# -- 3. fork --------------------------------------------------------------------------


def conversation(m: Manager, turns: int) -> tuple[str, list[int]]:
    """A stored session of ``turns`` exchanges (user, call, result, answer); its ids."""
    s = m.new_session()
    ids: list[int] = []
    for i in range(turns):
        ids += s.add_messages(
            [
                Message("user", f"question {i}"),
                Message("assistant", "", [ToolCall(f"c{i}", "read_file", '{"path": "a"}')]),
                Message("tool", f"result {i} " + "x" * 200, tool_call_id=f"c{i}"),
                Message("assistant", f"answer {i}"),
            ]
        )
    return s.session_id, ids


def test_a_fork_before_two_checkpoints_resumes_with_that_message_and_nothing_later(
    llm_server: ScriptedLLMServer,
):
    from harness9.store.session import Checkpoint

    with Manager(db_path()) as m:
        sid, ids = conversation(m, 6)
        s = m.open_session(sid)
        # A folds turns 0-1; B and C fold more, and were made after message 10 was written.
        a = Checkpoint(ids[7], "summary A", "summarization", 900, 300, 9, 3)
        a.instructions = ["question 0", "question 1"]
        s.add_checkpoint(a)
        s.add_checkpoint(Checkpoint(ids[11], "summary B", "summarization", 900, 300, 9, 3))
        s.add_checkpoint(Checkpoint(ids[15], "summary C", "summarization", 900, 300, 9, 3))
    conn = sqlite3.connect(db_path(), isolation_level=None)
    conn.execute("UPDATE messages SET created_at = 1 WHERE id <= ?", (ids[8],))
    conn.execute("UPDATE messages SET created_at = 3 WHERE id > ?", (ids[8],))
    conn.execute("UPDATE compactions SET created_at = 2 WHERE summary = 'summary A'")
    conn.execute("UPDATE compactions SET created_at = 4 WHERE summary <> 'summary A'")
    conn.close()

    result = cli("sessions", "fork", sid[:8], "--at", "9")

    assert result.exit_code == 0, result.stderr
    fork = result.stdout.strip()
    assert fork != sid and len(fork) == 36
    llm_server.reply_text("bien")
    assert chat(llm_server, "go on\n", "--resume", fork).exit_code == 0
    sent = llm_server.requests[-1]["messages"]
    text = json.dumps(sent)
    assert "summary A" in text and "summary B" not in text and "summary C" not in text
    assert [m["content"] for m in sent[1:] if m["role"] == "user"] == [
        "[Conversation Summary]\nsummary A",
        "question 2",
        "go on",
    ]
    assert "[user message 1]\nquestion 0" in sent[0]["content"]
    assert "answer 2" not in text and "question 3" not in text
    with Manager(db_path()) as m:  # the original is untouched
        assert len(m.open_session(sid).get_messages()) == 24
        assert len(m.open_session(sid).list_checkpoints()) == 3


def test_a_fork_shares_the_messages_so_stubs_and_recall_handles_name_them_as_written(
    llm_server: ScriptedLLMServer,
):
    from harness9.store.session import STUB_STUBBED, Checkpoint, RecallEntry, Stub

    with Manager(db_path()) as m:
        sid, ids = conversation(m, 3)
        cp = Checkpoint(ids[3], "", "evict", 900, 300, 9, 3)
        cp.recall = [RecallEntry(f"msg_{ids[2]}", "read_file", "a", 50)]
        cp.stubs = {ids[6]: Stub(STUB_STUBBED, 40)}
        m.open_session(sid).add_checkpoint(cp)
        other, other_ids = conversation(m, 1)

    fork = cli("sessions", "fork", sid).stdout.strip()

    with Manager(db_path()) as m:
        f = m.open_session(fork)
        assert [r.id for r in f.get_records()] == ids  # the same rows, not copies
        [kept] = f.list_checkpoints()
        assert kept.last_message_id == ids[3]
        assert kept.recall == [RecallEntry(f"msg_{ids[2]}", "read_file", "a", 50)]
        assert kept.stubs == {ids[6]: Stub(STUB_STUBBED, 40)}
        # A handle reaches the shared message; one to another session's message does not.
        shared = f.get_record(ids[2])
        assert shared is not None and shared.message.content.startswith("result 0 ")
        assert f.get_record(other_ids[0]) is None
        # The fork's own messages are its own: the origin does not see them.
        [mine] = f.add_messages([Message("user", "only in the fork")])
        assert mine > ids[-1] and m.open_session(sid).get_record(mine) is None
        assert len(m.open_session(sid).get_messages()) == 12


def test_fork_at_a_number_the_session_does_not_have_is_one_line_and_writes_nothing():
    with Manager(db_path()) as m:
        sid, _ = conversation(m, 1)

    result = cli("sessions", "fork", sid, "--at", "5")

    assert result.exit_code == 2
    assert "there is no message 5 to fork at: the session has 4 messages" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    with Manager(db_path()) as m:
        assert [i.id for i in m.list_sessions()] == [sid]


def test_slash_fork_switches_to_a_copy_and_leaves_the_original(llm_server):
    llm_server.respond_with(lambda body: TextReply("ok"))

    result = chat(llm_server, "first\n/fork\nsecond\n")

    assert result.exit_code == 0, result.stderr
    assert "forked: now in fork" in result.stderr
    with Manager(db_path()) as m:
        infos = {i.id: i for i in m.list_sessions()}
        [origin] = [i for i in infos if m.fork_origin(i) is None]
        [fork] = [i for i in infos if i != origin]
        assert [x.content for x in m.open_session(origin).get_messages()] == ["first", "ok"]
        assert [x.content for x in m.open_session(fork).get_messages()] == [
            "first",
            "ok",
            "second",
            "ok",
        ]


# -- 4. rewind -------------------------------------------------------------------------


def test_rewind_lists_user_messages_then_continues_without_the_later_turns(
    llm_server: ScriptedLLMServer,
):
    llm_server.respond_with(lambda body: TextReply("reply"))

    result = chat(llm_server, "alpha\nbeta\ngamma\n/rewind\n/rewind 9\n/rewind 2\ndelta\n")

    assert result.exit_code == 0, result.stderr
    assert "there is no message 9 to fork at: the session has 6 messages" in result.stderr
    assert "[1] alpha" in result.stderr and "[3] beta" in result.stderr
    assert "[5] gamma" in result.stderr
    last = [m["content"] for m in llm_server.requests[-1]["messages"][1:]]
    assert last == ["alpha", "reply", "delta"]
    with Manager(db_path()) as m:
        infos = m.list_sessions()
        [origin] = [i.id for i in infos if m.fork_origin(i.id) is None]
        [fork] = [i.id for i in infos if i.id != origin]
        assert [x.content for x in m.open_session(origin).get_messages()] == [
            "alpha",
            "reply",
            "beta",
            "reply",
            "gamma",
            "reply",
        ]
        assert m.fork_origin(fork).message == 2


def test_a_rewind_across_compactions_has_the_view_the_session_had_at_that_point(
    llm_server: ScriptedLLMServer, tmp_path: Path, inline_results: None
):
    work = tmp_path / "w"
    llm_server.respond_with(LogReader(log_files(work)))
    lines = ["Rules: " + RULES[1], *[f"read logs {i}" for i in range(8)]]
    args = ("--workdir", str(work), "--context-window", "6000")
    assert chat(llm_server, "\n".join(lines) + "\n", *args).exit_code == 0
    sid = only_session()
    with Manager(db_path()) as m:
        records = m.open_session(sid).get_records()
    # The user message "read logs 4": what was sent before it then is the view the rewind
    # to it (which takes it back) continues from.
    n = next(i for i, r in enumerate(records, 1) if r.message.content == "read logs 4")
    then = next(b for b in llm_server.requests if b["messages"][-1]["content"] == "read logs 4")
    before = len(llm_server.requests)

    result = chat(llm_server, f"/rewind {n}\n/exit\n", "--resume", sid, *args)
    assert result.exit_code == 0, result.stderr
    fork = next(i for i in Manager(db_path()).list_sessions() if i.id != sid).id
    llm_server.respond_with(lambda body: TextReply("d'accord"))
    assert chat(llm_server, "continue\n", "--resume", fork, *args).exit_code == 0

    [now] = [b for b in llm_server.requests[before:] if not is_summary_request(b)]

    # The same view, byte for byte, up to the message taken back: the fork shares the
    # messages, so even the recall handles name the same ids.
    assert now["messages"][:-1] == then["messages"][:-1]
    assert re.search(r"msg_\d+", json.dumps(then["messages"]))  # (there are handles)
    assert now["messages"][-1] == {"role": "user", "content": "continue"}


# -- 5. lineage ------------------------------------------------------------------------


def test_lineage_is_in_list_and_show_json_and_survives_export_import_and_deletion():
    with Manager(db_path()) as m:
        sid, _ = conversation(m, 2)
    fork = cli("sessions", "fork", sid, "--at", "4").stdout.strip()

    listed = {
        s["id"]: s["forked_from"] for s in json.loads(cli("sessions", "list", "--json").stdout)
    }
    origin_json = json.loads(cli("sessions", "show", sid, "--json").stdout)
    shown = cli("sessions", "show", fork).stdout
    origin_shown = cli("sessions", "show", sid).stdout
    exported = cli("sessions", "export", fork, "--format", "json").stdout
    assert json.loads(exported)["forked_from"] == {"session_id": sid, "message": 4}
    assert cli("sessions", "delete", fork, "--yes").exit_code == 0
    assert cli("sessions", "import", "-", input=exported).exit_code == 0
    assert cli("sessions", "delete", sid, "--yes").exit_code == 0
    after = json.loads(cli("sessions", "show", fork, "--json").stdout)
    after_shown = cli("sessions", "show", fork).stdout

    assert listed == {sid: None, fork: {"session_id": sid, "message": 4}}
    assert origin_json["forked_from"] is None
    assert origin_json["forks"] == [{"session_id": fork, "message": 4}]
    assert f"forked from {sid} at message 4" in shown
    assert "deleted" not in shown
    assert f"forked from {sid} at message 4 (since deleted)" in after_shown
    assert f"fork {fork} at message 4" in origin_shown
    assert after["forked_from"] == {"session_id": sid, "message": 4}  # the origin is gone
    assert after["message_count"] == 4


# -- both stores ----------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "postgres":
        yield request.getfixturevalue("pg_url")
    else:
        yield str(tmp_path / "sessions.db")


def test_fork_on_either_store_copies_messages_checkpoints_pins_and_outputs(store_url: str):
    from harness9.store.backend import open_url
    from harness9.store.session import Checkpoint
    from harness9.tools.offload import OffloadStore
    from harness9.ui.goback import fork_with_outputs

    with open_url(store_url) as store:
        s = store.new_session()
        ids = s.add_messages([Message("user", f"m{i}") for i in range(4)])
        s.add_checkpoint(Checkpoint(ids[1], "sum", "summarization", 9, 3, 3, 2))
        time.sleep(0.01)
        s.add_messages([Message("user", f"m{i}") for i in range(4, 6)])
        s.add_pin("pinned")
        # The offloaded outputs: in the database (PostgreSQL) or files in $HARNESS9_HOME.
        blobs = store.blob_store() or OffloadStore().blobs
        blobs.put(s.session_id, "ofl_0123456789ab", b"the whole output")
        fork = fork_with_outputs(store, s.session_id, 4)
        f = store.open_session(fork)
        assert [m.content for m in f.get_messages()] == ["m0", "m1", "m2", "m3"]
        [cp] = f.list_checkpoints()
        assert cp.summary == "sum" and cp.last_message_id == f.get_records()[1].id
        assert f.pins() == ["pinned"]
        assert store.fork_origin(fork).session_id == s.session_id
        assert store.forks_of(s.session_id) == [(fork, 4)]
        stream = blobs.read(fork, "ofl_0123456789ab")
        assert stream is not None and stream.read() == b"the whole output"
        assert len(s.get_messages()) == 6  # the origin is only read


def test_a_fork_writes_no_message_row_and_the_same_statements_for_ten_as_for_ten_thousand(
    tmp_path: Path,
):
    # The fork shares its origin's rows: neither the statements it runs nor the rows it
    # writes grow with the session (scripts/bench_fork.py measures its time).
    def statements_of_fork(count: int) -> list[str]:
        with Manager(tmp_path / f"{count}.db") as m:
            s = m.new_session()
            s.add_messages([Message("user", f"message {i}") for i in range(count)])
            sql: list[str] = []
            m.conn.set_trace_callback(sql.append)
            fork = m.fork_session(s.session_id, count - 1)
            m.conn.set_trace_callback(None)
            assert m.session_info(fork).message_count == count - 1
        return sql

    small, large = statements_of_fork(10), statements_of_fork(10_000)
    assert len(small) == len(large) < 30
    assert not [q for q in large if "INTO messages" in q or "UPDATE messages" in q]
    assert sum("INSERT INTO inherited_messages" in q for q in large) == 1


@pytest.fixture
def no_flag_left() -> Iterator[None]:
    """``--database-url`` is per process, and CliRunner shares this one: clear it after."""
    from harness9.config import use_database_url

    yield
    use_database_url(None)


def test_sessions_fork_on_postgresql_through_the_cli(
    pg_url: str, llm_server: ScriptedLLMServer, no_flag_left: None
):
    from harness9.store.postgres import PostgresManager

    with PostgresManager(pg_url) as m:
        s = m.new_session()
        s.add_messages([Message("user", "one"), Message("assistant", "1"), Message("user", "two")])
        sid = s.session_id

    result = cli("sessions", "--database-url", pg_url, "fork", sid[:8], "--at", "2")

    assert result.exit_code == 0, result.stderr
    fork = result.stdout.strip()
    llm_server.reply_text("3")
    resumed = cli(
        "--database-url",
        pg_url,
        "chat",
        "--model",
        "openai/test-model",
        "--api-base",
        llm_server.base_url,
        "--resume",
        fork,
        input="three\n",
    )
    assert resumed.exit_code == 0, resumed.stderr
    sent = [m["content"] for m in llm_server.requests[-1]["messages"][1:]]
    assert sent == ["one", "1", "three"]
    with PostgresManager(pg_url) as m:
        assert [x.content for x in m.open_session(sid).get_messages()] == ["one", "1", "two"]
        assert m.fork_origin(fork).message == 2
