"""The line chat prints under a tool call: success or failure at a glance, never raw escapes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import chat


def run_bash(llm_server, workdir: Path, command: str):
    llm_server.reply_tool_calls([("call_1", "bash", json.dumps({"command": command}))])
    llm_server.reply_text("done")
    return chat(llm_server, "go\n", "--yes", workdir=workdir)


def tool_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("  ✓") or ln.startswith("  ✗")]


def test_a_command_that_fails_is_shown_as_a_failure_with_its_exit_code(llm_server, workdir):
    result = run_bash(llm_server, workdir, "echo 'fatal: not a git repository' >&2; exit 128")

    assert result.exit_code == 0, result.output
    assert tool_lines(result.stderr) == [
        "  ✗ exit code 128 · fatal: not a git repository (+1 line)"
    ]
    # The model still gets the whole result, exit code included.
    tool_msg = llm_server.requests[1]["messages"][-1]
    assert tool_msg["content"] == "fatal: not a git repository\nexit code: 128"


def test_a_command_that_succeeds_keeps_its_check_mark(llm_server, workdir):
    result = run_bash(llm_server, workdir, "echo fine")

    assert tool_lines(result.stderr) == ["  ✓ fine (+1 line)"]


def test_escape_sequences_in_command_output_are_shown_not_obeyed(llm_server, workdir):
    result = run_bash(llm_server, workdir, r"printf 'a\033[2Jb\342\200\256c\n'")

    [line] = tool_lines(result.stderr)
    assert line == "  ✓ a\\x1b[2Jb\\u202ec (+1 line)"
    assert "\x1b" not in result.stderr and "\u202e" not in result.stderr
