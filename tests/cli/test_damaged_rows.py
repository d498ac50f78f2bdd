"""Readers survive damaged rows: one warning line per row, the rest shown, nothing crashes.

A row can be damaged by hand edits, disk faults or an older import that did not
validate: a BLOB where text belongs, a role no API knows, a time no calendar has.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from typer.testing import CliRunner

from harness9.config import db_path
from harness9.schema import Message
from harness9.store import open_manager
from tests.support.cli import cli

runner = CliRunner()


def session_with_four_messages() -> tuple[str, list[int]]:
    with open_manager(db_path()) as m:
        s = m.new_session()
        ids = s.add_messages(
            [
                Message("user", "first question"),
                Message("assistant", "first answer"),
                Message("user", "second question"),
                Message("assistant", "second answer"),
            ]
        )
        return s.session_id, ids


def damage(sql: str, *args: object) -> None:
    conn = sqlite3.connect(db_path())
    with conn:
        conn.execute(sql, args)
    conn.close()


DAMAGE = [
    pytest.param(
        "UPDATE messages SET content = CAST(content AS BLOB) WHERE id = ?",
        "content is a BLOB, not text",
        id="blob-content",
    ),
    pytest.param(
        "UPDATE messages SET created_at = 1e300 WHERE id = ?",
        "created_at 1e+300 is not a time",
        id="absurd-time",
    ),
    pytest.param(
        "UPDATE messages SET role = 'wizard' WHERE id = ?",
        "role 'wizard' is not one of system, user, assistant, tool",
        id="unknown-role",
    ),
    pytest.param(
        "UPDATE messages SET tool_call_id = X'63616c6c' WHERE id = ?",
        "tool_call_id is a BLOB, not text",
        id="blob-call-id",
    ),
]


@pytest.mark.parametrize(("sql", "reason"), DAMAGE)
def test_show_and_export_skip_a_damaged_row_with_the_documented_warning(sql, reason):
    sid, ids = session_with_four_messages()
    damage(sql, ids[2])
    warning = f"warning: message row {ids[2]} is corrupt ({reason}); skipped\n"

    shown = cli("sessions", "show", sid, "--json")
    exported = cli("sessions", "export", sid, "-f", "json")
    markdown = cli("sessions", "export", sid)

    for result in (shown, exported, markdown):
        assert result.exit_code == 0, result.output
        assert result.stderr == warning
    contents = [m["content"] for m in json.loads(shown.stdout)["messages"]]
    assert contents == ["first question", "first answer", "second answer"]
    assert json.loads(shown.stdout)["corrupt_rows"] == [{"id": ids[2], "reason": reason}]
    human = cli("sessions", "show", sid).stdout
    assert "#3 assistant" in human and "#4" not in human and "showing the last" not in human
    # What was skipped is not in the export either, and the export imports cleanly.
    assert json.loads(exported.stdout)["message_count"] == 3


@pytest.mark.parametrize(("sql", "reason"), DAMAGE)
def test_a_damaged_row_is_never_sent_to_the_model(llm_server, sql, reason):
    sid, ids = session_with_four_messages()
    damage(sql, ids[1])
    llm_server.reply_text("still here")

    result = cli(
        "chat",
        "--model",
        "openai/fake",
        "--api-base",
        llm_server.base_url,
        "--resume",
        sid,
        input="third question\n",
    )

    assert result.exit_code == 0, result.output
    assert result.stdout == "still here\n"
    assert f"warning: message row {ids[1]} is corrupt ({reason}); skipped\n" in result.stderr
    assert "HTTP 500" not in result.stderr
    sent = [(m["role"], m["content"]) for m in llm_server.requests[-1]["messages"][1:]]
    assert sent == [
        ("user", "first question"),
        ("user", "second question"),
        ("assistant", "second answer"),
        ("user", "third question"),
    ]


def test_a_session_row_with_an_absurd_time_does_not_break_list_show_or_export():
    sid, _ = session_with_four_messages()
    damage("UPDATE sessions SET created_at = 1e300, updated_at = -1e300 WHERE id = ?", sid)

    listed = cli("sessions", "list", "--json")
    human = cli("sessions", "list")
    shown = cli("sessions", "show", sid)
    exported = cli("sessions", "export", sid)

    for result in (listed, human, shown, exported):
        assert result.exit_code == 0, result.output
        assert "internal error" not in result.stderr
    [row] = json.loads(listed.stdout)
    assert (row["id"], row["created_at"], row["updated_at"]) == (sid, None, None)
    assert "????-??-?? ??:??" in human.stdout


def test_importing_a_hostile_export_writes_nothing_and_list_keeps_working(tmp_path):
    sid, _ = session_with_four_messages()
    doc = json.loads(cli("sessions", "export", sid, "-f", "json").stdout)
    doc["created_at"] = 1e300
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))

    result = cli("sessions", "import", str(path), "--new-id")

    assert result.exit_code == 1
    assert result.stderr.startswith(f"harness9: cannot import {path}: session.created_at is 1e+300")
    listed = cli("sessions", "list", "--json")
    assert listed.exit_code == 0 and [r["id"] for r in json.loads(listed.stdout)] == [sid]
