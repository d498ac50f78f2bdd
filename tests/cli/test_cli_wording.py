"""Small things a user notices: plurals, exit codes, where --debug works, help and pipes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from harness9.schema import Message
from harness9.ui.status import tool_result_line
from tests.support.cli import cli, cli_env
from tests.support.cli import stored_session as make_session

runner = CliRunner()


def test_one_extra_line_is_singular():
    assert tool_result_line("a\nb", False).plain.endswith("a (+1 line)")
    assert tool_result_line("a\nb\nc", False).plain.endswith("a (+2 lines)")


def test_show_of_one_message_says_1_message():
    sid = make_session(Message("user", "alone"))
    out = cli("sessions", "show", sid).stdout
    assert " · 1 message\n" in out and "1 messages" not in out


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_works_before_and_after_the_subcommand(where: str):
    args = ["sessions", "show", "nosuch"]
    args = ["--debug", *args] if where == "before" else [*args, "--debug"]

    result = cli(*args)

    assert result.exit_code == 1
    assert "Traceback" in result.stderr
    assert result.stderr.endswith("harness9: no session with id 'nosuch'\n")


def test_debug_after_a_double_dash_is_a_search_word():
    make_session(Message("user", "run it with --debug please"))
    result = cli("sessions", "search", "--json", "--", "--debug")
    assert result.exit_code == 0 and "Traceback" not in result.stderr


def test_messages_in_show_are_numbered_per_session_and_json_keeps_row_ids():
    make_session(Message("user", "other session"), Message("assistant", "filler"))
    sid = make_session(Message("user", "fresh"), Message("assistant", "reply"))

    out = cli("sessions", "show", sid).stdout
    data = json.loads(cli("sessions", "show", sid, "--json").stdout)

    assert "#1 user" in out and "#2 assistant" in out and "#3" not in out
    assert [m["id"] for m in data["messages"]] == [3, 4]


def test_piped_show_is_not_hard_wrapped_at_80_columns():
    command = "grep -rn 'some long pattern' " + "src/module/path/file.py " * 8
    sid = make_session(Message("user", command))
    out = cli("sessions", "show", sid).stdout
    assert command in out.splitlines()


def test_a_bad_format_choice_is_one_clean_usage_line():
    sid = make_session(Message("user", "x"))
    result = cli("sessions", "export", sid, "-f", "yaml")
    assert result.exit_code == 2
    assert result.stderr == "harness9: --format must be markdown or json, got 'yaml'\n"


@pytest.mark.parametrize(
    "command", [["sessions", "show"], ["sessions", "delete"], ["sessions", "search"], ["chat"]]
)
def test_help_names_parameters_plainly(command: list[str]):
    out = cli(*command, "--help").stdout
    for python_type in ("<str>", "<int", "<list[", "{session_id}", "<path>"):
        assert python_type not in out, python_type


def test_show_into_a_pipe_closed_early_exits_0_quietly():
    sid = make_session(*(Message("user", f"line {i} " + "x" * 200) for i in range(2000)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness9", "sessions", "show", sid],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # what `| head -1` does
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0
    assert err == b""
