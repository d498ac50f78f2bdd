"""`harness9 mcp tools` and `mcp approve` where there is nothing to show or approve: one
line saying why and what to do (exit 1 when the server is at fault, not the command line)."""

from __future__ import annotations

import json
import sys

from tests.support.cli import cli
from tests.tools.test_mcp import configure, demo, write_project


def test_tools_of_a_server_that_does_not_start_is_an_error_not_a_usage_mistake(
    harness9_home, workdir
):
    configure(harness9_home, {"ghost": {"command": str(workdir / "none"), "timeout": 5}})

    result = cli("mcp", "tools", "ghost", "--workdir", str(workdir))

    assert result.exit_code == 1
    assert result.stderr == (
        f"harness9: server ghost failed: did not start: command not found ({workdir / 'none'})\n"
    )


def test_tools_of_an_unapproved_project_server_says_how_to_approve_it(workdir, tmp_path):
    write_project(workdir, tmp_path / "marker")

    result = cli("mcp", "tools", "proj", "--workdir", str(workdir))

    assert result.exit_code == 1
    assert result.stderr == (
        "harness9: server proj of .mcp.json is not approved for this directory; "
        "approve it with: harness9 mcp approve proj\n"
    )


def test_tools_of_a_disabled_server_names_the_setting(harness9_home, workdir):
    configure(harness9_home, {"demo": {**demo(), "enabled": False}})

    result = cli("mcp", "tools", "demo", "--workdir", str(workdir), "--json")

    assert result.exit_code == 1
    assert result.stderr == "harness9: server demo is disabled (enabled = false in config.toml)\n"
    assert result.stdout == ""


def test_approve_all_without_project_servers_says_there_is_nothing_to_approve(workdir):
    result = cli("mcp", "approve", "--all", "--workdir", str(workdir))

    assert result.exit_code == 0
    assert result.stderr == f"nothing to approve: {workdir / '.mcp.json'} names no server\n"


def test_approving_a_config_server_says_it_needs_no_approval(harness9_home, workdir):
    configure(harness9_home, {"demo": demo()})

    result = cli("mcp", "approve", "demo", "--workdir", str(workdir))

    assert result.exit_code == 2
    assert result.stderr == "harness9: server demo is in config.toml: it runs without approval\n"


def test_mcp_list_help_says_it_starts_the_servers_and_how_it_exits():
    text = " ".join(cli("mcp", "list", "--help").stdout.split())

    assert "Starts every enabled, approved server to ask for its tools" in text
    assert "A server that failed is a row saying why; the exit code is still 0." in text


def test_mcp_tools_help_says_when_it_exits_1():
    text = " ".join(cli("mcp", "tools", "--help").stdout.split())

    assert "Exit 1 when it has no tools to show (it failed, is not approved or is disabled)" in text


def test_tools_of_a_server_without_tools_says_so(harness9_home, workdir):
    empty = "from mcp.server.mcpserver import MCPServer; MCPServer('empty').run()"
    configure(harness9_home, {"empty": {"command": sys.executable, "args": ["-c", empty]}})

    human = cli("mcp", "tools", "empty", "--workdir", str(workdir))
    as_json = cli("mcp", "tools", "empty", "--workdir", str(workdir), "--json")

    assert (human.exit_code, human.stdout) == (0, "server empty lists no tools\n")
    assert (as_json.exit_code, as_json.stdout) == (0, "[]\n")


def test_a_server_whose_cwd_does_not_exist_is_told_apart_from_a_missing_command(
    harness9_home, workdir
):
    gone = workdir / "gone"
    configure(harness9_home, {"demo": {**demo(), "cwd": str(gone)}})

    result = cli("mcp", "list", "--json", "--workdir", str(workdir))

    assert result.exit_code == 0, result.output
    assert (
        json.loads(result.stdout)[0]["error"] == f"did not start: its cwd does not exist ({gone})"
    )
