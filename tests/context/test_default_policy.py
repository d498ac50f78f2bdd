"""The default context policy end to end, through `harness9` and the scripted server.

Nothing the agent saw becomes unreachable (recall handles, history_search); requests
are byte-for-byte prefix extensions between compactions; `compact` stores exactly
what chat sends next; every place that shows a compaction shows the same figures.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from harness9.cli import app
from harness9.config import db_path
from harness9.context.stubs import render_stub
from harness9.context.view import build_view, render_instructions, summary_text
from harness9.schema import Message, ToolCall
from harness9.store import Manager
from harness9.store.session import RecallEntry
from tests.support.llm_server import TextReply, ToolCallsReply, is_summary_request

runner = CliRunner()
HANDLE_RE = re.compile(r"\b(msg_\d+|ofl_[0-9a-f]{12})\b")


def chat(server, stdin: str, *args: str, work=None):
    argv = ["chat", "--model", "openai/test-model", "--api-base", server.base_url, "--yes"]
    if work is not None:
        argv += ["--workdir", str(work)]
    return runner.invoke(app, [*argv, *args], input=stdin)


def chat_requests(server) -> list[dict]:
    return [b for b in server.requests if not is_summary_request(b)]


def log_lines(tag: str, n: int = 60) -> str:
    """Distinct text (a stream repeating one chunk is rejected by litellm)."""
    return "".join(f"{tag} line {i:03d} value={i * 7919 % 1000:03d}\n" for i in range(n))


class Script:
    """Plays tool calls from a list, then a text reply, per user turn; summaries say little."""

    def __init__(self, turns: list[list[tuple[str, dict]]]) -> None:
        self.turns = turns
        self.turn = -1
        self.step = 0
        self.n = 0
        self.last_user = None

    def __call__(self, body):
        if is_summary_request(body):
            return TextReply("**Goal:** keep going.")
        users = [m for m in body["messages"] if m["role"] == "user"]
        latest = users[-1]["content"] if users else None
        if latest != self.last_user and body["messages"][-1]["role"] == "user":
            self.last_user, self.turn, self.step = latest, self.turn + 1, 0
        steps = self.turns[self.turn] if 0 <= self.turn < len(self.turns) else []
        if self.step >= len(steps):
            return TextReply("done")
        name, args = steps[self.step]
        self.step += 1
        self.n += 1
        return ToolCallsReply(((f"call_{self.n}", name, json.dumps(args)),))


def test_requests_between_compactions_only_append_even_when_todos_change(llm_server, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    for i in range(12):
        # 70 lines: 455 tokens, under a 6K window's inline limit (500): kept until compacted.
        (work / f"f{i}.log").write_text(log_lines(f"file{i}", 70))
    todos = lambda k: {  # noqa: E731
        "todos": [
            {"content": f"step {j}", "status": "completed" if j < k else "pending"}
            for j in range(3)
        ]
    }
    turn = []
    for i in range(12):
        turn.append(("bash", {"command": f"cat f{i}.log"}))
        if i % 4 == 3:
            turn.append(("write_todos", todos(i // 4)))
    llm_server.respond_with(Script([turn]))

    result = chat(llm_server, "read the logs\n", "--context-window", "6000", work=work)

    assert result.exit_code == 0, result.output
    reqs = chat_requests(llm_server)
    with Manager(db_path()) as m:
        [info] = m.list_sessions()
        checkpoints = m.open_session(info.id).list_checkpoints()
    assert checkpoints, "the window is small enough that the session compacts"
    breaks = 0
    for prev, cur in zip(reqs, reqs[1:], strict=False):
        if cur["messages"][: len(prev["messages"])] != prev["messages"]:
            breaks += 1
    # Every break in the prefix is a stored compaction; todos changed three times.
    assert 1 <= breaks <= len(checkpoints)
    # The system message changes only with a checkpoint (which repeats the user's folded
    # messages after it), and the todo list is never in it.
    systems = {r["messages"][0]["content"] for r in reqs}
    assert len(systems) <= len(checkpoints) + 1
    assert not any("step 0" in text for text in systems)


@pytest.mark.parametrize("strategy", ["budget", "hybrid"])
def test_a_result_folded_by_three_compactions_is_recalled_by_handle_and_found_by_search(
    llm_server, tmp_path, strategy
):
    work = tmp_path / "w"
    work.mkdir()
    (work / "first.log").write_text(log_lines("intro", 30) + "the secret is zebra-4242\n")
    for i in range(30):
        (work / f"f{i}.log").write_text(log_lines(f"file{i}", 40))
    turns = [[("bash", {"command": "cat first.log"})]]
    turns += [
        [("bash", {"command": f"cat f{j}.log"}) for j in range(k, k + 5)]
        for k in (0, 5, 10, 15, 20, 25)
    ]
    llm_server.respond_with(Script(turns))
    stdin = "".join(f"turn {k}\n" for k in range(len(turns)))

    # 6K: about 5.2K once the tool definitions (counted with every request) are set aside.
    result = chat(llm_server, stdin, "--context-window", "6000", "--strategy", strategy, work=work)

    assert result.exit_code == 0, result.output
    with Manager(db_path()) as m:
        [info] = m.list_sessions()
        sess = m.open_session(info.id)
        checkpoints = sess.list_checkpoints()
        [secret_id] = [r.id for r in sess.get_records() if "zebra-4242" in r.message.content]
    # Out of the context since the first of three or more compactions: folded (its
    # handle carried by each checkpoint's index) or, with hybrid, stubbed (the handle
    # in the stub, carried by each checkpoint's stubs).
    assert len(checkpoints) >= 3
    if strategy == "budget":
        assert all(c.last_message_id > secret_id for c in checkpoints)
        assert f"msg_{secret_id} bash `cat first.log`" in summary_text(checkpoints[-1])
        assert RecallEntry(f"msg_{secret_id}", "bash", "cat first.log", 1) in [
            replace(e, tokens=1) for e in checkpoints[-1].recall
        ]
    else:  # stubbed first, folded once stubs are not enough
        assert all(
            c.last_message_id > secret_id
            or f'id="msg_{secret_id}"' in render_stub(c.stubs[secret_id], secret_id)
            for c in checkpoints
        )
    last = chat_requests(llm_server)[-1]
    assert "zebra-4242" not in json.dumps(last["messages"])

    # A resumed turn: the model searches, then recalls the handle the index gives.
    seen: list[dict] = []

    def agent(body):
        if is_summary_request(body):
            return TextReply("**Goal:** keep going.")
        seen.append(body)
        tool_msgs = [m for m in body["messages"] if m["role"] == "tool"]
        if len(seen) == 1:
            text = json.dumps(body["messages"])
            found = re.search(r"- (msg_\d+) bash `cat first.log`", text) or re.search(
                rf'offload_recall\(id=\\"(msg_{secret_id})\\"\)', text
            )
            handle = found.group(1)
            return ToolCallsReply(
                (
                    ("s1", "history_search", json.dumps({"query": "zebra"})),
                    ("r1", "offload_recall", json.dumps({"id": handle})),
                )
            )
        return TextReply(tool_msgs[-1]["content"][:40])

    llm_server.respond_with(agent)
    result = chat(llm_server, "what was the secret?\n", "--resume", info.id, "--strategy", strategy)

    assert result.exit_code == 0, result.output
    results = {m["tool_call_id"]: m["content"] for m in seen[-1]["messages"] if m["role"] == "tool"}
    assert re.search(
        rf"msg_{secret_id} \[tool result, (folded|stubbed)\] the secret is zebra-4242",
        results["s1"],
    )
    assert "the secret is zebra-4242" in results["r1"]


def _tool_session(n: int = 12) -> str:
    with Manager(db_path()) as m:
        s = m.new_session()
        for i in range(n):
            s.add_messages(
                [
                    Message("user", f"step {i}"),
                    Message(
                        "assistant", "", [ToolCall(f"c{i}", "bash", f'{{"command": "cat f{i}"}}')]
                    ),
                    Message("tool", log_lines(f"out{i}", 50), tool_call_id=f"c{i}"),
                    Message("assistant", f"done {i}"),
                ]
            )
        return s.session_id


@pytest.mark.parametrize("strategy", ["hybrid", "summarize", "budget", "evict", "window"])
def test_compact_stores_what_the_resumed_chat_sends(llm_server, strategy):
    # A forced window compaction keeps the last 100 messages: give it more than that.
    sid = _tool_session(30 if strategy == "window" else 12)
    llm_server.respond_with(
        lambda body: "**Goal:** a summary." if is_summary_request(body) else None
    )
    args = [
        "--model",
        "openai/test-model",
        "--api-base",
        llm_server.base_url,
        "--strategy",
        strategy,
    ]

    done = runner.invoke(
        app, ["compact", "--session", sid, "--force", "--json", "--context-window", "6000", *args]
    )

    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["compacted"] is True
    llm_server.reply_text("ok")
    result = runner.invoke(app, ["chat", "--resume", sid, "--yes", *args], input="next\n")
    assert result.exit_code == 0, result.output
    sent = chat_requests(llm_server)[-1]["messages"]
    with Manager(db_path()) as m:
        sess = m.open_session(sid)
        cp = sess.latest_checkpoint()
        records = sess.get_records(after_id=cp.last_message_id)
    # The system message is the prompt, then the folded user messages the checkpoint keeps.
    notes = "\n\n" + render_instructions(cp.instructions) if cp.instructions else ""
    assert sent[0]["content"].endswith(notes)
    system = Message("system", sent[0]["content"][: len(sent[0]["content"]) - len(notes)])
    view = build_view(system, records, cp)
    assert view.messages[-1] == Message("assistant", "ok")  # the reply, stored after the call
    assert [(x["role"], x.get("content") or "") for x in sent] == [
        (v.role, v.content) for v in view.messages[:-1]
    ]
    # Something was folded (the checkpoint covers old messages) or stubbed (and sent so).
    stubs = {render_stub(s, k) for k, s in cp.stubs.items()}
    assert cp.last_message_id > 0 or stubs & {x.get("content") for x in sent}


@pytest.mark.parametrize("strategy", ["budget", "hybrid", "evict"])
def test_dry_run_figures_equal_the_notice_and_the_checkpoint(llm_server, strategy):
    sid = _tool_session()
    # 8K: the three newest tool groups, the stubs, the system prompt and the tool
    # definitions fit the 40 % target, so stubbing alone is enough.
    args = ["--session", sid, "--json", "--force", "--context-window", "8000"]
    args += ["--strategy", strategy]
    args += ["--model", "openai/test-model", "--api-base", llm_server.base_url]

    dry = json.loads(runner.invoke(app, ["compact", "--dry-run", *args]).stdout)
    done = json.loads(runner.invoke(app, ["compact", *args]).stdout)
    with Manager(db_path()) as m:
        [cp] = m.open_session(sid).list_checkpoints()

    assert done["compacted"] is True and not llm_server.requests  # no model was needed
    assert (dry["tokens_before"], dry["tokens_after"]) == (
        done["tokens_before"],
        done["tokens_after"],
    )
    assert (cp.tokens_before, cp.tokens_after) == (done["tokens_before"], done["tokens_after"])
    shown = runner.invoke(app, ["sessions", "show", sid, "--json"])
    [shown_cp] = json.loads(shown.stdout)["checkpoints"]
    assert (shown_cp["tokens_before"], shown_cp["tokens_after"]) == (
        cp.tokens_before,
        cp.tokens_after,
    )


def test_compact_uses_the_model_and_window_the_session_last_chatted_with(llm_server):
    llm_server.reply_text("hello")
    result = chat(llm_server, "hi\n", "--context-window", "4000")
    assert result.exit_code == 0, result.output

    dry = runner.invoke(app, ["compact", "--dry-run", "--json"])

    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.stdout)
    assert plan["context_window"] == 4000 and plan["threshold"] == 3200
    flag = json.loads(
        runner.invoke(app, ["compact", "--dry-run", "--json", "--context-window", "8000"]).stdout
    )
    assert flag["context_window"] == 8000  # a flag still wins


def test_offload_recall_pages_a_message_handle_of_this_session_only(llm_server, tmp_path):
    sid = _tool_session(2)
    other = _tool_session(1)
    with Manager(db_path()) as m:
        [rec] = [r for r in m.open_session(sid).get_records() if r.message.role == "tool"][:1]
        [foreign] = [r for r in m.open_session(other).get_records() if r.message.role == "tool"]
    calls = (
        ("r1", "offload_recall", json.dumps({"id": f"msg_{rec.id}", "offset": 10, "limit": 30})),
        ("r2", "offload_recall", json.dumps({"id": f"msg_{foreign.id}"})),
    )
    llm_server.reply_tool_calls(list(calls))
    llm_server.reply_text("ok")

    result = chat(llm_server, "recall\n", "--resume", sid)

    assert result.exit_code == 0, result.output
    results = {
        m["tool_call_id"]: m["content"]
        for m in llm_server.requests[-1]["messages"]
        if m["role"] == "tool"
    }
    assert results["r1"].startswith(rec.message.content[10:40])
    assert "offset=40" in results["r1"]  # paged, with where to continue
    assert results["r2"].startswith("error:") and "no message" in results["r2"]


def test_resume_sends_the_same_bytes_the_live_session_would_have(llm_server, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "a.log").write_text(log_lines("a", 20))
    llm_server.reply_tool_calls([("c1", "bash", json.dumps({"command": "cat a.log"}))])
    llm_server.reply_text("read it")
    assert chat(llm_server, "read a.log\n", work=work).exit_code == 0
    with Manager(db_path()) as m:
        [info] = m.list_sessions()
    llm_server.reply_text("still here")

    result = chat(llm_server, "and now?\n", "--resume", info.id, work=work)

    assert result.exit_code == 0, result.output
    before, after = llm_server.requests[-2], llm_server.requests[-1]
    assert after["messages"][: len(before["messages"])] == before["messages"]
    assert [m.get("content") for m in after["messages"][len(before["messages"]) :]] == [
        "read it",
        "and now?",
    ]


def test_context_after_a_compaction_shows_the_checkpoints_figure(llm_server):
    from harness9.tokens import format_token_count

    sid = _tool_session()
    args = ["--model", "openai/test-model", "--api-base", llm_server.base_url]
    args += ["--context-window", "6000", "--strategy", "budget"]
    done = runner.invoke(app, ["compact", "--session", sid, "--force", "--json", *args])
    assert done.exit_code == 0, done.output

    result = runner.invoke(app, ["chat", "--resume", sid, *args], input="/context\n")

    assert result.exit_code == 0, result.output
    after = json.loads(done.stdout)["tokens_after"]
    total = next(x for x in result.stderr.splitlines() if x.strip().startswith("total"))
    assert total.split()[-1] == format_token_count(after)
