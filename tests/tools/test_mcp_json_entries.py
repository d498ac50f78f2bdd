"""A .mcp.json entry that is wrong (an unset ${VAR} without a default, a bad server name,
no command) is reported as that server's failure; the file's other servers still run and
can be approved. A file that is not JSON, or whose mcpServers is not an object, still
fails as a whole."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness9.config import McpServer
from harness9.errors import ConfigError
from harness9.tools.mcp.manager import McpManager, ServerUnavailable
from harness9.tools.mcp.project import project_servers
from tests.support.cli import chat, cli
from tests.tools.test_mcp import DEMO, script, tool_messages
from tests.tools.test_mcp_approval import one_shot


@pytest.fixture(autouse=True)
def _unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)


def write(workdir: Path) -> str:
    """A .mcp.json with one good server (``good``) and three wrong entries; its path."""
    servers = {
        "unset": {"command": "x", "env": {"T": "${NOT_SET_ANYWHERE}"}},
        "good": {"command": sys.executable, "args": [DEMO], "timeout": 20},
        "a b": {"command": "x"},
        "nocmd": {"args": ["--stdio"]},
    }
    path = workdir / ".mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return str(path)


def problems(path: str) -> dict[str, str]:
    return {
        "unset": f"not started: its entry in {path}: ${{NOT_SET_ANYWHERE}} is not set in the "
        "environment",
        "a b": f"not started: its entry in {path}: a server name is 1-32 letters, digits, _ or -",
        "nocmd": f"not started: its entry in {path}: set either command (a program) or url "
        "(an HTTP server)",
    }


def test_each_wrong_entry_is_a_server_saying_why_and_the_good_one_is_read(workdir):
    path = write(workdir)

    servers = {s.name: s for s in project_servers(workdir)}

    assert list(servers) == ["unset", "good", "a b", "nocmd"]
    assert servers["good"].invalid == ""
    assert (servers["good"].command, servers["good"].args) == (sys.executable, (DEMO,))
    assert {n: s.invalid for n, s in servers.items() if n != "good"} == problems(path)


def test_a_name_that_would_break_the_line_is_shown_quoted(workdir):
    servers = {"two\nlines": {"command": "x"}}
    (workdir / ".mcp.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")

    (server,) = project_servers(workdir)

    assert server.name == '"two\\nlines"'
    assert "\n" not in server.invalid


def test_mcp_servers_that_is_not_an_object_still_fails_the_whole_file(workdir):
    (workdir / ".mcp.json").write_text('{"mcpServers": ["good"]}', encoding="utf-8")

    with pytest.raises(ConfigError, match='"mcpServers" must be an object of servers'):
        project_servers(workdir)


def test_the_good_server_is_approved_by_name_beside_wrong_entries(harness9_home, workdir):
    write(workdir)

    result = cli("mcp", "approve", "good", "--workdir", str(workdir))

    assert result.exit_code == 0, result.output
    assert result.stdout == f"approved good: {sys.executable} {DEMO}\n"
    approvals = json.loads((harness9_home / "mcp_approvals.json").read_text(encoding="utf-8"))
    assert list(approvals[str(workdir)]) == ["good"]


def test_approve_all_approves_the_good_and_names_each_wrong_one_exit_1(harness9_home, workdir):
    path = write(workdir)

    result = cli("mcp", "approve", "--all", "--workdir", str(workdir))

    assert result.exit_code == 1
    assert result.stdout == f"approved good: {sys.executable} {DEMO}\n"
    assert result.stderr == "".join(
        f"harness9: cannot approve {name}: {why}\n" for name, why in problems(path).items()
    )
    approvals = json.loads((harness9_home / "mcp_approvals.json").read_text(encoding="utf-8"))
    assert list(approvals[str(workdir)]) == ["good"]


def test_approving_a_wrong_entry_says_what_is_wrong(workdir):
    path = write(workdir)

    result = cli("mcp", "approve", "unset", "--workdir", str(workdir))

    assert result.exit_code == 1
    assert result.stderr == f"harness9: cannot approve unset: {problems(path)['unset']}\n"


def test_mcp_list_shows_wrong_entries_as_failed_and_the_good_one_ready(workdir):
    path = write(workdir)
    assert cli("mcp", "approve", "good", "--workdir", str(workdir)).exit_code == 0

    result = cli("mcp", "list", "--json", "--workdir", str(workdir))

    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert (rows["good"]["state"], rows["good"]["tools"]) == ("ready", 7)
    assert {n: (r["state"], r["error"]) for n, r in rows.items() if n != "good"} == {
        n: ("failed", why) for n, why in problems(path).items()
    }


def test_mcp_tools_of_a_wrong_entry_is_one_line_exit_1(workdir):
    path = write(workdir)

    result = cli("mcp", "tools", "nocmd", "--workdir", str(workdir))

    assert result.exit_code == 1
    assert result.stderr == f"harness9: server nocmd failed: {problems(path)['nocmd']}\n"


def test_chat_reports_each_wrong_entry_in_one_line_and_uses_the_good_server(llm_server, workdir):
    path = write(workdir)
    assert cli("mcp", "approve", "good", "--workdir", str(workdir)).exit_code == 0
    script(llm_server, ("c1", "mcp__good__add", {"a": 2, "b": 3}))

    result = chat(llm_server, "add\n", "--yes", workdir=workdir)

    assert result.exit_code == 0, result.output
    assert tool_messages(llm_server.requests[1]) == ["sum=5"]
    lines = result.stderr.splitlines()
    for name, why in problems(path).items():
        assert f"mcp: server {name} {why}" in lines


def test_a_wrong_entry_is_not_asked_about_at_a_terminal(llm_server, workdir):
    (workdir / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"nocmd": {"args": ["--stdio"]}}}), encoding="utf-8"
    )
    llm_server.reply_text("hello")

    result, env = one_shot(llm_server, workdir, "hi", "y\n")

    assert result.exit_code == 0, env.stderr.getvalue()
    assert "asks to start" not in env.stderr.getvalue()


def test_a_wrong_entry_is_never_started_again_by_a_call():
    why = "not started: its entry in /w/.mcp.json: a server name is 1-32 letters, digits, _ or -"
    manager = McpManager([McpServer("a b", source=".mcp.json", invalid=why)])

    with pytest.raises(ServerUnavailable, match="server a b not started: its entry in"):
        manager.ensure("a b")
    assert manager.views()[0].state == "failed"
    manager.close()
