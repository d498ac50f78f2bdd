"""The entry point users run: ``harness9.cli:main``, -h, shell completion."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness9.cli import app, main
from harness9.config import db_path
from tests.support.cli import run_cli

runner = CliRunner()

COMMANDS = [
    [],
    ["chat"],
    ["compact"],
    ["sessions"],
    ["sessions", "list"],
    ["sessions", "show"],
    ["sessions", "delete"],
    ["sessions", "search"],
    ["sessions", "export"],
    ["sessions", "import"],
]


def test_the_console_script_is_main_and_main_runs_the_app():
    [script] = [e for e in entry_points(group="console_scripts") if e.name == "harness9"]
    assert script.value == "harness9.cli:main"
    assert script.load() is main


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a) or "harness9")
def test_h_is_help_on_every_command(argv: list[str]):
    short = runner.invoke(app, [*argv, "-h"])
    long = runner.invoke(app, [*argv, "--help"])
    assert short.exit_code == 0, short.output
    assert short.stdout.startswith(f"Usage: harness9 {' '.join(argv)}".rstrip())
    assert "-h, --help" in short.stdout
    assert short.stdout == long.stdout


def test_h_in_a_real_process_prints_help_without_importing_litellm():
    result = run_cli("sessions", "list", "-h", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0 and result.stdout.startswith("Usage: harness9 sessions list")
    assert "harness9.cli" in result.stderr and "litellm" not in result.stderr


def test_show_completion_prints_the_script_for_the_users_shell():
    result = runner.invoke(app, ["--show-completion"], env={"SHELL": "/bin/bash"})
    assert result.exit_code == 0
    assert "_harness9_completion()" in result.stdout
    assert "complete " in result.stdout and "harness9" in result.stdout


def test_install_completion_writes_the_script_and_sources_it(tmp_path: Path):
    home = tmp_path / "user"
    home.mkdir()
    result = runner.invoke(
        app, ["--install-completion"], env={"SHELL": "/bin/bash", "HOME": str(home)}
    )
    assert result.exit_code == 0, result.output
    script = home / ".bash_completions" / "harness9.sh"
    assert "_harness9_completion()" in script.read_text()
    assert str(script) in (home / ".bashrc").read_text()


def test_environment_backed_options_name_their_variable_in_help():
    help_text = runner.invoke(app, ["chat", "-h"], terminal_width=200).stdout
    for var in ("LLM_MODEL", "LLM_API_BASE", "HARNESS9_CONTEXT_WINDOW", "HARNESS9_TIMEOUT"):
        assert f"env var: {var}" in help_text, var


def test_a_bad_context_window_in_the_environment_is_a_usage_error_naming_it():
    result = runner.invoke(app, ["compact", "--dry-run"], env={"HARNESS9_CONTEXT_WINDOW": "lots"})
    assert result.exit_code == 2
    assert "HARNESS9_CONTEXT_WINDOW" in result.stderr and "Traceback" not in result.stderr


def test_the_environment_variable_is_the_default_and_the_flag_wins():
    from harness9.schema import Message
    from harness9.store import open_manager

    with open_manager(db_path()) as m:
        m.new_session().add_messages([Message("user", "x" * 4000)])
    env = {"HARNESS9_CONTEXT_WINDOW": "5000"}
    from_env = runner.invoke(app, ["compact", "--dry-run", "--json"], env=env)
    flag = runner.invoke(
        app, ["compact", "--dry-run", "--json", "--context-window", "9000"], env=env
    )
    assert json.loads(from_env.stdout)["context_window"] == 5000
    assert json.loads(flag.stdout)["context_window"] == 9000
