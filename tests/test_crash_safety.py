"""kill -9 of a real `harness9 chat` while a tool runs; the long loop is scripts/chaos.py."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time

from support import cli_env
from typer.testing import CliRunner

from harness9.cli import app
from harness9.config import db_path
from harness9.context import is_valid_tool_sequence
from harness9.schema import Message, ToolCall
from harness9.store import Manager


def test_kill_9_while_a_tool_runs_keeps_the_call_and_resume_sends_a_valid_sequence(
    llm_server, harness9_home, tmp_path
):
    call = ("call_slow", "bash", json.dumps({"command": "sleep 3; echo late"}))
    llm_server.reply_tool_calls([call], content="running it")
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness9", "chat", "--model", "openai/t", "--yes"]
        + ["--api-base", llm_server.base_url, "--workdir", str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=cli_env(HARNESS9_HOME=str(harness9_home), OPENAI_API_KEY="sk-test"),
        text=True,
    )
    proc.stdin.write("run the slow thing\n")
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    while not llm_server.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the reply is saved and `sleep 3` is running
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdin.close()
    assert "Traceback" not in proc.stderr.read()
    proc.stderr.close()

    conn = sqlite3.connect(db_path())
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    with Manager(db_path()) as m:
        [info] = m.list_sessions()
        stored = m.open_session(info.id).get_messages()
    assert stored == [
        Message("user", "run the slow thing"),
        Message("assistant", "running it", [ToolCall(*call)]),
    ]

    llm_server.reply_text("picked up where we were")
    result = CliRunner().invoke(
        app,
        ["chat", "--model", "openai/t", "--api-base", llm_server.base_url, "--resume", info.id],
        input="go on\n",
    )

    assert result.exit_code == 0, result.output
    sent = [Message.from_dict(m) for m in llm_server.requests[-1]["messages"][1:]]
    assert is_valid_tool_sequence(sent)
    assert [(m.role, m.tool_call_id) for m in sent] == [
        ("user", ""),
        ("assistant", ""),
        ("tool", "call_slow"),
        ("user", ""),
    ]
