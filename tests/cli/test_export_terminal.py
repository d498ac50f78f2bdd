"""`sessions export` to a terminal shows stored escapes as text; a pipe or a file keeps them."""

from __future__ import annotations

import json
from pathlib import Path

from harness9.config import db_path
from harness9.schema import Message
from harness9.store import Manager
from tests.support.cli import cli, piped, terminal

HOSTILE = "before\x1b[2Jafter \u202eevil\x07"


def hostile_session() -> str:
    with Manager(db_path()) as m:
        s = m.new_session()
        s.add_messages([Message("user", "show me"), Message("assistant", HOSTILE)])
        return s.session_id


def test_export_to_a_terminal_escapes_control_and_bidi_characters():
    sid = hostile_session()
    env = terminal()

    result = cli("sessions", "export", sid, obj=env)

    assert result.exit_code == 0, result.output
    shown = env.stdout.getvalue()
    assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert "before\\x1b[2Jafter \\u202eevil\\x07" in shown


def test_export_to_a_pipe_keeps_the_exact_text():
    sid = hostile_session()
    env = piped()

    assert cli("sessions", "export", sid, "--format", "json", obj=env).exit_code == 0

    [_, reply] = json.loads(env.stdout.getvalue())["messages"]
    assert reply["content"] == HOSTILE


def test_export_to_a_file_from_a_terminal_keeps_the_exact_text(tmp_path: Path):
    sid = hostile_session()
    out = tmp_path / "s.md"

    assert cli("sessions", "export", sid, "-o", str(out), obj=terminal()).exit_code == 0

    assert HOSTILE in out.read_text(encoding="utf-8")
