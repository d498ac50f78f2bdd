"""A stdio server's stderr log ($HARNESS9_HOME/mcp-logs/NAME.log) does not grow without
end: past 1 MiB it is moved to NAME.log.1 when the server next starts."""

from __future__ import annotations

import sys

from harness9.config import mcp_server
from harness9.tools.mcp.manager import McpManager
from tests.tools.test_mcp import DEMO


def started_and_stopped() -> None:
    server = mcp_server("demo", {"command": sys.executable, "args": [DEMO]}, source="config",
                        where="test")  # fmt: skip
    manager = McpManager([server])
    manager.start()
    manager.wait_ready()
    assert manager.views()[0].state == "ready"
    manager.close()


def test_a_log_past_one_mib_is_moved_aside_when_its_server_starts(harness9_home):
    logs = harness9_home / "mcp-logs"
    logs.mkdir(parents=True)
    old = "an old line of the server's chatter\n" * 30_000  # 1.08 MB
    (logs / "demo.log").write_text(old, encoding="utf-8")

    started_and_stopped()

    assert (logs / "demo.log.1").read_text(encoding="utf-8") == old
    assert (logs / "demo.log").stat().st_size < 1024


def test_a_smaller_log_is_kept_and_appended_to(harness9_home):
    logs = harness9_home / "mcp-logs"
    logs.mkdir(parents=True)
    (logs / "demo.log").write_text("earlier\n", encoding="utf-8")

    started_and_stopped()

    assert (logs / "demo.log").read_text(encoding="utf-8").startswith("earlier\n")
    assert not (logs / "demo.log.1").exists()
