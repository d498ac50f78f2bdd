"""An approval of a .mcp.json server is for its entry as the file writes it: a token the
user's environment gives it through ${VAR} may change (a rotated key) without asking
again, while a change of the file's text still asks."""

from __future__ import annotations

import json
from pathlib import Path

from harness9.tools.mcp.project import approve, is_approved, project_servers


def write(workdir: Path, env: dict[str, str]) -> None:
    entry = {"command": "gh-mcp", "args": ["--stdio"], "env": env}
    (workdir / ".mcp.json").write_text(json.dumps({"mcpServers": {"gh": entry}}), "utf-8")


def test_a_rotated_token_behind_a_variable_keeps_the_approval(workdir, monkeypatch):
    write(workdir, {"TOKEN": "${GH_TOKEN}"})
    monkeypatch.setenv("GH_TOKEN", "ghp_old")
    (server,) = project_servers(workdir)
    approve(workdir, server)

    monkeypatch.setenv("GH_TOKEN", "ghp_new")
    (rotated,) = project_servers(workdir)

    assert rotated.env == (("TOKEN", "ghp_new"),)
    assert is_approved(workdir, rotated)


def test_a_changed_entry_text_needs_approving_again(workdir, monkeypatch):
    monkeypatch.setenv("GH_TOKEN", "ghp_same")
    write(workdir, {"TOKEN": "${GH_TOKEN}"})
    (server,) = project_servers(workdir)
    approve(workdir, server)

    write(workdir, {"TOKEN": "${GH_TOKEN}", "EXTRA": "1"})
    (changed,) = project_servers(workdir)

    assert not is_approved(workdir, changed)
