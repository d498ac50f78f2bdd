"""The `sessions` group names all its commands, and `fork` and `import` answer alike
(issue 36, item 15): the new id on stdout, what was done on stderr, --json for scripts."""

from __future__ import annotations

import json

from harness9.config import store_location
from harness9.schema import Message
from harness9.store import open_manager
from tests.support.cli import cli


def stored_session() -> str:
    with open_manager(store_location()) as m:
        s = m.new_session()
        s.add_messages([Message("user", "q1"), Message("assistant", "a1")] * 2)
        return s.session_id


def test_the_sessions_summary_names_fork():
    top = cli("--help").stdout
    group = cli("sessions", "--help").stdout

    [line] = [x for x in top.splitlines() if x.strip().startswith("sessions ")]
    assert "fork" in line
    assert "Stored sessions: list, show, search, fork, export, import, migrate, delete." in group


def test_fork_json_names_the_fork_and_where_it_came_from():
    sid = stored_session()

    result = cli("sessions", "fork", sid, "--at", "3", "--json")

    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data == {
        "id": data["id"],
        "message_count": 3,
        "forked_from": {"session_id": sid, "message": 3},
    }
    assert len(data["id"]) == 36 and data["id"] != sid


def test_fork_and_import_both_print_the_bare_id_and_say_what_they_did_on_stderr(tmp_path):
    sid = stored_session()
    out = tmp_path / "s.json"
    assert cli("sessions", "export", sid, "-f", "json", "-o", str(out)).exit_code == 0

    forked = cli("sessions", "fork", sid)
    imported = cli("sessions", "import", str(out), "--new-id")

    for result in (forked, imported):
        assert result.exit_code == 0, result.stderr
        [new_id] = result.stdout.split()
        assert len(new_id) == 36 and new_id != sid
    assert forked.stderr == f"Forked session {sid} at message 4 (4 messages) into " + (
        f"{forked.stdout.strip()}.\n"
    )
    copy = imported.stdout.strip()
    assert imported.stderr == f"Imported session {copy} (4 messages, a copy of {sid}).\n"


def test_import_json_names_the_new_session(tmp_path):
    sid = stored_session()
    out = tmp_path / "s.json"
    assert cli("sessions", "export", sid, "-f", "json", "-o", str(out)).exit_code == 0

    result = cli("sessions", "import", str(out), "--new-id", "--json")

    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data == {
        "id": data["id"],
        "message_count": 4,
        "subagent_sessions": 0,
        "copy_of": sid,
    }
