"""Sub-agents (the `task` tool) against reading everything inline, through the real CLI.

Every run is ``harness9 chat`` in-process (``harness9.cli.app``: the engine, the store,
read_file, the `task` tool and its sub-agents) against the scripted OpenAI-compatible
server on 127.0.0.1 (``tests/support/llm_server.py``), which plays the model. It only uses what
a request shows it: facts are taken from the tool results in the request, never from
the script's own knowledge, so a fact that does not reach the final answer is missing.

1. Exploration. 40 source files (~4 KB each) hold one planted fact each
   (``FACT mod_07: owner=...``). Three questions ask for the owners of three groups of
   modules (14, 13 and 13 files). ``inline``: the agent reads every file itself, four
   reads a reply, then answers all three. ``delegated``: it hands each question to a
   sub-agent in one reply (three `task` calls, run side by side); each sub-agent reads
   its files four a reply and answers; the agent answers from the three results.
   Measured: the parent session's peak context (its largest request) and billed input
   (the input tokens the harness recorded for the parent's own calls; the server counts
   a request's messages as bytes/4), the sub-agents' billed input apart, and the facts in
   each final answer. Target: peak and billed input delegated <= 30 % of inline, and the
   same 40 facts in both answers.
2. Parallel. Two sub-agents whose one model call takes 1 s each, started by one reply,
   against a single such sub-agent: the time from the reply with the `task` calls to
   the agent's next request. Target: two finish in about the time of one (<= 1.5x).

    python -m scripts.bench_subagents

Not part of the test suite. Token figures are exact (the scripted server's counts);
timings are wall-clock and noisy on a loaded machine.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from typer.testing import CliRunner

from harness9.cli import app
from tests.support.llm_server import ScriptedLLMServer, TextReply, ToolCallsReply

SUB_MARK = "You are a sub-agent"
FACT_RE = re.compile(r"FACT (mod_\d\d): owner=(\w+)")
OWNERS = ("ada", "brian", "chen", "dana", "emil", "farah", "goran", "hana", "ivo", "jun")
N_FILES = 40
GROUPS = ((0, 14), (14, 27), (27, 40))
READS_PER_REPLY = 4
WINDOW = 128_000


def make_files(work: Path) -> dict[str, str]:
    """40 modules of filler code with one planted fact each; module -> owner."""
    (work / "src").mkdir(parents=True)
    facts = {}
    for i in range(N_FILES):
        mod = f"mod_{i:02d}"
        owner = OWNERS[(i * 7) % len(OWNERS)] + str(i)
        facts[mod] = owner
        lines = [
            f"def {mod}_fn_{j}(x):\n    return x * {j} + {i}  # step {j} of {mod}\n"
            for j in range(60)
        ]
        lines.insert(31, f"# FACT {mod}: owner={owner}\n")
        (work / "src" / f"{mod}.py").write_text("".join(lines))
    return facts


def group_files(g: int) -> list[str]:
    lo, hi = GROUPS[g]
    return [f"src/mod_{i:02d}.py" for i in range(lo, hi)]


def prompt_tokens(body: dict[str, Any]) -> int:
    """The server's count of a request (bytes / 4 of its messages, as it bills them)."""
    return max(1, len(json.dumps(body.get("messages", []))) // 4)


def tool_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def read_paths(body: dict[str, Any]) -> set[str]:
    done = set()
    for m in body["messages"]:
        for c in m.get("tool_calls") or []:
            if c["function"]["name"] == "read_file":
                done.add(json.loads(c["function"]["arguments"])["path"])
    return done


def facts_in(texts: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for t in texts:
        found.update(FACT_RE.findall(t))
    return found


def answer(groups: list[list[str]], facts: dict[str, str]) -> str:
    out = []
    for g, paths in enumerate(groups, start=1):
        mods = [Path(p).stem for p in paths]
        out.append(f"Q{g}: " + ", ".join(f"{m} owner={facts.get(m, '?')}" for m in mods))
    return "\n".join(out)


def next_reads(body: dict[str, Any], paths: list[str], tag: str) -> ToolCallsReply | None:
    done = read_paths(body)
    todo = [p for p in paths if p not in done][:READS_PER_REPLY]
    if not todo:
        return None
    calls = tuple((f"{tag}_{Path(p).stem}", "read_file", json.dumps({"path": p})) for p in todo)
    return ToolCallsReply(calls)


@dataclass
class Model:
    """The scripted agent: ``delegate`` decides how the parent explores."""

    delegate: bool
    parent_tokens: list[int] = field(default_factory=list)
    sub_tokens: list[int] = field(default_factory=list)

    def __call__(self, body: dict[str, Any]) -> Any:
        if not body.get("tools"):
            return TextReply("summary")
        if SUB_MARK in body["messages"][0]["content"]:
            self.sub_tokens.append(prompt_tokens(body))
            return self.sub(body)
        self.parent_tokens.append(prompt_tokens(body))
        return self.parent(body)

    def parent(self, body: dict[str, Any]) -> Any:
        groups = [group_files(g) for g in range(len(GROUPS))]
        if not self.delegate:
            reads = next_reads(body, [p for g in groups for p in g], "r")
            return reads or TextReply(answer(groups, facts_in(tool_texts(body))))
        if body["messages"][-1]["role"] == "user":
            calls = tuple(
                (
                    f"task_q{g + 1}",
                    "task",
                    json.dumps(
                        {
                            "prompt": "Find the owner of each of these modules; read each "
                            "file and answer one line per module as `mod_NN owner=NAME`: "
                            + " ".join(paths),
                            "description": f"owners, question {g + 1}",
                        }
                    ),
                )
                for g, paths in enumerate(groups)
            )
            return ToolCallsReply(calls)
        # The sub-agents' answers are the tool results: their lines are the facts.
        found: dict[str, str] = {}
        for t in tool_texts(body):
            found.update(re.findall(r"(mod_\d\d) owner=(\w+)", t))
        return TextReply(answer(groups, found))

    def sub(self, body: dict[str, Any]) -> Any:
        job = body["messages"][1]["content"]
        paths = re.findall(r"src/mod_\d\d\.py", job)
        reads = next_reads(body, paths, "s")
        if reads is not None:
            return reads
        facts = facts_in(tool_texts(body))
        return TextReply(
            "\n".join(f"{Path(p).stem} owner={facts.get(Path(p).stem, '?')}" for p in paths)
        )


def chat(server: ScriptedLLMServer, home: Path, work: Path, prompt: str) -> str:
    env = {"HARNESS9_HOME": str(home), "OPENAI_API_KEY": "sk-bench"}
    argv = [
        "chat",
        "--model",
        "openai/bench",
        "--api-base",
        server.base_url,
        "--context-window",
        str(WINDOW),
        "--yes",
        "--no-stream",
        "--workdir",
        str(work),
        "-p",
        prompt,
    ]
    res = CliRunner().invoke(app, argv, env=env)
    if res.exit_code != 0:
        raise SystemExit(f"chat exited {res.exit_code}: {res.output[-500:]}")
    return res.stdout


def billed(home: Path) -> tuple[int, int]:
    """(the parent's own billed input, its sub-agents' billed input) from the store."""
    con = sqlite3.connect(home / "sessions.db")
    try:
        rows = con.execute(
            "SELECT s.id, l.parent_id, coalesce(u.input_tokens, 0) FROM sessions AS s "
            "LEFT JOIN subagent_sessions AS l ON l.session_id = s.id "
            "LEFT JOIN session_usage AS u ON u.session_id = s.id"
        ).fetchall()
    finally:
        con.close()
    own = sum(n for _, parent, n in rows if parent is None)
    subs = sum(n for _, parent, n in rows if parent is not None)
    return own, subs


@dataclass
class Run:
    peak: int
    billed: int
    sub_billed: int
    parent_requests: int
    sub_requests: int
    facts: dict[str, str]


def exploration(tmp: Path, delegate: bool) -> tuple[Run, dict[str, str]]:
    name = "delegated" if delegate else "inline"
    home, work = tmp / name / "h9", tmp / name / "work"
    planted = make_files(work)
    model = Model(delegate)
    with ScriptedLLMServer() as server:
        server.respond_with(model)
        out = chat(server, home, work, "Who owns each module of src/? Three questions.")
    own, subs = billed(home)
    facts = dict(re.findall(r"(mod_\d\d) owner=(\w+)", out))
    run = Run(
        max(model.parent_tokens),
        own,
        subs,
        len(model.parent_tokens),
        len(model.sub_tokens),
        facts,
    )
    return run, planted


class Timed:
    """Parent: ``n`` `task` calls in one reply; each sub-agent answers after ``delay`` s."""

    def __init__(self, n: int, delay: float) -> None:
        self.n, self.delay = n, delay
        self.lock = threading.Lock()
        self.sent_tasks = 0.0
        self.next_request = 0.0

    def __call__(self, body: dict[str, Any]) -> Any:
        if SUB_MARK in body["messages"][0]["content"]:
            return TextReply("sub-agent answer", delay=self.delay)
        if body["messages"][-1]["role"] == "user":
            self.sent_tasks = time.monotonic()
            calls = tuple(
                (f"t{i}", "task", json.dumps({"prompt": f"job {i}", "description": f"job {i}"}))
                for i in range(self.n)
            )
            return ToolCallsReply(calls)
        self.next_request = time.monotonic()
        return TextReply("done")


def parallel(tmp: Path, n: int) -> float:
    home, work = tmp / f"par{n}" / "h9", tmp / f"par{n}" / "work"
    work.mkdir(parents=True)
    model = Timed(n, 1.0)
    with ScriptedLLMServer() as server:
        server.respond_with(model)
        chat(server, home, work, "run the jobs")
    return model.next_request - model.sent_tasks


def ok(flag: bool) -> str:
    return "ok" if flag else "NO"


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="h9-bench-sub-") as d:
        tmp = Path(d)
        inline, planted = exploration(tmp, delegate=False)
        delegated, _ = exploration(tmp, delegate=True)
        one = parallel(tmp, 1)
        two = parallel(tmp, 2)
    print("exploration: 40 files, 3 questions (tokens: the scripted server's counts)")
    print(
        f"{'run':<10} {'parent reqs':>11} {'peak ctx':>9} {'billed in':>10} "
        f"{'sub reqs':>8} {'sub billed':>10} {'facts':>6}"
    )
    for name, r in (("inline", inline), ("delegated", delegated)):
        right = sum(r.facts.get(k) == v for k, v in planted.items())
        print(
            f"{name:<10} {r.parent_requests:>11} {r.peak:>9} {r.billed:>10} "
            f"{r.sub_requests:>8} {r.sub_billed:>10} {right:>3}/40"
        )
    peak_ratio = delegated.peak / inline.peak
    billed_ratio = delegated.billed / inline.billed
    same = inline.facts == delegated.facts == planted
    print(f"parent peak context delegated/inline: {peak_ratio:.1%}  {ok(peak_ratio <= 0.30)}")
    print(f"parent billed input delegated/inline: {billed_ratio:.1%}  {ok(billed_ratio <= 0.30)}")
    total = (delegated.billed + delegated.sub_billed) / inline.billed
    print(f"(all billed input, sub-agents included, delegated/inline: {total:.1%})")
    print(f"same 40 facts in both final answers: {ok(same)}")
    print()
    print("parallel: sub-agents whose one model call takes 1 s")
    print(f"one sub-agent: {one:.2f} s; two side by side: {two:.2f} s ({two / one:.2f}x)")
    print(f"two finish in about the time of one (<= 1.5x): {ok(two <= 1.5 * one)}")
    return 0 if (peak_ratio <= 0.30 and billed_ratio <= 0.30 and same and two <= 1.5 * one) else 1


if __name__ == "__main__":
    raise SystemExit(main())
