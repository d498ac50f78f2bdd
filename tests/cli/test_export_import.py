"""``harness9 sessions export|import`` through the real entry point, and the JSON format."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from freezegun import freeze_time

from harness9.config import store_location
from harness9.schema import Message, TodoItem, ToolCall
from harness9.store import Checkpoint
from harness9.store.backend import open_store as open_manager
from tests.support.cli import cli, run_cli

pytestmark = pytest.mark.usefixtures("on_each_store")


def full_session() -> str:
    with freeze_time("2026-05-17 14:30:00") as clock, open_manager(store_location()) as m:
        s = m.new_session()
        ids = s.add_messages(
            [
                Message("user", "list files"),
                Message("assistant", "", [ToolCall("call_1", "bash", '{"command": "ls"}')]),
                Message("tool", "a.py\n```\nb.py", tool_call_id="call_1"),
            ]
        )
        clock.tick(90)
        ids += s.add_messages([Message("assistant", "Two files, one with a fence.")])
        s.save_todos([TodoItem("read a.py", "completed"), TodoItem("fix b.py", "in_progress")])
        s.add_checkpoint(Checkpoint(ids[1], "Goal: list files", "summarization", 900, 120, 3, 2))
        return s.session_id


def export_json(sid: str) -> str:
    result = cli("sessions", "export", sid, "--format", "json")
    assert result.exit_code == 0, result.stderr
    return result.stdout


def stored_ids() -> set[str]:
    with open_manager(store_location()) as m:
        return {i.id for i in m.list_sessions()}


# -- JSON export --------------------------------------------------------------------------


def test_json_export_is_versioned_and_complete():
    sid = full_session()
    doc = json.loads(export_json(sid))
    assert doc["format"] == "harness9-session"
    assert doc["version"] == 1
    assert (doc["id"], doc["title"], doc["message_count"]) == (sid, "list files", 4)
    assert doc["created_at"] == 1779028200.0 and doc["updated_at"] == 1779028290.0
    assert doc["messages"][1] == {
        "id": 2,
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_1", "name": "bash", "arguments": '{"command": "ls"}'}],
        "tool_call_id": None,
        "created_at": 1779028200.0,
        "offload": None,
        "metadata": None,
    }
    assert doc["messages"][2]["tool_call_id"] == "call_1"
    assert doc["todos"] == [
        {"content": "read a.py", "status": "completed"},
        {"content": "fix b.py", "status": "in_progress"},
    ]
    assert doc["checkpoints"] == [
        {
            "id": 1,
            "last_message_id": 2,
            "summary": "Goal: list files",
            "strategy": "summarization",
            "tokens_before": 900,
            "tokens_after": 120,
            "messages_before": 3,
            "messages_after": 2,
            "created_at": 1779028290.0,
            "recall": [],
            "recall_overflow": 0,
            "stubs": {},
            "state": [],
            "instructions": [],
            "facts": None,  # a checkpoint stored without its facts
        }
    ]
    assert doc["pins"] == [] and doc["forked_from"] is None


def test_export_then_delete_then_import_then_export_is_byte_identical():
    sid = full_session()
    before = export_json(sid)
    assert cli("sessions", "delete", sid, "--yes").exit_code == 0
    result = cli("sessions", "import", "-", input=before)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == f"{sid}\n"
    assert result.stderr == f"Imported session {sid} (4 messages).\n"
    assert export_json(sid) == before


def test_tokens_and_cost_survive_export_delete_and_import():
    sid = full_session()
    with open_manager(store_location()) as m:
        m.add_usage(sid, input_tokens=1200, output_tokens=80, cached_tokens=200, cost_usd=0.5)
        m.add_usage(sid, input_tokens=300, output_tokens=20, summary=True)  # unpriced
    listed = json.loads(cli("sessions", "list", "--json").stdout)[0]["usage"]
    text = export_json(sid)
    assert json.loads(text)["usage"]["input_tokens"] == 1500
    assert cli("sessions", "delete", sid, "--yes").exit_code == 0
    assert cli("sessions", "import", "-", input=text).exit_code == 0
    assert json.loads(cli("sessions", "list", "--json").stdout)[0]["usage"] == listed
    assert listed["total_tokens"] == 1600 and listed["cost_usd"] == 0.5
    assert export_json(sid) == text


def test_cache_writes_survive_export_and_an_older_file_without_them_reads_as_zero():
    sid = full_session()
    with open_manager(store_location()) as m:
        m.add_usage(
            sid, input_tokens=5000, output_tokens=50, cached_tokens=3000, cache_write_tokens=1800
        )
    text = export_json(sid)
    assert json.loads(text)["usage"]["cache_write_tokens"] == 1800
    cli("sessions", "delete", sid, "--yes")
    assert cli("sessions", "import", "-", input=text).exit_code == 0
    usage = json.loads(cli("sessions", "list", "--json").stdout)[0]["usage"]
    assert (usage["cached_tokens"], usage["cache_write_tokens"]) == (3000, 1800)
    doc = json.loads(text)
    del doc["usage"]["cache_write_tokens"]  # written by a harness9 before the column
    cli("sessions", "delete", sid, "--yes")
    assert cli("sessions", "import", "-", input=json.dumps(doc)).exit_code == 0
    usage = json.loads(cli("sessions", "list", "--json").stdout)[0]["usage"]
    assert (usage["cached_tokens"], usage["cache_write_tokens"]) == (3000, 0)


def test_an_export_from_before_usage_was_carried_imports_with_none():
    sid = full_session()
    doc = json.loads(export_json(sid))
    del doc["usage"]
    cli("sessions", "delete", sid, "--yes")
    assert cli("sessions", "import", "-", input=json.dumps(doc)).exit_code == 0
    usage = json.loads(cli("sessions", "list", "--json").stdout)[0]["usage"]
    assert usage["model_calls"] == 0 and usage["total_tokens"] == 0


def test_an_imported_session_is_searchable_and_resumable():
    sid = full_session()
    text = export_json(sid)
    cli("sessions", "delete", sid, "--yes")
    cli("sessions", "import", "-", input=text)
    with open_manager(store_location()) as m:
        assert [h.session_id for h in m.search("fence")] == [sid]
        s = m.open_session(sid)
        (new,) = s.add_messages([Message("user", "go on")])
        assert new == 5  # the restored ids are the newest of the session: order holds


def test_importing_an_existing_session_is_a_one_line_error_and_writes_nothing():
    sid = full_session()
    text = export_json(sid)
    result = cli("sessions", "import", "-", input=text)
    assert result.exit_code == 1
    assert result.stderr == (
        f"harness9: session {sid} already exists; delete it first or import with --new-id\n"
    )
    assert stored_ids() == {sid}


def test_import_with_new_id_stores_a_copy_whose_checkpoints_follow_the_new_message_ids():
    sid = full_session()
    result = cli("sessions", "import", "-", "--new-id", input=export_json(sid))
    assert result.exit_code == 0
    (copy,) = stored_ids() - {sid}
    assert result.stdout == f"{copy}\n"
    assert result.stderr == f"Imported session {copy} (4 messages, a copy of {sid}).\n"
    with open_manager(store_location()) as m:
        s = m.open_session(copy)
        records = s.get_records()
        (cp,) = s.list_checkpoints()
        assert [r.id for r in records] == [5, 6, 7, 8]
        assert cp.last_message_id == 6  # was message 2, the assistant's tool call
        assert records[1].message.tool_calls[0].id == "call_1"
        assert s.get_todos() == [
            TodoItem("read a.py", "completed"),
            TodoItem("fix b.py", "in_progress"),
        ]
    copy_doc, orig_doc = json.loads(export_json(copy)), json.loads(export_json(sid))
    assert [m["content"] for m in copy_doc["messages"]] == [
        m["content"] for m in orig_doc["messages"]
    ]
    assert copy_doc["updated_at"] == orig_doc["updated_at"]


def test_an_export_whose_message_ids_are_taken_is_imported_with_fresh_ids(tmp_path: Path):
    sid = full_session()
    doc = json.loads(export_json(sid))
    cli("sessions", "delete", sid, "--yes")
    other = full_session()  # takes message ids 5..8 and checkpoint 2
    doc["messages"][0]["id"] = 7  # ids 7, then... would collide: renumber all
    doc["messages"][1]["id"] = 20
    doc["messages"][2]["id"] = 21
    doc["messages"][3]["id"] = 22
    doc["checkpoints"][0]["last_message_id"] = 20
    assert cli("sessions", "import", "-", input=json.dumps(doc)).exit_code == 0
    with open_manager(store_location()) as m:
        s = m.open_session(sid)
        assert [r.id for r in s.get_records()] == [9, 10, 11, 12]
        assert s.list_checkpoints()[0].last_message_id == 10
        assert len(m.open_session(other).get_records()) == 4


# -- malformed input --------------------------------------------------------------------------


def valid_doc() -> dict:
    sid = full_session()
    doc = json.loads(export_json(sid))
    cli("sessions", "delete", sid, "--yes")
    return doc


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        (
            lambda d: d.update(version=2),
            "unsupported export version 2 (this harness9 reads version 1)",
        ),
        (
            lambda d: d.update(version=True),
            "unsupported export version True (this harness9 reads version 1)",
        ),
        (
            lambda d: d.update(format="other"),
            'not a harness9 session export (no "format": "harness9-session")',
        ),
        (
            lambda d: d.update(id="../../etc"),
            "session id '../../etc' is not a canonical lower-case UUID",
        ),
        (lambda d: d["messages"][1].pop("role"), "messages[1] has no 'role'"),
        (
            lambda d: d["messages"][0].update(content=5),
            "messages[0].content has the wrong type (int)",
        ),
        (
            lambda d: d["messages"][0].update(created_at=float("nan")),
            "messages[0].created_at is not a finite number",
        ),
        (
            lambda d: d["messages"][2].update(id=1),
            "message ids must increase through the file (2, then 1)",
        ),
        (lambda d: d.update(message_count=3), "message_count is 3 but the file holds 4 messages"),
        (
            lambda d: d["checkpoints"][0].update(last_message_id=99),
            "checkpoints[0] covers message 99, which is not in the file",
        ),
        (
            lambda d: d["messages"][1]["tool_calls"].append("x"),
            "messages[1].tool_calls[1] is not an object",
        ),
        (
            lambda d: d["todos"][0].update(status=None),
            "todos[0].status has the wrong type (NoneType)",
        ),
        (
            lambda d: d.update(created_at=1e300),
            "session.created_at is 1e+300, not a time (Unix seconds from 0 to 253402300799)",
        ),
        (
            lambda d: d["messages"][0].update(created_at=-1),
            "messages[0].created_at is -1.0, not a time (Unix seconds from 0 to 253402300799)",
        ),
        (
            lambda d: d["messages"][0].update(role="wizard"),
            "messages[0].role is 'wizard', not one of system, user, assistant, tool",
        ),
        (
            lambda d: d["messages"][3].update(id=2**70),
            f"messages[3].id is {2**70}, not a count from 0 to {2**63 - 1}",
        ),
        (
            lambda d: d["todos"][0].update(status="done"),
            "todos[0].status is 'done', not one of pending, in_progress, completed",
        ),
        (
            lambda d: d["checkpoints"][0].update(tokens_before=-3),
            f"checkpoints[0].tokens_before is -3, not a count from 0 to {2**63 - 1}",
        ),
    ],
)
def test_a_malformed_export_is_a_one_line_error_and_writes_nothing(mutate, error):
    doc = valid_doc()
    mutate(doc)
    result = cli("sessions", "import", "-", input=json.dumps(doc))
    assert result.exit_code == 1
    assert result.stderr == f"harness9: cannot import -: {error}\n"
    assert stored_ids() == set()


def test_a_file_that_is_not_json_is_a_one_line_error(tmp_path: Path):
    bad = tmp_path / "notes.json"
    bad.write_text('{"format": "harness9-session",\n  oops}')
    result = cli("sessions", "import", str(bad))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"harness9: cannot import {bad}: not valid JSON (")
    assert "line 2 column 3" in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_missing_file_is_a_one_line_error(tmp_path: Path):
    result = cli("sessions", "import", str(tmp_path / "nope.json"))
    assert result.exit_code == 1
    assert (
        result.stderr
        == f"harness9: cannot read {tmp_path / 'nope.json'}: No such file or directory\n"
    )


@pytest.mark.sqlite_only  # sabotaged with an SQLite trigger
def test_a_failure_half_way_through_the_import_leaves_nothing(harness9_home: Path):
    doc = valid_doc()
    with open_manager(store_location()) as m:
        m.conn.execute(
            "CREATE TRIGGER t BEFORE INSERT ON compactions "
            "BEGIN SELECT RAISE(ABORT, 'injected'); END"
        )
    result = cli("sessions", "import", "-", input=json.dumps(doc))
    assert result.exit_code == 1
    assert "injected" in result.stderr
    with open_manager(store_location()) as m:
        assert m.list_sessions() == []
        assert m.conn.execute("SELECT count(*) FROM messages").fetchone() == (0,)
        assert m.search("files") == []


# -- writing files ----------------------------------------------------------------------------


def test_export_o_writes_the_file_0600_and_says_so_on_stderr(tmp_path: Path):
    sid = full_session()
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "s.json"
    result = cli("sessions", "export", sid[:8], "-o", str(out))
    assert result.exit_code == 0
    assert result.stdout == ""
    assert result.stderr == f"Exported session {sid} to {out}.\n"
    assert json.loads(out.read_text())["id"] == sid  # .json chose the JSON format
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert [p.name for p in out.parent.iterdir()] == ["s.json"]  # no temporary file left


def test_export_o_refuses_to_overwrite_without_force(tmp_path: Path):
    sid = full_session()
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "s.md"
    out.write_text("precious")
    result = cli("sessions", "export", sid, "-o", str(out))
    assert result.exit_code == 1
    assert result.stderr == f"harness9: {out} already exists; use --force to overwrite it\n"
    assert out.read_text() == "precious"
    assert cli("sessions", "export", sid, "-o", str(out), "--force").exit_code == 0
    assert out.read_text().startswith("# list files\n")
    assert sorted(p.name for p in out.parent.iterdir()) == ["s.md"]


def test_export_o_into_a_missing_directory_is_a_one_line_error(tmp_path: Path):
    sid = full_session()
    result = cli("sessions", "export", sid, "-o", str(tmp_path / "no" / "s.md"))
    assert result.exit_code == 1
    assert (
        result.stderr
        == f"harness9: cannot write {tmp_path / 'no' / 's.md'}: No such file or directory\n"
    )


def test_export_of_an_unknown_session_is_not_found():
    full_session()
    result = cli("sessions", "export", "0000dead")
    assert (result.exit_code, result.stderr) == (1, "harness9: no session with id '0000dead'\n")


# -- Markdown ------------------------------------------------------------------------------


def test_markdown_export_reads_as_a_transcript():
    sid = full_session()
    result = cli("sessions", "export", sid)
    assert result.exit_code == 0
    assert result.stdout == (
        "# list files\n\n"
        f"- Session: `{sid}`\n"
        "- Created: 2026-05-17T14:30:00Z\n"
        "- Updated: 2026-05-17T14:31:30Z\n"
        "- Messages: 4\n"
        "- Compaction checkpoints: 1\n\n"
        "## User · #1 · 2026-05-17T14:30:00Z\n\n"
        "list files\n\n"
        "## Assistant · #2 · 2026-05-17T14:30:00Z\n\n"
        "<details>\n<summary>Tool call: bash (call_1)</summary>\n\n"
        '```json\n{\n  "command": "ls"\n}\n```\n\n'
        "</details>\n\n"
        "> **Compaction checkpoint #1** · summarization · messages up to #2 folded · "
        "900 → 120 tokens · 3 → 2 messages · 2026-05-17T14:31:30Z\n"
        ">\n"
        "> Goal: list files\n\n"
        "## Tool result · #3 · 2026-05-17T14:30:00Z\n\n"
        "<details>\n<summary>Result of `bash` (call_1) · 3 lines</summary>\n\n"
        "````\na.py\n```\nb.py\n````\n\n"  # a longer fence: the stored ``` cannot end it
        "</details>\n\n"
        "## Assistant · #4 · 2026-05-17T14:31:30Z\n\n"
        "Two files, one with a fence.\n\n"
        "## Todos\n\n"
        "- [x] read a.py\n"
        "- [ ] fix b.py *(in progress)*\n"
    )


def test_markdown_escapes_html_in_tool_names():
    with open_manager(store_location()) as m:
        s = m.new_session()
        s.add_messages([Message("assistant", "", [ToolCall("c<1>", "<script>", "not json")])])
        sid = s.session_id
    out = cli("sessions", "export", sid).stdout
    assert "<summary>Tool call: &lt;script&gt; (c&lt;1&gt;)</summary>" in out
    assert "```\nnot json\n```" in out


# -- a real process -------------------------------------------------------------------------


@pytest.mark.sqlite_only  # two homes; tests/store/test_postgres_store.py pipes between backends
def test_export_and_import_through_a_pipe_in_real_processes(harness9_home: Path, tmp_path: Path):
    sid = full_session()
    exported = run_cli("sessions", "export", sid, "--format", "json")
    assert exported.returncode == 0, exported.stderr
    other_home = tmp_path / "elsewhere"
    imported = run_cli(
        "sessions", "import", "-", input=exported.stdout, env={"HARNESS9_HOME": str(other_home)}
    )
    assert imported.returncode == 0, imported.stderr
    again = run_cli("sessions", "export", sid, "-f", "json", env={"HARNESS9_HOME": str(other_home)})
    assert again.stdout == exported.stdout
    assert stat.S_IMODE(os.stat(other_home / "sessions.db").st_mode) == 0o600


def test_recall_entries_stubs_and_state_survive_export_and_import():
    from harness9.store.session import STUB_EVICTED, RecallEntry, Stub

    with open_manager(store_location()) as m:
        s = m.new_session()
        ids = s.add_messages(
            [Message("user", "go"), Message("tool", "big output", tool_call_id="c1")]
        )
        s.add_checkpoint(
            Checkpoint(
                0,
                "",
                "hybrid:stubs",
                10,
                5,
                3,
                3,
                recall=[RecallEntry(f"msg_{ids[0]}", "bash", "ls", 3)],
                recall_overflow=4,
                stubs={ids[1]: Stub(STUB_EVICTED, 3, "", "bash: 1 line")},
                state=[TodoItem("ship", "pending")],
            )
        )
        sid = s.session_id
    text = export_json(sid)
    cli("sessions", "delete", sid, "--yes")
    assert cli("sessions", "import", "-", input=text).exit_code == 0

    with open_manager(store_location()) as m:
        [cp] = m.open_session(sid).list_checkpoints()
    assert cp.stubs == {ids[1]: Stub(STUB_EVICTED, 3, "", "bash: 1 line")}
    assert cp.recall == [RecallEntry(f"msg_{ids[0]}", "bash", "ls", 3)]
    assert cp.recall_overflow == 4 and cp.state == [TodoItem("ship", "pending")]
    assert cp.last_message_id == 0
    assert export_json(sid) == text


def test_an_export_written_before_checkpoints_were_data_imports_with_them_converted():
    from harness9.context.view import build_view
    from harness9.store.session import STUB_VERBATIM, RecallEntry, Stub

    doc = json.loads(export_json(full_session()))
    cli("sessions", "delete", doc["id"], "--yes")
    [c] = doc["checkpoints"]
    for key in ("recall", "recall_overflow", "stubs", "state"):
        del c[key]
    stub = '[stubbed] 30 tokens stubbed; offload_recall(id="msg_3") for it'
    index = (
        "## Recall index\nTool results folded out of this context, oldest first. "
        'offload_recall(id="<handle>") pages one back in full; '
        "history_search finds any text of this session.\n- msg_2 bash `ls` (12 tokens)"
    )
    note = "## State at the last compaction\nTodo list:\n[x] read a.py\n[~] fix b.py"
    c.update(recall_index=index, rewrites={"3": stub}, state_note=note)

    assert cli("sessions", "import", "-", input=json.dumps(doc)).exit_code == 0

    with open_manager(store_location()) as m:
        session = m.open_session(doc["id"])
        [cp] = session.list_checkpoints()
        records = session.get_records(after_id=cp.last_message_id)
    assert cp.recall == [RecallEntry("msg_2", "bash", "ls", 12)]
    assert cp.stubs == {3: Stub(STUB_VERBATIM, text=stub)}
    assert cp.state == [TodoItem("read a.py", "completed"), TodoItem("fix b.py", "in_progress")]
    # The view shows what the old checkpoint showed, byte for byte.
    view = build_view(Message("system", "sys"), records, cp)
    assert (
        view.messages[1].content == f"[Conversation Summary]\nGoal: list files\n\n{index}\n\n{note}"
    )
    assert view.messages[2].content == stub


# -- offloaded tool results travel with the session ----------------------------------------


def chat_with_offloaded_output(server) -> tuple[str, str]:
    """A chat whose `seq 1 200000` output was offloaded; returns (session id, offload id)."""
    server.reply_tool_calls([("c1", "bash", json.dumps({"command": "seq 1 200000"}))])
    server.reply_text("That is a lot of numbers.")
    result = cli(
        "chat",
        "--yes",
        "--model",
        "openai/fake",
        "--api-base",
        server.base_url,
        input="count to 200000\n",
    )
    assert result.exit_code == 0, result.output
    marker = [m for m in server.requests[-1]["messages"] if m["role"] == "tool"][0]["content"]
    assert marker.startswith("📂 [offload:")
    with open_manager(store_location()) as m:
        [info] = m.list_sessions()
    return info.id, marker.split("[offload:", 1)[1].split("]", 1)[0]


def recall_in_resumed_chat(server, sid: str, offload_id: str) -> str:
    from tests.support.llm_server import ToolCallsReply

    server.reply(ToolCallsReply(calls=(("c2", "offload_recall", json.dumps({"id": offload_id})),)))
    server.reply_text("Recalled.")
    result = cli(
        "chat",
        "--model",
        "openai/fake",
        "--api-base",
        server.base_url,
        "--resume",
        sid,
        input="show me the start again\n",
    )
    assert result.exit_code == 0, result.output
    return [m for m in server.requests[-1]["messages"] if m["role"] == "tool"][-1]["content"]


@pytest.mark.parametrize("how", ["new-id", "other-home"])
def test_offloaded_outputs_survive_export_and_import(
    llm_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, backend: str
):
    sid, offload_id = chat_with_offloaded_output(llm_server)
    path = tmp_path / "s.json"
    assert cli("sessions", "export", sid, "-f", "json", "-o", str(path)).exit_code == 0
    doc = json.loads(path.read_text())
    [entry] = doc["offloads"]
    assert entry["id"] == offload_id and entry["content"].startswith("1\n2\n3\n")

    if how == "other-home":
        monkeypatch.setenv("HARNESS9_HOME", str(tmp_path / "elsewhere"))
        if backend == "postgres":
            # Every home shares the server: the original must go before its copy comes back.
            assert cli("sessions", "delete", sid, "--yes").exit_code == 0
        imported = cli("sessions", "import", str(path))
    else:
        imported = cli("sessions", "import", str(path), "--new-id")
    assert imported.exit_code == 0, imported.output
    new_sid = imported.stdout.strip()

    recalled = recall_in_resumed_chat(llm_server, new_sid, offload_id)
    assert "no offloaded result" not in recalled
    assert recalled.startswith("1\n2\n3\n4\n")
    # And the copy exports the same offloads again.
    again = json.loads(cli("sessions", "export", new_sid, "-f", "json").stdout)
    assert again["offloads"] == doc["offloads"]


def test_an_export_with_a_hostile_offload_id_is_refused_and_writes_nothing(harness9_home: Path):
    doc = valid_doc()
    doc["offloads"] = [{"id": "../../../etc/passwd", "content": "x"}]
    result = cli("sessions", "import", "-", input=json.dumps(doc))
    assert result.exit_code == 1
    assert result.stderr == (
        "harness9: cannot import -: offload id '../../../etc/passwd' is not ofl_ and 12 hex digits\n"
    )
    assert stored_ids() == set()
