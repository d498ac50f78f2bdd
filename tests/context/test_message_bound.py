"""The view is bounded in messages too: old tool groups fold without a model call.

Through `harness9 chat` and the scripted server: a session of many small tool calls
(far under the token threshold of its window) never sends more than
``compaction.max_messages`` messages, folds without any summary request, and every
folded result stays recallable by its handle and findable by ``history_search``.
"""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from harness9.cli import app
from harness9.config import db_path
from harness9.context.pipeline import FOLDED_HEADING, MessageBound
from harness9.context.view import summary_text
from harness9.schema import Message, ToolCall
from harness9.store import Manager
from tests.support.llm_server import TextReply, ToolCallsReply

runner = CliRunner()
CALLS = 50
BOUND = 30


def chat(server, stdin: str, work, *args: str):
    argv = ["chat", "--model", "openai/test-model", "--api-base", server.base_url, "--yes"]
    argv += ["--workdir", str(work), "--context-window", "128000", *args]
    return runner.invoke(app, argv, input=stdin)


class Reader:
    """Reads f0.txt … f<n-1>.txt, ten per user turn, then says which it read."""

    def __init__(self, n: int) -> None:
        self.n, self.done, self.in_turn = n, 0, 0

    def __call__(self, body):
        if not body.get("tools"):
            raise AssertionError("a fold must not ask the model for a summary")
        if self.done >= self.n or self.in_turn >= 10:
            self.in_turn = 0
            return TextReply(f"read {self.done} files")
        args = json.dumps({"path": f"f{self.done}.txt"})
        self.done += 1
        self.in_turn += 1
        return ToolCallsReply(((f"call_{self.done}", "read_file", args),))


@pytest.fixture
def long_session(llm_server, tmp_path, monkeypatch):
    work = tmp_path / "w"
    work.mkdir()
    for i in range(CALLS):
        (work / f"f{i}.txt").write_text(f"file {i} holds the word marker{i:03d}x\n" * 3)
    monkeypatch.setenv("HARNESS9_MAX_MESSAGES", str(BOUND))
    llm_server.respond_with(Reader(CALLS))
    stdin = "".join(f"turn {k}: read the next files\n" for k in range(CALLS // 10 + 1))
    result = chat(llm_server, stdin, work)
    assert result.exit_code == 0, result.output
    with Manager(db_path()) as m:
        [info] = m.list_sessions()
        sess = m.open_session(info.id)
        records = sess.get_records()
        checkpoints = sess.list_checkpoints()
    return work, info.id, records, checkpoints


def test_no_request_carries_more_messages_than_the_bound(long_session, llm_server):
    _, _, records, checkpoints = long_session
    sizes = [len(body["messages"]) for body in llm_server.requests]
    assert len(records) > 3 * BOUND  # the log itself is never cut
    assert max(sizes) <= BOUND
    assert checkpoints and {c.strategy for c in checkpoints} == {"fold"}
    # Between folds the requests only append (one cache break per fold).
    breaks = sum(
        1
        for prev, cur in zip(llm_server.requests, llm_server.requests[1:], strict=False)
        if cur["messages"][: len(prev["messages"])] != prev["messages"]
    )
    assert breaks == len(checkpoints)


def test_the_users_words_of_folded_turns_stay_in_the_request(long_session, llm_server):
    _, _, _, checkpoints = long_session
    last = llm_server.requests[-1]["messages"]
    summary = last[1]["content"]
    assert summary.startswith("[Conversation Summary]\n") and FOLDED_HEADING in summary
    assert "User: turn 0: read the next files" in summary
    assert "Assistant: read 10 files" in summary
    assert checkpoints[-1].last_message_id > 0


def test_every_folded_result_is_recalled_by_handle_and_found_by_search(long_session, llm_server):
    work, session_id, records, checkpoints = long_session
    folded_upto = checkpoints[-1].last_message_id
    folded = [r for r in records if r.message.role == "tool" and r.id <= folded_upto]
    assert len(folded) >= 20
    index = summary_text(checkpoints[-1])
    listed = re.findall(r"- (msg_\d+) read_file `(f\d+\.txt)`", index)
    assert listed, index
    # Every folded result is in the index, or counted there and left to history_search.
    overflow = re.search(r"… and (\d+) earlier tool results not listed", index)
    assert len(listed) + (int(overflow.group(1)) if overflow else 0) == len(folded)
    probes = [folded[0], folded[len(folded) // 2], folded[-1]]
    seen: list[dict] = []

    def agent(body):
        seen.append(body)
        if len(seen) > 1:
            return TextReply("found them")
        calls = []
        for k, rec in enumerate(probes):
            word = re.search(r"marker\d{3}x", rec.message.content).group(0)
            calls.append((f"s{k}", "history_search", json.dumps({"query": word})))
            calls.append((f"r{k}", "offload_recall", json.dumps({"id": f"msg_{rec.id}"})))
        return ToolCallsReply(tuple(calls))

    llm_server.respond_with(agent)
    result = chat(llm_server, "what did the first files hold?\n", work, "--resume", session_id)

    assert result.exit_code == 0, result.output
    results = {m["tool_call_id"]: m["content"] for m in seen[-1]["messages"] if m["role"] == "tool"}
    for k, rec in enumerate(probes):
        first_line = rec.message.content.splitlines()[0]
        assert first_line in results[f"r{k}"]
        assert f"msg_{rec.id}" in results[f"s{k}"]


def test_a_fold_keeps_the_newest_messages_whole_and_is_a_valid_tool_sequence():
    msgs = [Message("system", "s")]
    for i in range(30):
        msgs += [
            Message("assistant", "", [ToolCall(f"c{i}", "bash", "{}")]),
            Message("tool", f"out {i}", tool_call_id=f"c{i}"),
        ]
    bound = MessageBound(max_messages=40, keep_messages=20)
    before = list(msgs)

    result = bound.compact(msgs)

    assert msgs == before  # pure
    assert result.plan.would_compact and result.strategy == "fold"
    assert result.messages[0] == msgs[0]
    assert result.messages[1:] == msgs[-20:]  # no words to carry: no summary message
    assert result.summary == ""
    assert not bound.plan(msgs[:40]).would_compact


def test_the_bound_is_a_setting_and_a_bad_value_is_one_clear_error(monkeypatch):
    from harness9.config import context_options
    from harness9.errors import ConfigError

    assert context_options({}).max_messages == 400
    assert context_options({"compaction": {"max_messages": 0}}).max_messages == 0  # off
    monkeypatch.setenv("HARNESS9_MAX_MESSAGES", "5")
    with pytest.raises(
        ConfigError, match=r"HARNESS9_MAX_MESSAGES must be 0 \(off\) or at least 20, got 5"
    ):
        context_options({})
