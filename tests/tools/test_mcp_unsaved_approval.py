"""Approving a project's server when the approval cannot be saved (a read-only home, a full
disk, a damaged approvals file): `mcp approve` says so in one line, exit 1, and keeps the
file as it was; at chat's question the server runs for that chat, and a line says the
answer was not kept."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support.cli import cli
from tests.tools.test_mcp import DEMO, script, tool_messages
from tests.tools.test_mcp_approval import one_shot


def project(workdir: Path) -> None:
    servers = {"proj": {"command": sys.executable, "args": [DEMO]}}
    (workdir / ".mcp.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")


def unwritable_approvals(home: Path) -> Path:
    """A home where the approvals file cannot be written: its lock file is a directory
    (an OSError for anyone, root included, as a read-only mount is)."""
    (home / "mcp_approvals.lock").mkdir(parents=True)
    return home / "mcp_approvals.json"


def test_mcp_approve_that_cannot_save_is_one_line_and_exit_1(harness9_home, workdir):
    project(workdir)
    path = unwritable_approvals(harness9_home)

    result = cli("mcp", "approve", "proj", "--workdir", str(workdir))

    assert result.exit_code == 1
    assert (
        result.stderr == f"harness9: cannot save the approval of proj in {path}: Is a directory\n"
    )


def test_a_yes_at_chats_question_that_cannot_be_saved_runs_the_server_for_that_chat(
    llm_server, harness9_home, workdir
):
    project(workdir)
    path = unwritable_approvals(harness9_home)
    script(llm_server, ("c1", "mcp__proj__add", {"a": 2, "b": 2}))

    result, env = one_shot(llm_server, workdir, "add", "y\ny\n")

    assert result.exit_code == 0, env.stderr.getvalue()
    assert (
        f"mcp: cannot save the approval of proj in {path}: Is a directory; "
        "it runs for this chat only"
    ) in env.stderr.getvalue()
    assert tool_messages(llm_server.requests[1]) == ["sum=4"]


def test_approving_with_a_damaged_approvals_file_keeps_it_and_says_so(harness9_home, workdir):
    project(workdir)
    path = harness9_home / "mcp_approvals.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"/other/project": {"db": "0123', encoding="utf-8")  # cut short

    result = cli("mcp", "approve", "proj", "--workdir", str(workdir))

    assert result.exit_code == 1
    assert result.stderr == f"harness9: cannot read {path} (not valid JSON): fix or remove it\n"
    assert path.read_text(encoding="utf-8") == '{"/other/project": {"db": "0123'
