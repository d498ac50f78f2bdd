"""kill -9 of a real `harness9 chat` while a tool runs; the long loop is scripts/chaos.py."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from harness9.cli import app
from harness9.config import db_path
from harness9.context import is_valid_tool_sequence
from harness9.schema import Message, ToolCall
from harness9.store import Manager
from tests.support.cli import cli_env


def wait_until(condition: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        assert proc.poll() is None, "harness9 chat exited before the state was reached"
        assert time.monotonic() < deadline, "timed out waiting for harness9 chat"
        time.sleep(0.02)


def assistant_rows(db: Path) -> int:
    """Committed assistant messages, read without creating or migrating anything."""
    if not db.exists():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        (n,) = conn.execute("SELECT count(*) FROM messages WHERE role = 'assistant'").fetchone()
        return n
    except sqlite3.OperationalError:  # the schema is not created yet
        return 0
    finally:
        conn.close()


def test_kill_9_while_a_tool_runs_keeps_the_call_and_resume_sends_a_valid_sequence(
    llm_server, harness9_home, tmp_path
):
    marker = tmp_path / "tool-started"
    release = tmp_path / "release"
    # Runs until the test lets it go, so the kill lands while it runs, however slow the machine.
    command = f"touch {marker.name}; while [ ! -e {release.name} ]; do sleep 0.05; done; echo late"
    call = ("call_slow", "bash", json.dumps({"command": command}))
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
    # Kill only once the state under test exists: the assistant's tool call is committed
    # and the bash command is running (it has written its marker file).
    wait_until(lambda: assistant_rows(db_path()) >= 1 and marker.exists(), proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    release.touch()  # the orphaned command exits and lets go of the stderr pipe
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
