"""MCP servers' tools in the context only when needed: what deferral saves, what it bills,
and what five servers cost the start of a chat. Figures and ok/NO per target, one run.

Five real MCP stdio servers (scripts/mcp_catalog.py, the SDK's low-level ``Server``) serve
100 tools whose definitions are modelled on real servers' (counts and sizes quoted there from
anthropics/claude-code#13717; ~78K tokens in all). harness9's real engine (``build_engine``:
the registry, the MCP manager and toolset, the context policy, litellm) talks to the scripted
OpenAI-compatible server (tests/support/llm_server.py), which plays an agent:

- a 60-call session: 6 user turns of 10 calls each, cycling through 6 of the 100 tools
  (asana search_tasks/get_task/update_task, google-docs read_document, atlassian
  jira_get_issue, slack post_message). Whenever the tool it wants is neither in the request's
  tools list nor among the definitions a ``tool_search`` result in the conversation gave, it
  calls ``tool_search`` with the tool's name first (as a model would);
- run three ways: ``all`` (defer = "never": every definition in every request), ``deferred,
  in conversation`` (found definitions arrive in the search's result; harness9's choice for
  providers that cache) and ``deferred, tools list`` (found definitions are added to the
  ``tools`` list from then on).

Each run's requests (bytes/4 of their JSON tools and messages, as harness9 estimates) are
billed by two providers' prompt caching, as scripts/bench_session.py does:
- OpenAI style: a prefix of 1,024+ tokens repeated from the previous request (the tools list
  first, then the messages) is read at the family's discount (gpt-4o 0.5x, gpt-5 0.1x), in
  128-token steps; no write premium.
- Anthropic style: harness9 places a breakpoint at the end of each request, so the prefix
  repeated from the previous request is read at 0.1x and everything after it written at
  1.25x; a changed tools list (which comes first) rewrites everything.

Targets (ok/NO):
- the first request's MCP tool-definition tokens at least 85 % below loading all of them;
- the 60-call session billed at most 0.5x of ``all`` in each billing style, every call OK;
- five configured stdio servers add at most 1 s before ``harness9 chat`` shows its prompt in
  a pseudo-terminal (median of 5 runs each, servers vs none; scripts/bench_startup.py's way);
- and ``edit_file``'s targets, from scripts/bench_edit.py.

    .venv/bin/python -m scripts.bench_mcp [--skip-startup]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
from scripts.mcp_catalog import SERVERS  # noqa: E402

WINDOW = 200_000
TURNS, CALLS_PER_TURN = 6, 10
USED = [
    ("asana", "search_tasks"),
    ("asana", "get_task"),
    ("asana", "update_task"),
    ("google-docs", "read_document"),
    ("atlassian", "jira_get_issue"),
    ("slack", "post_message"),
]
OPENAI_DISCOUNTS = {"gpt-4o": 0.5, "gpt-5": 0.1}
OPENAI_MIN_PREFIX, OPENAI_STEP = 1024, 128
ANTHROPIC_READ, ANTHROPIC_WRITE = 0.1, 1.25
VARIANTS = {  # label: (defer, placement)
    "all": ("never", None),
    "deferred, in conversation": ("auto", "conversation"),
    "deferred, tools list": ("auto", "tools"),
}


def servers() -> list[Any]:
    from harness9.config import McpServer

    script = str(HERE / "mcp_catalog.py")
    return [McpServer(name, command=sys.executable, args=(script, name)) for name in SERVERS]


# -- the scripted agent ----------------------------------------------------------------------


def agent() -> Callable[[dict], Any]:
    """A responder for the scripted server: 60 calls of USED, tool_search when needed."""
    from harness9.tools.mcp.toolset import tool_name
    from tests.support.llm_server import TextReply, ToolCallsReply

    state = {"done": 0, "turn": 0}

    def respond(body: dict) -> Any:
        if body["messages"][-1]["role"] == "user":
            state["turn"] = 0
        if state["turn"] == CALLS_PER_TURN or state["done"] == TURNS * CALLS_PER_TURN:
            return TextReply("turn done")
        server, tool = USED[state["done"] % len(USED)]
        name = tool_name(server, tool)
        offered = {t["function"]["name"] for t in body.get("tools", [])}
        found = any(
            m["role"] == "tool" and f'"name": "{name}"' in str(m.get("content", ""))
            for m in body["messages"]
        )
        n = len(body["messages"])
        if name not in offered and not found:
            return ToolCallsReply(((f"s{n}", "tool_search", json.dumps({"query": f"^{name}$"})),))
        state["done"] += 1
        state["turn"] += 1
        args = json.dumps({"id": str(1000 + state["done"])})
        return ToolCallsReply(((f"c{n}", name, args),))

    return respond


@dataclass(slots=True)
class Run:
    label: str
    requests: list[dict] = field(default_factory=list)
    results: list[str] = field(default_factory=list)  # the MCP calls' results
    searches: int = 0


def run_session(label: str, defer: str, placement: str | None, work: Path) -> Run:
    from harness9.config import ContextOptions, Settings
    from harness9.engine.setup import build_engine
    from harness9.store import MemorySession
    from harness9.tools.mcp.manager import McpManager
    from harness9.tools.mcp.toolset import McpTools
    from tests.support.llm_server import ScriptedLLMServer

    manager = McpManager(servers())
    manager.start()
    manager.wait_ready()
    tools = McpTools(manager, defer=defer, placement=placement)
    run = Run(label)
    with ScriptedLLMServer() as llm:
        llm.respond_with(agent())
        engine = build_engine(
            Settings("openai/gpt-4o", llm.base_url),
            ContextOptions(),
            MemorySession(),
            work,
            WINDOW,
            assume_yes=True,
            mcp=tools,
            stream=False,
        )
        for turn in range(TURNS):
            engine.run_turn(f"turn {turn}: carry on with the tracker work")
        run.requests = llm.requests
    manager.close()
    for msg in engine.session.get_messages():
        if msg.role == "tool" and "ok: {" in msg.content:
            run.results.append(msg.content)
        for call in msg.tool_calls:
            run.searches += call.name == "tool_search"
    calls = [c for m in engine.session.get_messages() for c in m.tool_calls]
    run.results += [
        m.content
        for m in engine.session.get_messages()
        if m.role == "tool" and m.content.startswith(("error", "refused"))
    ]
    assert len([c for c in calls if c.name.startswith("mcp__")]) == TURNS * CALLS_PER_TURN
    return run


# -- billing -----------------------------------------------------------------------------------


def tokens(obj: Any) -> int:
    return len(json.dumps(obj, ensure_ascii=False).encode()) // 4


def prefix_tokens(prev: dict, cur: dict) -> int:
    """Tokens of the prefix ``cur`` repeats from ``prev``: the tools list, then messages."""
    if prev.get("tools") != cur.get("tools"):
        return 0
    n = tokens(cur.get("tools") or [])
    for a, b in zip(prev["messages"], cur["messages"], strict=False):
        if a != b:
            break
        n += tokens(b)
    return n


def request_tokens(body: dict) -> int:
    return tokens(body.get("tools") or []) + sum(tokens(m) for m in body["messages"])


def bill_openai(requests: list[dict], discount: float) -> float:
    billed, prev = 0.0, None
    for body in requests:
        total, cached = request_tokens(body), 0
        if prev is not None:
            prefix = prefix_tokens(prev, body)
            if prefix >= OPENAI_MIN_PREFIX:
                cached = prefix // OPENAI_STEP * OPENAI_STEP
        billed += total - cached + discount * cached
        prev = body
    return billed


def bill_anthropic(requests: list[dict]) -> float:
    billed, prev = 0.0, None
    for body in requests:
        total = request_tokens(body)
        read = prefix_tokens(prev, body) if prev is not None else 0
        billed += ANTHROPIC_READ * read + ANTHROPIC_WRITE * (total - read)
        prev = body
    return billed


def mcp_definition_tokens(body: dict) -> int:
    """Tokens of the MCP part of a request's tools list (server tools and tool_search)."""
    return tokens(
        [
            t
            for t in body.get("tools", [])
            if t["function"]["name"].startswith("mcp__") or t["function"]["name"] == "tool_search"
        ]
    )


