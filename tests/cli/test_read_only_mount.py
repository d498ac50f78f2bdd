"""A home on a read-only file system is called that, with a fix that can work (issue 36,
item 20): no chmod makes a read-only mount writable.

The mount is real: a read-only tmpfs in a mount namespace of its own (``unshare -rm``, no
root needed), with harness9 run inside it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness9.config import store_location
from harness9.schema import Message
from harness9.store import open_manager
from tests.support.cli import cli
from tests.support.read_only import EMPTY, can_mount_read_only, run_read_only


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Path:
    home = tmp_path / "ro-home"
    home.mkdir()
    if not can_mount_read_only(home, EMPTY):
        pytest.skip("no mount namespaces here: cannot make a read-only file system")
    return home


def test_a_home_on_a_read_only_file_system_is_called_that_and_no_chmod_is_advised(
    read_only_mount: Path, tmp_path: Path
):
    with open_manager(store_location()) as m:  # a valid export, made in a writable home
        s = m.new_session()
        s.add_messages([Message("user", "hello"), Message("assistant", "hi")])
    export = tmp_path / "s.json"
    assert cli("sessions", "export", s.session_id, "-f", "json", "-o", str(export)).exit_code == 0

    result = run_read_only(
        read_only_mount, sys.executable, "-m", "harness9", "sessions", "import", str(export),
        mount=EMPTY,
    )  # fmt: skip

    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line == (
        f"harness9: cannot open session database {read_only_mount / 'sessions.db'}: "
        f"{read_only_mount} is on a read-only file system; it cannot be made writable from "
        "here (remount it read-write), or point HARNESS9_HOME at a directory on a writable "
        "file system"
    )
    assert "chmod" not in result.stderr
