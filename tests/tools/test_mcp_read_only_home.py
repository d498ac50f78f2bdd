"""MCP servers run when $HARNESS9_HOME cannot be written (a read-only mount holding the
config, the sessions in PostgreSQL): their stderr logs are what is given up, not the
servers. The mount is real: the home bound read-only onto itself in a mount namespace of
its own (``unshare -rm``, no root needed), with harness9 run inside it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.read_only import can_mount_read_only, run_read_only
from tests.tools.test_mcp import configure, demo


@pytest.fixture
def read_only_home(harness9_home: Path) -> Path:
    harness9_home.mkdir(parents=True, exist_ok=True)
    if not can_mount_read_only(harness9_home):
        pytest.skip("no mount namespaces here: cannot make a read-only file system")
    return harness9_home


def test_a_stdio_server_lists_its_tools_from_a_read_only_home(read_only_home, workdir):
    configure(read_only_home, {"demo": demo()})

    done = run_read_only(
        read_only_home, sys.executable, "-m", "harness9", "mcp", "list", "--json",
        "--workdir", str(workdir),
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)
    assert (row["name"], row["state"], row["tools"]) == ("demo", "ready", 7)
    assert not (read_only_home / "mcp-logs").exists()