# -- start-up -------------------------------------------------------------------------------------


def startup(runs: int = 5) -> tuple[float, float]:
    """Median seconds to the prompt in a pty: without MCP servers, with the five."""
    from scripts.bench_process import compile_bytecode
    from scripts.bench_startup import time_to_prompt

    compile_bytecode()
    config = "\n".join(
        f'[mcp.servers.{s.name}]\ncommand = "{s.command}"\nargs = {json.dumps(list(s.args))}'
        for s in servers()
    )
    plain, with_mcp = [], []
    with tempfile.TemporaryDirectory() as bare, tempfile.TemporaryDirectory() as home:
        (Path(home) / "config.toml").write_text(config + "\n", encoding="utf-8")
        time_to_prompt(bare)  # warm the file cache and create the stores once
        time_to_prompt(home)
        for _ in range(runs):
            plain.append(time_to_prompt(bare))
            with_mcp.append(time_to_prompt(home))
    return statistics.median(plain), statistics.median(with_mcp)


# -- the report ----------------------------------------------------------------------------------


def edit_rows() -> list[tuple[str, str, bool]]:
    from scripts import bench_edit

    return list(bench_edit.run())


def verdict(ok: bool) -> str:
    return "ok" if ok else "NO"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-startup", action="store_true", help="skip the pty start-up runs")
    args = parser.parse_args()
    rows: list[tuple[str, str, bool]] = []
    with tempfile.TemporaryDirectory() as tmp:
        import os

        os.environ["HARNESS9_HOME"] = str(Path(tmp) / "home")
        os.environ.setdefault("OPENAI_API_KEY", "sk-bench")
        os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        runs = {
            label: run_session(label, defer, placement, Path(tmp))
            for label, (defer, placement) in VARIANTS.items()
        }
    everything, deferred = runs["all"], runs["deferred, in conversation"]
    first_all = mcp_definition_tokens(everything.requests[0])
    first_deferred = mcp_definition_tokens(deferred.requests[0])
    cut = 1 - first_deferred / first_all
    rows.append(
        (
            "first request: MCP definition tokens, deferred vs all (>= 85 % less)",
            f"{first_deferred:,} vs {first_all:,} ({cut:.1%} less)",
            cut >= 0.85,
        )
    )
    print(f"{'run':<28} {'requests':>8} {'searches':>8} {'sent':>11} {'failed calls':>12}")
    for run in runs.values():
        sent = sum(request_tokens(b) for b in run.requests)
        failed = sum(r.startswith(("error", "refused")) for r in run.results)
        print(f"{run.label:<28} {len(run.requests):>8} {run.searches:>8} {sent:>11,} {failed:>12}")
    print()
    styles: dict[str, Callable[[list[dict]], float]] = {
        f"OpenAI style ({fam} {d}x reads)": (lambda r, d=d: bill_openai(r, d))
        for fam, d in OPENAI_DISCOUNTS.items()
    }
    styles["Anthropic style (0.1x reads, 1.25x writes)"] = bill_anthropic
    print(f"{'billed input tokens':<44}" + "".join(f"{label:>28}" for label in runs))
    for style, bill in styles.items():
        base = bill(everything.requests)
        cells = [bill(run.requests) for run in runs.values()]
        print(f"{style:<44}" + "".join(f"{c:>18,.0f} ({c / base:.2f}x)" for c in cells))
        ratio = bill(deferred.requests) / base
        ok_calls = all(not r.startswith(("error", "refused")) for r in deferred.results)
        rows.append(
            (
                f"60-call session billed, {style}, deferred vs all (<= 0.5x, all calls ok)",
                f"{ratio:.2f}x, {len(deferred.results)} calls ok" if ok_calls else f"{ratio:.2f}x",
                ratio <= 0.5 and ok_calls,
            )
        )
    print()
    if not args.skip_startup:
        plain, with_mcp = startup()
        added = with_mcp - plain
        rows.append(
            (
                "five stdio servers: added time to the prompt (<= 1 s)",
                f"{added * 1000:+.0f} ms ({plain * 1000:.0f} ms -> {with_mcp * 1000:.0f} ms)",
                added <= 1.0,
            )
        )
    edits = edit_rows()
    for label, figure, ok in rows + edits:
        print(f"{verdict(ok):<3} {label}: {figure}")
    return 0 if all(ok for _, _, ok in rows + edits) else 1


if __name__ == "__main__":
    raise SystemExit(main())
