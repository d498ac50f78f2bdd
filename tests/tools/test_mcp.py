"""MCP servers' tools in chat, against real MCP servers (tests/support/mcp_demo.py, built
with the SDK's MCPServer) started over stdio and Streamable HTTP on 127.0.0.1, and a
scripted model that asks for the calls."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import chat, cli
from tests.support.llm_server import ScriptedLLMServer, TextReply, ToolCallsReply

DEMO = str(Path(__file__).parents[1] / "support" / "mcp_demo.py")


def configure(home: Path, servers: dict[str, dict], **mcp: object) -> None:
    """config.toml with ``[mcp]`` keys and ``[mcp.servers.NAME]`` tables."""
    home.mkdir(parents=True, exist_ok=True)
    lines = ["[mcp]"] + [f"{k} = {toml(v)}" for k, v in mcp.items()]
    for name, table in servers.items():
        lines.append(f"[mcp.servers.{name}]")
        lines += [f"{k} = {toml(v)}" for k, v in table.items()]
    (home / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def toml(value: object) -> str:
    """A TOML value (JSON's strings, numbers and lists are TOML's; tables are inline)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def demo(*args: str, timeout: float = 20) -> dict:
    return {"command": sys.executable, "args": [DEMO, *args], "timeout": timeout}


def tool_messages(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def tool_names(request: dict) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


def script(server: ScriptedLLMServer, *calls: tuple[str, str, dict], text: str = "done") -> None:
    for i, (cid, name, args) in enumerate(calls):
        server.reply(ToolCallsReply(((cid or f"c{i}", name, json.dumps(args)),)))
    server.reply(TextReply(text))


def test_a_stdio_servers_result_reaches_the_model(llm_server, harness9_home, workdir):
    configure(harness9_home, {"demo": demo()})
    script(llm_server, ("c1", "mcp__demo__add", {"a": 2, "b": 3}))
    result = chat(llm_server, "add them\n", "--yes", workdir=workdir)
    assert result.exit_code == 0, result.output
    first, second = llm_server.requests
    assert "mcp__demo__add" in tool_names(first)
    assert tool_messages(second) == ["sum=5"]


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    """demo.py serving Streamable HTTP on a free port of 127.0.0.1; yields its URL."""
    with demo_over_http() as url:
        yield url


@contextlib.contextmanager
def demo_over_http(*args: str) -> Iterator[str]:
    """demo.py (with ``args``) serving Streamable HTTP on a free port of 127.0.0.1: its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, DEMO, "--http", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait()


def test_a_streamable_http_servers_result_reaches_the_model(
    llm_server, harness9_home, workdir, http_server
):
    configure(harness9_home, {"web": {"url": http_server, "headers": {"X-Test": "1"}}})
    script(llm_server, ("c1", "mcp__web__reverse", {"text": "abc"}))
    result = chat(llm_server, "reverse it\n", "--yes", workdir=workdir)
    assert result.exit_code == 0, result.output
    assert tool_messages(llm_server.requests[1]) == ["cba"]


def test_deferred_tools_are_found_by_tool_search_then_called(llm_server, harness9_home, workdir):
    configure(harness9_home, {"demo": demo("--tools", "40")})
    script(
        llm_server,
        ("s1", "tool_search", {"query": "reversed"}),
        ("c1", "mcp__demo__reverse", {"text": "stressed"}),
    )
    result = chat(llm_server, "reverse\n", "--yes", workdir=workdir)
    assert result.exit_code == 0, result.output
    first, second, third = llm_server.requests
    # 47 tools' definitions are more than 10 % of a small window: only tool_search goes.
    assert "tool_search" in tool_names(first)
    assert not [n for n in tool_names(first) if n.startswith("mcp__")]
    search = tool_messages(second)[0]
    assert search.startswith("1 tool(s) found and loaded")
    found = json.loads(search.split("\n", 1)[1])
    assert found[0]["name"] == "mcp__demo__reverse"
    assert found[0]["parameters"]["required"] == ["text"]
    # Delivered in the conversation: the tools list (the cached prefix) did not change.
    assert third["tools"] == first["tools"]
    assert tool_messages(third)[1] == "desserts"


def test_tool_search_names_each_server_and_its_tool_count(llm_server, harness9_home, workdir):
    configure(harness9_home, {"demo": demo("--tools", "4")}, defer="always")
    llm_server.reply(TextReply("ok"))
    chat(llm_server, "hi\n", "--yes", workdir=workdir)
    (search,) = [
        t for t in llm_server.requests[0]["tools"] if t["function"]["name"] == "tool_search"
    ]
    assert "- demo: 11 tools" in search["function"]["description"]


def test_never_offered_behind_tool_search_when_defer_is_never(llm_server, harness9_home, workdir):
    configure(harness9_home, {"demo": demo("--tools", "40")}, defer="never")
    llm_server.reply(TextReply("ok"))
    chat(llm_server, "hi\n", "--yes", workdir=workdir)
    names = tool_names(llm_server.requests[0])
    assert "tool_search" not in names
    assert len([n for n in names if n.startswith("mcp__demo__")]) == 47


def test_an_is_error_result_reaches_the_model_as_a_failed_call(llm_server, harness9_home, workdir):
    configure(harness9_home, {"demo": demo()})
    script(llm_server, ("c1", "mcp__demo__fail", {"message": "nope"}))
    result = chat(llm_server, "fail\n", "--yes", workdir=workdir)
    assert result.exit_code == 0, result.output
    assert tool_messages(llm_server.requests[1]) == ["error: Error executing tool fail"]


def test_a_server_that_crashes_mid_session_fails_one_call_and_starts_again(
    llm_server, harness9_home, workdir
):
    configure(harness9_home, {"demo": demo()})
    script(
        llm_server,
        ("c1", "mcp__demo__crash", {}),
        ("c2", "mcp__demo__add", {"a": 1, "b": 1}),
    )
    result = chat(llm_server, "crash\n", "--yes", workdir=workdir)
    assert result.exit_code == 0, result.output
    crashed, added = tool_messages(llm_server.requests[2])
    assert crashed.startswith("error: server demo stopped: connection closed")
    assert "unavailable for now" in crashed
    assert added == "sum=2"
    assert "mcp: server demo stopped: connection closed" in result.stderr
    # Between the crash and the next call, the model is told its tools are unavailable.
    (add,) = [
        t for t in llm_server.requests[1]["tools"] if t["function"]["name"] == "mcp__demo__add"
    ]
    assert add["function"]["description"].startswith(
        "[unavailable: stopped: connection closed; a call starts the server again]"
    )


def test_a_server_that_hangs_past_its_timeout_fails_the_call_and_the_chat_goes_on(
    llm_server, harness9_home, workdir
):
    configure(harness9_home, {"demo": demo(timeout=2)})
    script(
        llm_server,
        ("c1", "mcp__demo__sleep", {"seconds": 30}),
        ("c2", "mcp__demo__add", {"a": 2, "b": 2}),
    )
    started = time.monotonic()
    result = chat(llm_server, "sleep\n", "--yes", workdir=workdir)
    assert result.exit_code == 0, result.output
    assert time.monotonic() - started < 20
    hung, added = tool_messages(llm_server.requests[2])
    assert hung.startswith("error: server demo hung: sleep got no answer within 2s")
    assert added == "sum=4"


def test_a_server_that_never_starts_is_one_line_and_the_chat_goes_on(
    llm_server, harness9_home, workdir
):
    configure(
        harness9_home,
        {"ghost": {"command": str(workdir / "no-such-server"), "timeout": 5}, "demo": demo()},
    )
    script(llm_server, ("c1", "mcp__demo__add", {"a": 4, "b": 4}), text="still here")
    result = chat(llm_server, "go\n", "--yes", workdir=workdir)
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stderr.splitlines() if "ghost" in ln]
    assert lines == [
        f"mcp: server ghost did not start: command not found ({workdir / 'no-such-server'})"
    ]
    assert tool_messages(llm_server.requests[1]) == ["sum=8"]
    assert "still here" in result.stdout


def test_a_call_of_a_server_that_never_started_tells_the_model_why(
    llm_server, harness9_home, workdir
):
    configure(harness9_home, {"ghost": {"command": str(workdir / "nothing"), "timeout": 5}})
    script(llm_server, ("c1", "mcp__ghost__anything", {}))
    result = chat(llm_server, "go\n", "--yes", workdir=workdir)
    assert result.exit_code == 0, result.output
    (told,) = tool_messages(llm_server.requests[1])
    assert told.startswith("error: unknown tool 'mcp__ghost__anything'")


def write_project(workdir: Path, marker: Path) -> None:
    servers = {"proj": {"command": sys.executable, "args": [DEMO, "--marker", str(marker)]}}
    (workdir / ".mcp.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")


def test_an_unapproved_mcp_json_server_is_not_started_even_with_yes(llm_server, workdir, tmp_path):
    marker = tmp_path / "started"
    write_project(workdir, marker)
    llm_server.reply(TextReply("ok"))
    result = chat(llm_server, "hi\n", "--yes", workdir=workdir)
    assert result.exit_code == 0, result.output
    time.sleep(0.5)
    assert not marker.exists()
    assert "harness9 mcp approve proj" in result.stderr
    assert not [n for n in tool_names(llm_server.requests[0]) if n.startswith("mcp__")]


def test_an_approved_mcp_json_server_runs(llm_server, workdir, tmp_path):
    marker = tmp_path / "started"
    write_project(workdir, marker)
    approved = cli("mcp", "approve", "proj", "--workdir", str(workdir))
    assert approved.exit_code == 0, approved.output
    script(llm_server, ("c1", "mcp__proj__add", {"a": 1, "b": 2}))
    result = chat(llm_server, "add\n", "--yes", workdir=workdir)
    assert result.exit_code == 0, result.output
    assert marker.exists()
    assert tool_messages(llm_server.requests[1]) == ["sum=3"]


def test_a_changed_mcp_json_entry_needs_approving_again(llm_server, workdir, tmp_path):
    write_project(workdir, tmp_path / "first")
    cli("mcp", "approve", "--all", "--workdir", str(workdir))
    marker = tmp_path / "second"
    write_project(workdir, marker)  # the same name, other arguments
    llm_server.reply(TextReply("ok"))
    result = chat(llm_server, "hi\n", "--yes", workdir=workdir)
    assert result.exit_code == 0
    assert not marker.exists()


def test_ctrl_c_during_a_call_cancels_it_and_keeps_the_turn(
    llm_server, harness9_home, workdir, tmp_path
):
    marker = tmp_path / "m"
    configure(harness9_home, {"demo": demo("--marker", str(marker))})
    script(llm_server, ("c1", "mcp__demo__sleep", {"seconds": 30}))

    def interrupt_when_sleeping() -> None:
        end = time.monotonic() + 30
        while time.monotonic() < end and not Path(f"{marker}.sleeping").exists():
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_sleeping, daemon=True).start()
    started = time.monotonic()
    result = chat(llm_server, "sleep\n", "--yes", workdir=workdir)
    assert time.monotonic() - started < 25
    assert "interrupted" in result.stderr
    sessions = json.loads(cli("sessions", "list", "--json").stdout)
    shown = json.loads(cli("sessions", "show", sessions[0]["id"], "--json").stdout)
    assert shown["messages"][-1]["content"] == (
        "[interrupted by the user before this tool finished]"
    )


def test_resuming_a_session_whose_server_is_gone_works(llm_server, harness9_home, workdir):
    configure(harness9_home, {"demo": demo()})
    script(llm_server, ("c1", "mcp__demo__add", {"a": 5, "b": 5}))
    assert chat(llm_server, "add\n", "--yes", workdir=workdir).exit_code == 0
    sid = json.loads(cli("sessions", "list", "--json").stdout)[0]["id"]
    configure(harness9_home, {"demo": {"command": str(workdir / "gone"), "timeout": 5}})
    script(llm_server, ("c2", "mcp__demo__add", {"a": 1, "b": 1}), text="carried on")
    result = chat(llm_server, "again\n", "--yes", "--resume", sid, workdir=workdir)
    assert result.exit_code == 0, result.output
    last = llm_server.requests[-1]
    assert tool_messages(last)[0] == "sum=10"  # the old result is still there
    assert tool_messages(last)[1].startswith("error: unknown tool 'mcp__demo__add'")
    assert "carried on" in result.stdout


def test_mcp_list_json_shows_each_server(harness9_home, workdir, tmp_path):
    configure(
        harness9_home,
        {"demo": demo(), "ghost": {"command": str(workdir / "none"), "timeout": 5}},
    )
    write_project(workdir, tmp_path / "m")
    result = cli("mcp", "list", "--json", "--workdir", str(workdir))
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["demo"]["state"] == "ready"
    assert rows["demo"]["tools"] == 7
    assert rows["demo"]["tokens"] > 100
    assert (rows["demo"]["source"], rows["demo"]["transport"]) == ("config", "stdio")
    assert rows["ghost"]["state"] == "failed"
    assert rows["ghost"]["error"].startswith("did not start: command not found")
    assert (rows["proj"]["source"], rows["proj"]["state"]) == (".mcp.json", "not approved")


def test_mcp_tools_lists_a_servers_tools_by_their_called_names(harness9_home, workdir):
    configure(harness9_home, {"demo": demo()})
    result = cli("mcp", "tools", "demo", "--workdir", str(workdir))
    assert result.exit_code == 0, result.output
    assert "mcp__demo__add  (" in result.stdout
    assert "Add two integers and return the sum." in result.stdout


def test_mcp_tools_of_an_unknown_server_is_one_line(harness9_home, workdir):
    configure(harness9_home, {"demo": demo()})
    result = cli("mcp", "tools", "nosuch", "--workdir", str(workdir))
    assert result.exit_code == 2
    assert "no MCP server named 'nosuch' (servers: demo)" in result.stderr


def test_slash_mcp_lists_the_servers_in_chat(llm_server, harness9_home, workdir):
    configure(harness9_home, {"demo": demo()})
    result = chat(llm_server, "/mcp\n", workdir=workdir)
    assert result.exit_code == 0, result.output
    row = next(ln for ln in result.stderr.splitlines() if ln.startswith("demo"))
    assert row.split()[:5] == ["demo", "config", "stdio", "ready", "7"]


def test_slash_context_shows_the_mcp_definitions_share(llm_server, harness9_home, workdir):
    configure(harness9_home, {"demo": demo("--tools", "40")}, defer="always")
    result = chat(llm_server, "/context\n", workdir=workdir)
    assert result.exit_code == 0, result.output
    sent = next(ln for ln in result.stderr.splitlines() if "MCP definitions sent" in ln)
    deferred = next(ln for ln in result.stderr.splitlines() if "MCP definitions deferred" in ln)
    # Only tool_search is sent; the 47 tools' definitions (several thousand tokens) wait.
    assert int(sent.split()[-1]) < 300
    assert deferred.split()[-1].endswith("K")


def test_sub_agents_get_the_same_mcp_tools(llm_server, harness9_home, workdir):
    configure(harness9_home, {"demo": demo()})
    task = json.dumps({"prompt": "add 3 and 4", "description": "adder"})
    llm_server.reply(ToolCallsReply((("t1", "task", task),)))
    llm_server.reply(ToolCallsReply((("c1", "mcp__demo__add", json.dumps({"a": 3, "b": 4})),)))
    llm_server.reply(TextReply("it is 7"))
    llm_server.reply(TextReply("done"))
    result = chat(llm_server, "delegate\n", "--yes", workdir=workdir)
    assert result.exit_code == 0, result.output
    sub_first, sub_second = llm_server.requests[1:3]
    assert "mcp__demo__add" in tool_names(sub_first)
    assert tool_messages(sub_second) == ["sum=7"]


GARBAGE = "import sys\nfor line in sys.stdin:\n    print('this is not json', flush=True)\n"


def test_a_server_that_answers_garbage_is_one_line_and_the_chat_goes_on(
    llm_server, harness9_home, workdir
):
    configure(harness9_home, {"junk": {"command": sys.executable, "args": ["-c", GARBAGE]}})
    llm_server.reply(TextReply("fine"))
    result = chat(llm_server, "hi\n", "--yes", workdir=workdir)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == (
        "mcp: server junk answered garbage: 'this is not json' is not an MCP message"
    )
    assert "Traceback" not in result.stderr
    assert "fine" in result.stdout


def test_loaded_tools_join_the_tools_list_when_configured(llm_server, harness9_home, workdir):
    configure(harness9_home, {"demo": demo("--tools", "40")}, loaded="tools")
    script(
        llm_server,
        ("s1", "tool_search", {"query": "reversed"}),
        ("c1", "mcp__demo__reverse", {"text": "ab"}),
    )
    result = chat(llm_server, "reverse\n", "--yes", workdir=workdir)
    assert result.exit_code == 0, result.output
    first, second, third = llm_server.requests
    assert "mcp__demo__reverse" not in tool_names(first)
    assert "mcp__demo__reverse" in tool_names(second)
    assert "parameters" not in tool_messages(second)[0]  # the list carries them
    assert tool_messages(third)[1] == "ba"


def test_on_claude_a_found_tool_is_called_with_the_tools_list_unchanged(
    harness9_home, workdir, monkeypatch
):
    from tests.support.anthropic_server import ScriptedAnthropicServer

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    configure(harness9_home, {"demo": demo("--tools", "40")})
    with ScriptedAnthropicServer() as server:
        server.reply_tool_calls([("toolu_01", "tool_search", json.dumps({"query": "reversed"}))])
        server.reply_tool_calls([("toolu_02", "mcp__demo__reverse", json.dumps({"text": "xy"}))])
        server.reply_text("done")
        argv = ["chat", "--model", "anthropic/claude-sonnet-4-5", "--api-base", server.base_url]
        result = cli(*argv, "--workdir", str(workdir), "--yes", "-p", "reverse")
        assert result.exit_code == 0, result.output
        assert server.rejected == []
        first, _, third = server.requests
    assert [t["name"] for t in third["tools"]] == [t["name"] for t in first["tools"]]
    results = [
        b
        for m in third["messages"]
        for b in (m["content"] if isinstance(m["content"], list) else [])
        if b.get("type") == "tool_result"
    ]
    assert "yx" in json.dumps(results[-1])


def test_a_large_result_is_offloaded_like_any_tools(llm_server, harness9_home, workdir):
    configure(harness9_home, {"demo": demo()})
    script(llm_server, ("c1", "mcp__demo__lines", {"count": 5000}))
    result = chat(llm_server, "lines\n", "--yes", workdir=workdir)
    assert result.exit_code == 0, result.output
    (shown,) = tool_messages(llm_server.requests[1])
    assert shown.startswith("📂 [offload:")
    assert len(shown) < 10_000  # ~200 KB came back; the model sees a summary and a handle
