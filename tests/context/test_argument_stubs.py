"""Old calls' long arguments (a write_file's content, an edit_file's strings) become stubs
outside the protected tail, stay a JSON object, and come back whole with offload_recall."""

from __future__ import annotations

import json

from harness9.config import db_path
from harness9.context.pipeline import (
    CompactionPlan,
    CompactionResult,
    evict_by_density,
    stub_old_results,
)
from harness9.context.stubs import stub_of
from harness9.context.view import ModelView, build_view, checkpoint_for
from harness9.schema import Message, ToolCall
from harness9.store import Manager
from harness9.store.codec import details_from_json, details_to_json
from harness9.store.session import STUB_ARGUMENTS, Checkpoint, StoredMessage, Stub
from harness9.tool_output import LONG_ARGUMENT_BYTES, is_argument_stub
from harness9.tools.offload_recall import call_text
from tests.support.cli import chat
from tests.support.llm_server import ToolCallsReply

FILE = "".join(f"line {i:03d} of the module: value_{i} = compute({i})\n" for i in range(600))


def write_call(call_id: str, path: str = "mod.py", content: str = FILE) -> ToolCall:
    return ToolCall(call_id, "write_file", json.dumps({"path": path, "content": content}))


def group(call: ToolCall, result: str = "ok") -> list[Message]:
    return [Message("assistant", "", [call]), Message("tool", result, tool_call_id=call.id)]


def session_with_write(others: int = 3) -> list[Message]:
    """system, a write_file of FILE, then ``others`` small bash groups."""
    msgs = [Message("system", "sys"), Message("user", "rewrite mod.py")]
    msgs += group(write_call("w1"), "wrote 27000 bytes (600 lines) to mod.py")
    for i in range(others):
        msgs += group(ToolCall(f"b{i}", "bash", json.dumps({"command": f"echo {i}"})), f"{i}")
    return msgs


