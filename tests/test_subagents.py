"""The `task` tool end to end: sub-agents through `harness9 chat` and the scripted server.

The server tells the parent's requests from the sub-agents' by the system prompt (a
sub-agent's says it is one) and answers each by its content, so the tests hold
whatever order the concurrent requests arrive in.
"""

from __future__ import annotations

import json
import threading
import time

from llm_server import TextReply, ToolCallsReply
from support import chat, cli

from harness9.config import db_path
from harness9.store import Manager

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
            return ToolCallsReply(calls)
        answers = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        return TextReply("Parent summary: " + " | ".join(answers))

    def sub(self, body: dict):
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            time.sleep(self.sub_delay)
            task = body["messages"][1]["content"]
            word = task.rsplit("(", 1)[1].rstrip(").")
            if body["messages"][-1]["role"] == "user":
                args = json.dumps({"path": self.files[word]})
                return ToolCallsReply(((f"read_{word}", "read_file", args),))
            content = last_tool_text(body)
            secret = next(line for line in content.splitlines() if "SECRET" in line)
            return TextReply(f"{word}: {secret.split('SECRET=')[1].strip()}")
        finally:
            with self.lock:
                self.active -= 1


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
    started = time.monotonic()
    result = chat(llm_server, "find the secrets\n", "--yes", "--no-stream", workdir=work)
    took = time.monotonic() - started
    assert result.exit_code == 0, result.output
    assert family.max_active == 2
    # Two sub-agents of two 0.5 s calls each: ~1 s side by side, 2 s one after the other.
    assert took < 1.9 + 1.0, took


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
    human = cli("sessions", "show", parent.id).stdout
    assert "find alpha" in human and child_id[:8] in human
