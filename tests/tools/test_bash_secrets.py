"""Secrets in the user's environment never reach a bash command, its output or the database."""

from __future__ import annotations

import json
import sqlite3

import pytest
from typer.testing import CliRunner

from harness9.cli import app
from harness9.config import db_path
from harness9.tools.shell import child_env

runner = CliRunner()

SECRETS = {
    "GITHUB_TOKEN": "ghp_secret_token_value",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLEVALUE",
    "DB_PASSWORD": "hunter2-password",
    "STRIPE_KEY": "sk_live_value",
    "MY_CLIENT_SECRET": "client-secret-value",
    "OPENAI_API_KEY": "sk-test",
}


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HARMLESS_SETTING", "visible")


def run_env_in_chat(server) -> str:
    server.reply_tool_calls([("call_1", "bash", json.dumps({"command": "env"}))])
    server.reply_text("done")
    result = runner.invoke(
        app,
        ["chat", "--yes", "--model", "openai/fake", "--api-base", server.base_url],
        input="show the environment\n",
    )
    assert result.exit_code == 0, result.output
    conn = sqlite3.connect(db_path())
    [(output,)] = conn.execute("SELECT content FROM messages WHERE role = 'tool'").fetchall()
    conn.close()
    return output


def test_common_secret_variables_are_scrubbed_from_bash(llm_server, secret_env):
    output = run_env_in_chat(llm_server)

    assert "HARMLESS_SETTING=visible" in output
    for name, value in SECRETS.items():
        assert value not in output, name
    sent = json.dumps(llm_server.requests[-1]["messages"])
    assert "ghp_secret_token_value" not in sent


def test_a_variable_listed_in_harness9_bash_pass_env_is_passed_on(
    llm_server, secret_env, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("HARNESS9_BASH_PASS_ENV", "GITHUB_TOKEN, DB_PASSWORD")

    output = run_env_in_chat(llm_server)

    assert "GITHUB_TOKEN=ghp_secret_token_value" in output
    assert "DB_PASSWORD=hunter2-password" in output
    assert "aws-secret-value" not in output


@pytest.mark.parametrize(
    "name", ["PATH", "HOME", "LANG", "KEYBOARD_LAYOUT", "MONKEY", "TERM", "AWSOME_TOOL"]
)
def test_ordinary_variables_are_kept(name: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(name, "x")
    assert child_env()[name] == "x"
