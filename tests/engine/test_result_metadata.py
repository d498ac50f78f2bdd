"""The engine stores a tool result with its run facts (the shell's exit code, whether it
timed out) as data; a model is sent the result exactly as before, without them.

The facts' round trip through both stores, forks and export/import is in
tests/store/test_result_metadata.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness9.config import store_location
from harness9.schema import Message, result_metadata
from harness9.store.backend import open_store
from tests.support.cli import chat, cli
from tests.support.llm_server import TextReply, ToolCallsReply

# Prints a line of its own that looks like the tool's trailer, then outlives its timeout.
SLOW = "seq 1 1500; echo 'exit code: 0'; sleep 30"


def tool_records(sid: str | None = None) -> list:
    with open_store(store_location()) as m:
        sid = sid or m.list_sessions()[0].id
        return [r for r in m.open_session(sid).get_records() if r.message.role == "tool"]


def test_result_metadata_keeps_the_exit_code_and_timed_out_only():
    facts = {"exit_code": 2, "timed_out": False, "bytes": 10, "path": "a.py"}
    assert result_metadata(facts) == {"exit_code": 2, "timed_out": False}
    assert result_metadata({"exit_code": None, "timed_out": True}) == {
        "exit_code": None,
        "timed_out": True,
    }
    assert result_metadata({"exit_code": True, "timed_out": "no"}) == {}  # wrong types
    assert result_metadata({"ran": False}) == {}


def test_a_message_with_facts_is_sent_and_compared_as_one_without():
    plain = Message("tool", "out\nexit code: 1", tool_call_id="c1")
    with_facts = Message("tool", plain.content, tool_call_id="c1", metadata={"exit_code": 1})
    assert with_facts.to_dict() == {
        "role": "tool",
        "content": "out\nexit code: 1",
        "tool_call_id": "c1",
    }
    assert with_facts == plain


def test_chat_stores_a_commands_exit_code_with_its_result(llm_server, tmp_path: Path):
    llm_server.reply_tool_calls([("c1", "bash", json.dumps({"command": "echo hi; exit 3"}))])
    llm_server.reply_text("it exited 3")

    result = chat(llm_server, "run it\n", "--yes", workdir=tmp_path)

    assert result.exit_code == 0, result.output
    [rec] = tool_records()
    assert rec.message.content == "hi\nexit code: 3"
    assert rec.message.metadata == {"exit_code": 3, "timed_out": False}


def test_the_model_is_sent_the_result_without_its_facts(llm_server, tmp_path: Path):
    llm_server.reply_tool_calls([("c1", "bash", json.dumps({"command": "echo hi; exit 3"}))])
    llm_server.reply_text("it exited 3")

    chat(llm_server, "run it\n", "--yes", workdir=tmp_path)

    sent = llm_server.requests[1]["messages"]
    assert sent[-1] == {"role": "tool", "content": "hi\nexit code: 3", "tool_call_id": "c1"}
    assert "metadata" not in json.dumps(llm_server.requests[1])


def test_a_declined_command_is_stored_with_no_facts(llm_server, tmp_path: Path):
    # Piped stdin cannot approve: the command never ran, so there is no exit code.
    llm_server.reply_tool_calls([("c1", "bash", json.dumps({"command": "rm -rf build"}))])
    llm_server.reply_text("not run")

    chat(llm_server, "clean\n", workdir=tmp_path)

    [rec] = tool_records()
    assert rec.message.metadata == {}


def test_a_command_that_timed_out_after_printing_exit_code_0_is_evicted_as_timed_out(
    llm_server, tmp_path: Path
):
    llm_server.reply_tool_calls([("c1", "bash", json.dumps({"command": SLOW, "timeout": 1}))])
    for n in (2, 3, 4):  # three newer tool calls: eviction keeps the newest three
        llm_server.reply_tool_calls([(f"c{n}", "bash", json.dumps({"command": f"echo {n}"}))])
    llm_server.reply_text("done")
    assert chat(llm_server, "go\n", "--yes", workdir=tmp_path).exit_code == 0
    [first, *_] = tool_records()
    assert first.message.metadata == {"exit_code": None, "timed_out": True}

    compacted = cli("compact", "--strategy", "evict", "--force", "--json")
    assert compacted.exit_code == 0, compacted.output
    llm_server.reply_text("resumed")
    with open_store(store_location()) as m:
        sid = m.list_sessions()[0].id
    assert chat(llm_server, "next\n", "--resume", sid, workdir=tmp_path).exit_code == 0

    [shown] = [
        m["content"] for m in llm_server.requests[-1]["messages"] if m.get("tool_call_id") == "c1"
    ]
    assert shown.startswith(f"[evicted] bash `{SLOW}`: timed out, 1502 lines")


def sub_agent_runs_a_failing_command(body: dict):
    """The parent hands a `task` to a sub-agent, which runs `exit 4` and reports it."""
    messages = body["messages"]
    if "You are a sub-agent" not in messages[0]["content"]:
        if messages[-1]["role"] == "user":
            args = json.dumps({"prompt": "Run the checks.", "description": "checks"})
            return ToolCallsReply((("t1", "task", args),))
        return TextReply("the checks failed")
    if messages[-1]["role"] == "user":
        return ToolCallsReply((("s1", "bash", json.dumps({"command": "exit 4"})),))
    return TextReply("exit 4")


def test_a_sub_agents_session_stores_its_commands_exit_code(llm_server, tmp_path: Path):
    llm_server.respond_with(sub_agent_runs_a_failing_command)

    assert chat(llm_server, "check\n", "--yes", workdir=tmp_path).exit_code == 0

    parent = json.loads(cli("sessions", "list", "--json").stdout)[0]["id"]
    [child] = json.loads(cli("sessions", "show", parent, "--json").stdout)["children"]
    shown = json.loads(cli("sessions", "show", child["id"], "--json").stdout)
    assert [m["metadata"] for m in shown["messages"] if m["role"] == "tool"] == [
        {"exit_code": 4, "timed_out": False}
    ]