def test_an_old_write_files_content_becomes_a_stub_in_a_json_object_that_keeps_the_path():
    out = stub_old_results(session_with_write(3), keep_groups=3)

    [call] = out[2].tool_calls
    args = json.loads(call.arguments)
    assert args == {"path": "mod.py", "content": f"[stubbed] {len(FILE) // 4} tokens of content"}
    assert (call.id, call.name) == ("w1", "write_file")
    assert stub_of(out[2]) == Stub(STUB_ARGUMENTS, len(FILE) // 4, text="0:content")


def test_the_newest_groups_keep_their_arguments_whole():
    msgs = session_with_write(2)  # the write is one of the newest three groups
    assert stub_old_results(msgs, keep_groups=3)[2] is msgs[2]


def test_an_old_edits_long_strings_are_stubbed_each_by_name_and_short_ones_kept():
    old = FILE[:1000]
    edit = ToolCall(
        "e1",
        "edit_file",
        json.dumps({"path": "mod.py", "old_string": old, "new_string": old + "# more\n"}),
    )
    one_line = ToolCall(
        "e2",
        "edit_file",
        json.dumps({"path": "mod.py", "old_string": "value_7 = 1", "new_string": "value_7 = 2"}),
    )
    msgs = [Message("system", "s"), *group(edit), *group(one_line)]
    msgs += group(ToolCall("b", "bash", '{"command": "ls"}'))

    out = stub_old_results(msgs, keep_groups=1)

    args = json.loads(out[1].tool_calls[0].arguments)
    assert args == {
        "path": "mod.py",
        "old_string": "[stubbed] 250 tokens of old_string",
        "new_string": "[stubbed] 251 tokens of new_string",
    }
    assert out[3] is msgs[3]  # a one-line edit says what it did, in fewer bytes than a stub
    assert len("value_7 = 1") < LONG_ARGUMENT_BYTES


def test_the_checkpoint_keeps_the_stub_and_the_view_names_the_calls_handle():
    msgs = session_with_write(3)
    ids = [None, *range(1, len(msgs))]
    out = stub_old_results(msgs, keep_groups=3)
    plan = CompactionPlan(True, "hybrid:stubs", 1, 7000, 100, 5000)
    cp = checkpoint_for(ModelView(msgs, ids), CompactionResult(out, plan, None, "hybrid:stubs"))

    assert cp is not None and cp.stubs == {2: Stub(STUB_ARGUMENTS, len(FILE) // 4, "", "0:content")}
    stored = Checkpoint(0, "", "hybrid:stubs", 0, 0, 0, 0)
    stored.recall, stored.recall_overflow, stored.stubs, stored.state = details_from_json(
        json.loads(json.dumps(details_to_json(cp)))
    )
    records = [StoredMessage(i, m, 0.0) for i, m in zip(ids[1:], msgs[1:], strict=True)]
    view = build_view(msgs[0], records, stored)

    content = json.loads(view.messages[2].tool_calls[0].arguments)["content"]
    tokens = len(FILE) // 4
    assert content == f'[stubbed] {tokens} tokens of content; offload_recall(id="msg_2") for it'
    assert is_argument_stub(content)
    assert FILE[:40] not in json.dumps([m.to_dict() for m in view.messages])


def test_eviction_stubs_old_arguments_before_any_result():
    msgs = session_with_write(3)
    msgs[3] = Message("tool", "x" * 3000, tool_call_id="w1")  # a large result to evict too

    out = evict_by_density(msgs, keep_groups=3, target_tokens=3000 // 4 + 200)

    assert json.loads(out[2].tool_calls[0].arguments)["content"].startswith("[stubbed] ")
    assert out[3] is msgs[3]  # stubbing the arguments reached the target


def test_recall_shows_a_calls_long_argument_as_plain_text():
    text = call_text(write_call("w1", content="a\nb\n" * 200))
    assert text.startswith('-> write_file({"path": "mod.py"})\n--- content ---\na\nb\na\n')
    assert text.endswith("a\nb\n--- end of content ---")
    short = ToolCall("c", "bash", '{"command": "ls"}')
    assert call_text(short) == '-> bash({"command": "ls"})'


def test_in_chat_an_old_write_is_stubbed_and_its_content_recalled_by_the_handle(llm_server):
    with Manager(db_path()) as m:
        s = m.new_session()
        s.add_messages([Message("user", "rewrite mod.py"), *group(write_call("w1"))])
        for i in range(8):
            call = ToolCall(f"b{i}", "bash", json.dumps({"command": f"cat log{i}"}))
            s.add_messages([*group(call, f"log {i}: " + "z" * 1500), Message("assistant", "ok")])
        sid = s.session_id
    recalled: list[str] = []

    def recall_the_write(body):
        msgs = body["messages"]
        if msgs[-1]["role"] == "user":  # the new turn: recall the old write's content
            call = next(m for m in msgs if m.get("tool_calls") and "w1" in json.dumps(m))
            stub = json.loads(call["tool_calls"][0]["function"]["arguments"])["content"]
            handle = stub.split('id="', 1)[1].split('"', 1)[0]
            recalled.append(stub)
            return ToolCallsReply(calls=(("r1", "offload_recall", json.dumps({"id": handle})),))
        return None

    llm_server.respond_with(recall_the_write)
    llm_server.reply_text("I have the file again.")

    result = chat(
        llm_server, "what did mod.py hold?\n", "--resume", sid, "--context-window", "12000"
    )

    assert result.exit_code == 0, result.output
    [stub] = recalled
    assert (
        stub == f'[stubbed] {len(FILE) // 4} tokens of content; offload_recall(id="msg_2") for it'
    )
    first = llm_server.requests[0]["messages"]
    assert "line 000 of the module" not in json.dumps(first)  # no line of the file is sent
    answer = llm_server.requests[-1]["messages"][-1]
    assert answer["role"] == "tool" and answer["tool_call_id"] == "r1"
    assert answer["content"].startswith(
        '-> write_file({"path": "mod.py"})\n--- content ---\nline 000 of the module'
    )


def test_offload_recall_of_an_old_edit_shows_its_strings_as_the_file_had_them(tmp_path):
    from harness9.tools import OffloadRecallTool, ToolContext

    old = "".join(FILE.splitlines(keepends=True)[:25])  # whole lines, as an edit takes
    args = {"path": "mod.py", "old_string": old, "new_string": old.replace("000", "zero")}
    call = ToolCall("e1", "edit_file", json.dumps(args))
    with Manager(db_path()) as m:
        s = m.new_session()
        s.add_messages([Message("user", "rename"), *group(call, "edited mod.py: replaced line 1")])
        ctx = ToolContext(workdir=tmp_path, session=s, session_id=s.session_id)
        result = OffloadRecallTool(None).run({"id": "msg_2"}, ctx)

    assert not result.is_error
    assert result.content == (
        '-> edit_file({"path": "mod.py"})\n'
        f"--- old_string ---\n{old}--- end of old_string ---\n"
        f"--- new_string ---\n{args['new_string']}--- end of new_string ---"
    )
