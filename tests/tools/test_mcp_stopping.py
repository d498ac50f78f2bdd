"""A stdio server that never answers is stopped, whoever gives up on it: its start
timing out, `mcp list` returning, Ctrl-C while a command waits for it, or the chat
ending at the moment its start times out. No server's process outlives harness9."""

from __future__ import annotations

import _thread
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from harness9.config import mcp_server
from harness9.tools.mcp import manager as mcp_manager
from harness9.tools.mcp.manager import McpManager
from tests.support.cli import cli, wait_until
from tests.tools.test_mcp import configure

# Writes its pid, then sleeps without ever reading stdin: a server that never answers.
SILENT = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"
START_S = 2.0  # the shortest start a server is given, for these tests (30 s for users)


@pytest.fixture(autouse=True)
def short_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mcp_manager, "START_AT_LEAST_S", START_S)


def silent(pidfile: Path) -> dict:
    return {"command": sys.executable, "args": ["-c", SILENT, str(pidfile)], "timeout": 1}


def alive(pidfile: Path) -> bool:
    """Whether the server's process still runs (a zombie does not count)."""
    pid = int(pidfile.read_text())
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_mcp_list_says_a_server_that_never_answers_did_not_start_and_stops_it(
    harness9_home, workdir, tmp_path
):
    pidfile = tmp_path / "pid"
    configure(harness9_home, {"mute": silent(pidfile)})

    result = cli("mcp", "list", "--json", "--workdir", str(workdir))

    assert result.exit_code == 0, result.output
    assert '"error": "did not start: no answer within its timeout"' in result.stdout
    assert not alive(pidfile)


def test_ctrl_c_while_mcp_list_waits_stops_the_server(harness9_home, workdir, tmp_path):
    pidfile = tmp_path / "pid"
    configure(harness9_home, {"mute": silent(pidfile)})

    def ctrl_c_once_started() -> None:
        wait_until(pidfile.exists, "the server to start")
        time.sleep(0.3)
        _thread.interrupt_main()

    threading.Thread(target=ctrl_c_once_started, daemon=True).start()
    result = cli("mcp", "list", "--workdir", str(workdir))

    assert result.exit_code == 130
    assert not alive(pidfile)


@pytest.mark.parametrize("after", [START_S - 0.05, START_S + 0.05, START_S + 0.5])
def test_closing_around_the_moment_a_start_times_out_stops_the_server(tmp_path, after):
    pidfile = tmp_path / "pid"
    server = mcp_server("mute", silent(pidfile), source="config", where="test")
    manager = McpManager([server])
    manager.start()
    wait_until(pidfile.exists, "the server to start")
    time.sleep(after)

    manager.close()

    wait_until(lambda: not alive(pidfile), "the server to stop", timeout=10)
    assert os.path.exists(pidfile)
