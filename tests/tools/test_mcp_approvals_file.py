"""$HARNESS9_HOME/mcp_approvals.json written by two processes at once (two terminals
approving servers at the same moment): every approval is kept, and neither writer fails."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.support.cli import REPO_ROOT, cli_env

APPROVALS_PER_PROCESS = 40

# Says it is READY, waits for GO, then approves servers NAME0, NAME1 ... of WORKDIR's
# .mcp.json, one approval a call.
APPROVER = """
import pathlib, sys, time
from harness9.config import McpServer
from harness9.tools.mcp.project import approve
work, who, go = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
(go.parent / f"{who}-ready").touch()
while not go.exists():
    time.sleep(0.001)
for i in range(int(sys.argv[4])):
    approve(work, McpServer(f"{who}{i}", source=".mcp.json", command="srv", args=(str(i),)))
"""


def approvers(workdir: Path, go: Path, *names: str) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", APPROVER, str(workdir), name, str(go)]
            + [str(APPROVALS_PER_PROCESS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
            env=cli_env(),
        )
        for name in names
    ]


def test_two_processes_approving_at_once_keep_every_approval(harness9_home, workdir, tmp_path):
    go = tmp_path / "go"
    procs = approvers(workdir, go, "a", "b")
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"{who}-ready").exists() for who in "ab"):
        assert time.monotonic() < deadline, "the approvers never started"
        time.sleep(0.01)
    go.touch()
    errors = [p.communicate(timeout=120)[1] for p in procs]

    assert [p.returncode for p in procs] == [0, 0], errors
    approved = json.loads((harness9_home / "mcp_approvals.json").read_text(encoding="utf-8"))
    expected = {f"{who}{i}" for who in "ab" for i in range(APPROVALS_PER_PROCESS)}
    assert set(approved[str(workdir)]) == expected
    assert sorted(p.name for p in harness9_home.iterdir()) == [
        "mcp_approvals.json",
        "mcp_approvals.lock",
    ]  # no temporary file left behind
