"""Asking before an MCP tool runs (y/N/a per tool, auto_approve per server, --yes), and
asking once at a terminal before a project's .mcp.json server is started."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness9.config import McpServer
from harness9.tools.base import Approval, Declined, ToolContext
from harness9.tools.mcp.manager import McpManager
from harness9.tools.mcp.toolset import McpTool, McpToolset
from tests.support.cli import answering, cli, terminal
from tests.tools.test_mcp import DEMO, configure, demo, script, tool_messages


def one_shot(server, workdir: Path, text: str, answers: str):
    env = terminal(answers)
    argv = ["chat", "--model", "openai/test-model", "--api-base", server.base_url]
    result = cli(*argv, "--workdir", str(workdir), text, obj=env)
    return result, env


def test_a_tool_call_is_asked_about_and_a_no_with_a_reason_reaches_the_model(
    llm_server, harness9_home, workdir
):
    configure(harness9_home, {"demo": demo()})
    script(llm_server, ("c1", "mcp__demo__add", {"a": 1, "b": 2}))
    result, env = one_shot(llm_server, workdir, "add", "n, not now\n")
    assert result.exit_code == 0, env.stderr.getvalue()
    assert "Run demo's tool add? [y/N/a]" in env.stderr.getvalue()
    assert tool_messages(llm_server.requests[1]) == [
        "the user declined to run this tool; the user said: not now"
    ]


def test_a_yes_runs_the_tool(llm_server, harness9_home, workdir):
    configure(harness9_home, {"demo": demo()})
    script(llm_server, ("c1", "mcp__demo__add", {"a": 1, "b": 2}))
    result, env = one_shot(llm_server, workdir, "add", "y\n")
    assert result.exit_code == 0, env.stderr.getvalue()
    assert tool_messages(llm_server.requests[1]) == ["sum=3"]


def test_auto_approve_runs_a_servers_tools_without_asking(llm_server, harness9_home, workdir):
    configure(harness9_home, {"demo": demo() | {"auto_approve": True}})
    script(llm_server, ("c1", "mcp__demo__add", {"a": 1, "b": 2}))
    result, env = one_shot(llm_server, workdir, "add", "")
    assert result.exit_code == 0, env.stderr.getvalue()
    assert "[y/N/a]" not in env.stderr.getvalue()
    assert tool_messages(llm_server.requests[1]) == ["sum=3"]


def test_without_a_terminal_or_yes_a_call_is_refused(llm_server, harness9_home, workdir):
    from tests.support.cli import chat

    configure(harness9_home, {"demo": demo()})
    script(llm_server, ("c1", "mcp__demo__add", {"a": 1, "b": 2}))
    assert chat(llm_server, "add\n", workdir=workdir).exit_code == 0
    (told,) = tool_messages(llm_server.requests[1])
    assert told.startswith("refused: MCP tools need confirmation; re-run harness9 with --yes")


def test_a_mcp_json_server_is_asked_about_at_a_terminal_and_remembered(
    llm_server, workdir, tmp_path
):
    marker = tmp_path / "started"
    servers = {"proj": {"command": sys.executable, "args": [DEMO, "--marker", str(marker)]}}
    (workdir / ".mcp.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    script(llm_server, ("c1", "mcp__proj__add", {"a": 2, "b": 2}))
    result, env = one_shot(llm_server, workdir, "add", "y\ny\n")
    assert result.exit_code == 0, env.stderr.getvalue()
    assert f"asks to start MCP server proj: {sys.executable} {DEMO}" in env.stderr.getvalue()
    assert tool_messages(llm_server.requests[1]) == ["sum=4"]
    llm_server.reply_text("again")
    _, env = one_shot(llm_server, workdir, "hello", "")
    assert "asks to start" not in env.stderr.getvalue()  # remembered for the directory


@pytest.fixture
def manager(tmp_path: Path):
    m = McpManager([McpServer("demo", command=sys.executable, args=(DEMO,), timeout=20)])
    m.start()
    m.wait_ready()
    yield m
    m.close()


def test_an_always_answer_is_per_tool(manager, workdir):
    import io

    from rich.console import Console

    approver, asked = answering(Console(file=io.StringIO()), "a")
    ctx = ToolContext(workdir=workdir, session=None, confirm=approver)
    toolset = McpToolset(manager, window=1_000_000)
    add, reverse = toolset.get("mcp__demo__add"), toolset.get("mcp__demo__reverse")
    assert add.run({"a": 1, "b": 1}, ctx).content == "sum=2"
    assert add.run({"a": 2, "b": 2}, ctx).content == "sum=4"  # "always": not asked again
    assert reverse.run({"text": "ab"}, ctx).is_error  # another tool: asked, and "n"
    assert len(asked) == 2


def test_the_question_shows_the_arguments(manager, workdir):
    seen: list[Approval] = []

    def confirm(approval: Approval) -> Declined:
        seen.append(approval)
        return Declined()

    ctx = ToolContext(workdir=workdir, session=None, confirm=confirm)
    tool = McpToolset(manager, window=1_000_000).get("mcp__demo__reverse")
    assert isinstance(tool, McpTool)
    result = tool.run({"text": "secret plan"}, ctx)
    assert result.content == "the user declined to run this tool"
    assert json.loads(seen[0].preview) == {"text": "secret plan"}
    assert seen[0].subject == "mcp__demo__reverse"


def test_a_broken_mcp_json_is_one_line_and_the_chat_goes_on(llm_server, workdir):
    from tests.support.cli import chat

    (workdir / ".mcp.json").write_text("{broken", encoding="utf-8")
    llm_server.reply_text("hello")
    result = chat(llm_server, "hi\n", workdir=workdir)
    assert result.exit_code == 0, result.output
    assert "is not valid JSON" in result.stderr
    assert "its servers were not started" in result.stderr
    assert "hello" in result.stdout
