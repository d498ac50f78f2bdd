"""The `task` tool end to end: sub-agents through `harness9 chat` and the scripted server.

The server tells the parent's requests from the sub-agents' by the system prompt (a
sub-agent's says it is one) and answers each by its content, so the tests hold
whatever order the concurrent requests arrive in.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import replace

from harness9.config import db_path
from harness9.store import Manager
from tests.support.cli import chat, cli, write_config
from tests.support.llm_server import TextReply, ToolCallsReply

SUB_MARK = "You are a sub-agent"


def is_sub(body: dict) -> bool:
    return SUB_MARK in body["messages"][0]["content"]


def tool_names(body: dict) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


def task_call(call_id: str, prompt: str, description: str) -> tuple[str, str, str]:
    return (call_id, "task", json.dumps({"prompt": prompt, "description": description}))


def last_tool_text(body: dict) -> str:
    return body["messages"][-1]["content"] if body["messages"][-1]["role"] == "tool" else ""


class Family:
    """The parent sends two `task` calls; each sub-agent reads its file and answers."""

    def __init__(self, files: dict[str, str], *, sub_delay: float = 0.0) -> None:
        self.files = files  # the prompt word -> the file the sub-agent reads
        self.sub_delay = sub_delay
        self.lock = threading.Lock()
        self.active = 0
        self.max_active = 0
        self.spans: list[tuple[float, float]] = []  # each sub-agent call: (start, end)
        self.all_running = threading.Event()  # every sub-agent is inside a model call at once

    def __call__(self, body: dict):
        if not body.get("tools"):
            return TextReply("summary")
        if is_sub(body):
            return self.sub(body)
        last = body["messages"][-1]
        if last["role"] == "user":
            calls = tuple(
                task_call(f"call_{w}", f"Read {path} and report its secret ({w}).", f"find {w}")
                for w, path in self.files.items()
            )
            return ToolCallsReply(calls, usage=(300, 5))
        answers = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        return TextReply("Parent summary: " + " | ".join(answers), usage=(400, 30))

    def sub(self, body: dict):
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            if self.active == len(self.files):
                self.all_running.set()
        start = time.monotonic()
        try:
            time.sleep(self.sub_delay)
            task = body["messages"][1]["content"]
            word = task.rsplit("(", 1)[1].rstrip(").")
            if body["messages"][-1]["role"] == "user":
                args = json.dumps({"path": self.files[word]})
                return ToolCallsReply(((f"read_{word}", "read_file", args),), usage=(1000, 10))
            content = last_tool_text(body)
            secret = next(line for line in content.splitlines() if "SECRET" in line)
            return TextReply(f"{word}: {secret.split('SECRET=')[1].strip()}", usage=(1200, 20))
        finally:
            with self.lock:
                self.active -= 1
                self.spans.append((start, time.monotonic()))


def make_files(work, n_lines: int = 200) -> dict[str, str]:
    work.mkdir(exist_ok=True)
    files = {}
    for word, secret in (("alpha", "a1b2"), ("beta", "c3d4")):
        body = "".join(f"{word} filler line {i} lorem ipsum\n" for i in range(n_lines))
        (work / f"{word}.txt").write_text(body + f"SECRET={secret}\n")
        files[word] = f"{word}.txt"
    return files


def test_the_parent_gets_each_answer_and_none_of_the_files_read(llm_server, tmp_path):
    work = tmp_path / "w"
    files = make_files(work)
    llm_server.respond_with(Family(files))
    result = chat(llm_server, "find the secrets\n", "--yes", "--no-stream", workdir=work)
    assert result.exit_code == 0, result.output
    assert "Parent summary: alpha: a1b2 | beta: c3d4" in result.stdout
    parent = [b for b in llm_server.requests if b.get("tools") and not is_sub(b)]
    final = parent[-1]
    tool_results = [m for m in final["messages"] if m["role"] == "tool"]
    # In call order, each paired with its call, whatever order the sub-agents ended in.
    assert [(m["tool_call_id"], m["content"]) for m in tool_results] == [
        ("call_alpha", "alpha: a1b2"),
        ("call_beta", "beta: c3d4"),
    ]
    sent = json.dumps(final)
    assert "filler line" not in sent  # the files the sub-agents read stayed with them
    subs = [b for b in llm_server.requests if is_sub(b)]
    assert len(subs) == 4
    assert all("task" not in tool_names(b) for b in subs)
    assert all("read_file" in tool_names(b) for b in subs)
    assert "task" in tool_names(parent[0])


def test_two_sub_agents_run_at_the_same_time(llm_server, tmp_path):
    work = tmp_path / "w"
    family = Family(make_files(work), sub_delay=0.5)
    llm_server.respond_with(family)
    result = chat(llm_server, "find the secrets\n", "--yes", "--no-stream", workdir=work)
    assert result.exit_code == 0, result.output
    assert family.max_active == 2
    # Two sub-agents of two 0.5 s calls each: ~1 s side by side, 2 s one after the other.
    took = max(end for _, end in family.spans) - min(start for start, _ in family.spans)
    assert took < 1.8, took


def test_the_store_shows_the_family(llm_server, tmp_path):
    work = tmp_path / "w"
    llm_server.respond_with(Family(make_files(work)))
    assert chat(llm_server, "find the secrets\n", "--yes", workdir=work).exit_code == 0
    with Manager(db_path()) as m:
        (parent,) = m.list_sessions()
        everything = m.list_sessions(children=True)
        kids = m.children(parent.id)
    assert len(everything) == 3
    assert sorted(link.tool_call_id for link, _ in kids) == ["call_alpha", "call_beta"]
    assert sorted(link.description for link, _ in kids) == ["find alpha", "find beta"]
    listed = json.loads(cli("sessions", "list", "--json").stdout)
    assert [row["id"] for row in listed] == [parent.id]
    assert listed[0]["parent_id"] is None
    every = json.loads(cli("sessions", "list", "--all", "--json").stdout)
    assert sorted(r["parent_id"] or "" for r in every) == ["", parent.id, parent.id]
    shown = json.loads(cli("sessions", "show", parent.id[:8], "--json").stdout)
    assert sorted(c["tool_call_id"] for c in shown["children"]) == ["call_alpha", "call_beta"]
    child_id = shown["children"][0]["id"]
    child = json.loads(cli("sessions", "show", child_id, "--json").stdout)
    assert child["parent_id"] == parent.id
    assert [m["role"] for m in child["messages"]] == ["user", "assistant", "tool", "assistant"]
    listed_all = cli("sessions", "list", "--all").stdout
    assert listed_all.count(f"↳ sub-agent of {parent.id[:8]}: Read ") == 2
    assert "↳" not in cli("sessions", "list").stdout
    human = cli("sessions", "show", parent.id).stdout
    assert "find alpha" in human and child_id[:8] in human
    of_child = cli("sessions", "show", child_id).stdout
    assert f"Sub-agent of session {parent.id} (its call call_" in of_child


def test_the_parents_usage_includes_its_sub_agents_and_shows_their_part(llm_server, tmp_path):
    work = tmp_path / "w"
    llm_server.respond_with(Family(make_files(work)))
    assert chat(llm_server, "find the secrets\n/context\n", "--yes", workdir=work).exit_code == 0
    (row,) = json.loads(cli("sessions", "list", "--json").stdout)
    usage = row["usage"]
    # The parent's 2 calls (300 + 400 in) and 2 sub-agents x 2 calls (1000 + 1200 in).
    assert (usage["model_calls"], usage["input_tokens"], usage["output_tokens"]) == (
        6,
        700 + 2 * 2200,
        35 + 2 * 30,
    )
    sub = usage["subagents"]
    assert (sub["model_calls"], sub["input_tokens"], sub["output_tokens"]) == (4, 4400, 60)
    shown = json.loads(cli("sessions", "show", row["id"], "--json").stdout)
    assert shown["usage"] == usage
    kid = shown["children"][0]["id"]
    own = json.loads(cli("sessions", "show", kid, "--json").stdout)["usage"]
    assert (own["model_calls"], own["input_tokens"]) == (2, 2200)


def test_context_shows_the_sub_agents_part(llm_server, tmp_path):
    work = tmp_path / "w"
    llm_server.respond_with(Family(make_files(work)))
    result = chat(llm_server, "find the secrets\n/context\n", "--yes", workdir=work)
    assert result.exit_code == 0
    line = next(x for x in result.stderr.splitlines() if "of which sub-agents" in x)
    assert "4 calls, 4.4K in, 60 out" in line


def test_deleting_the_parent_removes_its_sub_agents_sessions(llm_server, tmp_path):
    work = tmp_path / "w"
    llm_server.respond_with(Family(make_files(work)))
    assert chat(llm_server, "find the secrets\n", "--yes", workdir=work).exit_code == 0
    (parent,) = json.loads(cli("sessions", "list", "--json").stdout)
    assert len(json.loads(cli("sessions", "list", "--all", "--json").stdout)) == 3
    result = cli("sessions", "delete", parent["id"], "--yes")
    assert result.exit_code == 0 and "Deleted 1 session." in result.stdout
    assert json.loads(cli("sessions", "list", "--all", "--json").stdout) == []
    with Manager(db_path()) as m:
        assert m.search("SECRET") == []


def test_search_finds_what_a_sub_agent_read(llm_server, tmp_path):
    work = tmp_path / "w"
    llm_server.respond_with(Family(make_files(work)))
    assert chat(llm_server, "find the secrets\n", "--yes", workdir=work).exit_code == 0
    hits = json.loads(cli("sessions", "search", "SECRET=a1b2", "--json").stdout)
    (parent,) = json.loads(cli("sessions", "list", "--json").stdout)
    kids = json.loads(cli("sessions", "show", parent["id"], "--json").stdout)["children"]
    assert {h["session_id"] for h in hits} & {k["id"] for k in kids}


def test_a_child_session_can_be_resumed(llm_server, tmp_path):
    work = tmp_path / "w"
    llm_server.respond_with(Family(make_files(work)))
    assert chat(llm_server, "find the secrets\n", "--yes", workdir=work).exit_code == 0
    (parent,) = json.loads(cli("sessions", "list", "--json").stdout)
    kid = json.loads(cli("sessions", "show", parent["id"], "--json").stdout)["children"][0]
    llm_server.respond_with(lambda body: TextReply("it was a1b2", usage=(50, 5)))
    result = chat(llm_server, "which secret was it?\n", "--resume", kid["id"][:8], workdir=work)
    assert result.exit_code == 0, result.output
    assert "it was a1b2" in result.stdout
    resumed = llm_server.requests[-1]["messages"]
    assert [m["role"] for m in resumed[1:]] == ["user", "assistant", "tool", "assistant", "user"]
    assert json.loads(cli("sessions", "list", "--json").stdout)[0]["id"] == parent["id"]


def test_a_sub_agent_at_its_bound_returns_a_clear_partial_result(
    llm_server, tmp_path, harness9_home
):
    write_config("[subagents]\nmax_model_calls = 2\n")
    work = tmp_path / "w"
    work.mkdir()
    (work / "a.txt").write_text("first clue: the key is under the mat\n")

    def agents(body):
        if is_sub(body):
            n = sum(m["role"] == "assistant" for m in body["messages"])
            text = "Found the first clue; looking for more." if n == 1 else ""
            args = json.dumps({"path": "a.txt"})
            return ToolCallsReply(((f"r{n}", "read_file", args),), content=text)
        if body["messages"][-1]["role"] == "user":
            return ToolCallsReply((task_call("call_1", "Read every file, forever.", "endless"),))
        return TextReply("parent done")

    llm_server.respond_with(agents)
    result = chat(llm_server, "go\n", "--yes", "--no-stream", workdir=work)
    assert result.exit_code == 0, result.output
    assert len([b for b in llm_server.requests if is_sub(b)]) == 2
    final = llm_server.requests[-1]["messages"]
    text = final[-1]["content"]
    assert final[-1]["tool_call_id"] == "call_1"
    assert text.startswith("[sub-agent did not finish: stopped at its bound of 2 model calls]")
    assert "Found the first clue; looking for more." in text
    assert "It ran 2 tool calls:\n- read_file a.txt\n- read_file a.txt" in text
    assert "endless: stopped" in result.stderr


def test_no_nesting_by_default_and_one_more_level_when_allowed(llm_server, tmp_path, harness9_home):
    write_config("[subagents]\nnested = true\n")
    work = tmp_path / "w"
    work.mkdir()
    depths: list[tuple[int, bool]] = []

    def agents(body):
        marks = sum(SUB_MARK in m["content"] for m in body["messages"][:1])
        offered = "task" in tool_names(body)
        last = body["messages"][-1]
        job = body["messages"][1]["content"]
        level = 0 if not marks else (2 if "level two" in job else 1)
        if last["role"] == "user":
            depths.append((level, offered))
        if last["role"] == "user" and level < 2 and offered:
            nxt = "level two job" if level == 1 else "level one job"
            return ToolCallsReply((task_call(f"call_{level}", nxt, nxt),))
        return TextReply(f"answer from level {level}")

    llm_server.respond_with(agents)
    result = chat(llm_server, "go\n", "--yes", "--no-stream", workdir=work)
    assert result.exit_code == 0, result.output
    assert depths == [(0, True), (1, True), (2, False)]
    assert len(json.loads(cli("sessions", "list", "--all", "--json").stdout)) == 3


def test_ctrl_c_during_sub_agents_keeps_every_call_paired(llm_server, tmp_path):
    import os
    import signal

    work = tmp_path / "w"
    family = Family(make_files(work), sub_delay=10.0)
    llm_server.respond_with(family)

    def interrupt_once_both_run() -> None:
        # The deadline covers a cold litellm import on a loaded machine.
        if family.all_running.wait(timeout=120):
            killed.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)

    killed: list[float] = []
    threading.Thread(target=interrupt_once_both_run, daemon=True).start()
    result = chat(llm_server, "", "-p", "find the secrets", "--yes", workdir=work)
    assert killed, "the two sub-agents never ran at once"
    # It did not wait for the sub-agents' replies (each 10 s away when Ctrl-C came).
    assert time.monotonic() - killed[0] < 6
    assert result.exit_code == 130
    with Manager(db_path()) as m:
        (parent,) = m.list_sessions()
        msgs = m.open_session(parent.id).get_messages()
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "tool"]
    assert [c.id for c in msgs[1].tool_calls] == [m.tool_call_id for m in msgs[2:]]
    for m in msgs[2:]:
        assert m.content.startswith("[sub-agent did not finish: stopped: its parent's turn")
        assert "Its whole conversation is session " in m.content


def test_the_parents_compaction_keeps_each_sub_agent_result_reachable(llm_server, tmp_path):
    work = tmp_path / "w"
    family = Family(make_files(work))

    def agents(body):
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        if body.get("tools") and not is_sub(body) and users[-1].startswith("and "):
            return TextReply("noted")
        reply = family(body)
        if isinstance(reply, TextReply) and reply.text.startswith("Parent summary"):
            # Long enough that folding it shrinks the context: a compaction that would not
            # (the user's words are kept verbatim, the recall index is added) is refused.
            return replace(reply, text=reply.text + " Checked: " + "all in order. " * 160)
        return reply

    llm_server.respond_with(agents)
    turns = "find the secrets\nand one\nand two\nand three\n/compact\n"
    result = chat(llm_server, turns, "--yes", "--strategy", "summarize", workdir=work)
    assert result.exit_code == 0, result.output
    (parent,) = json.loads(cli("sessions", "list", "--json").stdout)
    (cp,) = json.loads(cli("sessions", "show", parent["id"], "--json").stdout)["checkpoints"]
    listed = {(e["tool"], e["key_argument"]) for e in cp["recall"]}
    assert {("task", "find alpha"), ("task", "find beta")} <= listed, cp["recall"]
    assert all(e["handle"].startswith("msg_") for e in cp["recall"] if e["tool"] == "task")


def test_each_sub_agent_compacts_its_own_context(llm_server, tmp_path, monkeypatch):
    # Offload off: the parts stay in the sub-agent's context (a 6K window offloads a result
    # over 500 tokens), so it compacts.
    monkeypatch.setenv("HARNESS9_OFFLOAD", "false")
    work = tmp_path / "w"
    work.mkdir()
    for i in range(4):
        (work / f"part{i}.txt").write_text(
            "".join(f"part {i} row {j} value {j * 7919 % 1000}\n" for j in range(120))
        )

    reads = [0]

    def agents(body):
        if not body.get("tools"):
            return TextReply("**Goal:** read the parts.")
        if is_sub(body):  # four reads, whatever its compactions leave in the request
            if reads[0] < 4:
                n = reads[0]
                reads[0] += 1
                args = json.dumps({"path": f"part{n}.txt"})
                return ToolCallsReply(((f"r{n}", "read_file", args),))
            return TextReply("read all four parts")
        if body["messages"][-1]["role"] == "user":
            return ToolCallsReply((task_call("call_1", "Read part0..part3.", "read parts"),))
        return TextReply("parent done")

    llm_server.respond_with(agents)
    result = chat(
        llm_server, "go\n", "--yes", "--no-stream", "--context-window", "6000", workdir=work
    )
    assert result.exit_code == 0, result.output
    (parent,) = json.loads(cli("sessions", "list", "--json").stdout)
    shown = json.loads(cli("sessions", "show", parent["id"], "--json").stdout)
    assert shown["checkpoints"] == []
    child = json.loads(cli("sessions", "show", shown["children"][0]["id"], "--json").stdout)
    assert len(child["checkpoints"]) >= 1
    assert shown["messages"][-2]["content"] == "read all four parts"


def test_history_search_finds_what_the_sub_agents_read(llm_server, tmp_path):
    work = tmp_path / "w"
    family = Family(make_files(work))

    def agents(body):
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        if body.get("tools") and not is_sub(body) and users[-1] == "search":
            if body["messages"][-1]["role"] == "user":
                args = json.dumps({"query": "SECRET"})
                return ToolCallsReply((("hs_1", "history_search", args),))
            return TextReply("searched")
        return family(body)

    llm_server.respond_with(agents)
    result = chat(llm_server, "find the secrets\nsearch\n", "--yes", workdir=work)
    assert result.exit_code == 0, result.output
    found = llm_server.requests[-1]["messages"][-1]["content"]
    assert re.search(r"\[sub-agent 'find alpha', session [0-9a-f-]{36}\] \d+\s+SECRET=a1b2", found)
    assert re.search(r"\[sub-agent 'find beta', session [0-9a-f-]{36}\] \d+\s+SECRET=c3d4", found)


def test_task_calls_feed_the_smart_triggers_sub_agent_pattern(llm_server, tmp_path, monkeypatch):
    from harness9.context import policy

    seen: list[tuple[list[str], bool]] = []
    real = policy.read_heavy

    def spy(recent_tools, tools):
        seen.append((list(recent_tools), real(recent_tools, tools)))
        return seen[-1][1]

    monkeypatch.setattr(policy, "read_heavy", spy)
    work = tmp_path / "w"
    llm_server.respond_with(Family(make_files(work)))
    assert chat(llm_server, "find the secrets\n", "--yes", workdir=work).exit_code == 0
    # The parent's second call follows its two `task` calls (the tool declares its
    # sub-agent); the sub-agents' own calls follow read_file (it declares that it
    # reads content in: read-heavy) or nothing (conversation).
    assert (["task", "task"], False) in seen
    assert sum("task" in tools for tools, _ in seen) == 1
    assert (["read_file"], True) in seen


def test_the_sub_agent_is_told_what_it_is(llm_server, tmp_path):
    from harness9.engine.subagents import subagent_prompt

    work = tmp_path / "w"
    llm_server.respond_with(Family(make_files(work)))
    assert chat(llm_server, "find the secrets\n", "--yes", workdir=work).exit_code == 0
    system = next(b for b in llm_server.requests if is_sub(b))["messages"][0]["content"]
    assert system.startswith(subagent_prompt())
    assert "final reply is the whole result the caller will see" in system
    assert f"Working directory: {work.resolve()}" in system
    jobs = [b["messages"][1] for b in llm_server.requests if is_sub(b)]
    assert {"role": "user", "content": "Read alpha.txt and report its secret (alpha)."} in jobs
    assert {"role": "user", "content": "Read beta.txt and report its secret (beta)."} in jobs


def test_task_is_not_offered_when_sub_agents_are_off(llm_server, tmp_path, harness9_home):
    write_config("[subagents]\nenabled = false\n")
    llm_server.respond_with(lambda body: TextReply("hello"))
    assert chat(llm_server, "hi\n").exit_code == 0
    assert "task" not in tool_names(llm_server.requests[0])
    assert "read_file" in tool_names(llm_server.requests[0])


def test_a_bad_subagents_setting_is_one_line_on_stderr(llm_server, harness9_home):
    write_config("[subagents]\nparallel = 99\n")
    result = chat(llm_server, "hi\n")
    assert result.exit_code == 1
    assert "subagents.parallel in " in result.stderr and "out-of-range value 99" in result.stderr
    assert result.stderr.count("\n") == 1
    assert llm_server.requests == []


def test_a_long_sub_agent_answer_is_offloaded_like_any_big_result(llm_server, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    report = "".join(
        f"finding {i}: module m{i} calls m{i + 1} at line {i * 13}\n" for i in range(600)
    )

    def agents(body):
        if is_sub(body):
            return TextReply(report)
        if body["messages"][-1]["role"] == "user":
            return ToolCallsReply((task_call("call_1", "Map every call.", "map calls"),))
        return TextReply("parent done")

    llm_server.respond_with(agents)
    assert chat(llm_server, "go\n", "--yes", "--no-stream", workdir=work).exit_code == 0
    result = llm_server.requests[-1]["messages"][-1]
    assert result["tool_call_id"] == "call_1"
    assert result["content"].startswith("📂 [offload:ofl_")
    assert len(result["content"]) < len(report) // 4
    (parent,) = json.loads(cli("sessions", "list", "--json").stdout)
    kid = json.loads(cli("sessions", "show", parent["id"], "--json").stdout)["children"][0]
    child = json.loads(cli("sessions", "show", kid["id"], "--json").stdout)
    assert child["messages"][-1]["content"] == report  # the whole answer, in its session
