"""A home the user cannot write: reading commands work, writing ones name the cause and the fix.

As root, permissions do not stop writes, so the directory is made immutable
(chattr +i) instead; as anyone else it is chmod 0555.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness9.config import db_path
from harness9.schema import Message
from harness9.store import open_manager
from tests.support.cli import cli

runner = CliRunner()


@pytest.fixture
def read_only_home(harness9_home: Path) -> Iterator[tuple[Path, str]]:
    with open_manager(db_path()) as m:
        s = m.new_session()
        s.add_messages([Message("user", "hello from a read-only home"), Message("assistant", "ok")])
        sid = s.session_id
    cli("sessions", "search", "hello")  # index what is there
    with open_manager(db_path()) as m:
        m.open_session(sid).add_messages([Message("user", "written after the last search")])
    if os.geteuid() == 0:
        if shutil.which("chattr") is None:
            pytest.skip("running as root without chattr: cannot make a directory read-only")
        if subprocess.run(["chattr", "+i", str(harness9_home)]).returncode != 0:
            pytest.skip("this file system does not support chattr +i")
        undo = ["chattr", "-i", str(harness9_home)]
    else:
        harness9_home.chmod(0o555)
        undo = ["chmod", "700", str(harness9_home)]
    try:
        yield harness9_home, sid
    finally:
        subprocess.run(undo, check=True)


def test_reading_commands_work_on_a_read_only_store(read_only_home):
    home, sid = read_only_home

    listed = cli("sessions", "list", "--json")
    shown = cli("sessions", "show", sid, "--json")
    exported = cli("sessions", "export", sid, "-f", "json")
    found = cli("sessions", "search", "--json", "hello")

    for result in (listed, shown, exported, found):
        assert result.exit_code == 0, result.output
    assert [s["id"] for s in json.loads(listed.stdout)] == [sid]
    assert len(json.loads(shown.stdout)["messages"]) == 3
    assert json.loads(exported.stdout)["message_count"] == 3
    assert [h["session_id"] for h in json.loads(found.stdout)] == [sid]
    assert found.stderr == (
        "warning: the store is read-only, so the 1 message stored since the last search "
        "could not be indexed and were not searched\n"
    )
    assert sorted(p.name for p in home.iterdir()) == ["sessions.db"]  # nothing created


def test_writing_commands_name_the_cause_and_the_fix(read_only_home):
    home, sid = read_only_home

    deleted = cli("sessions", "delete", sid, "--yes")
    chatted = cli(
        "chat", "--model", "openai/x", "--api-base", "http://127.0.0.1:9/v1", input="hi\n"
    )

    assert deleted.exit_code == 1
    assert deleted.stderr == (
        f"harness9: cannot write session database {home / 'sessions.db'}: the directory {home} "
        "is not writable; make it writable or point HARNESS9_HOME at a writable directory\n"
    )
    assert chatted.exit_code == 1
    assert chatted.stderr == (
        f"harness9: cannot open session database {home / 'sessions.db'}: the directory {home} "
        f"is not writable; make it writable (e.g. chmod u+w {home}) or point HARNESS9_HOME at a "
        "writable directory\n"
    )
    assert "unable to open database file" not in deleted.stderr + chatted.stderr
