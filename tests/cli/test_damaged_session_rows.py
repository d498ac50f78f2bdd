"""Damaged rows about a session, not its messages, do not break `sessions list`, `show`
or the cron clean-up: a fork row whose message number is text (the fork is then shown as
an original), a title or working directory that is not UTF-8 (shown with replacement
characters)."""

from __future__ import annotations

import json

from tests.cli.test_damaged_rows import damage, session_with_four_messages
from tests.support.cli import cli


def test_a_fork_row_with_a_damaged_message_number_leaves_list_and_show_working():
    sid, _ = session_with_four_messages()
    forked = cli("sessions", "fork", sid, "--at", "2").stdout.strip()
    damage("UPDATE session_forks SET origin_message = 'x' WHERE session_id = ?", forked)

    listed = cli("sessions", "list", "--json")
    shown = cli("sessions", "show", forked, "--json")
    origin = cli("sessions", "show", sid, "--json")

    assert (listed.exit_code, shown.exit_code, origin.exit_code) == (0, 0, 0), listed.output
    assert {r["id"]: r["forked_from"] for r in json.loads(listed.stdout)} == {
        sid: None,
        forked: None,
    }
    assert json.loads(shown.stdout)["message_count"] == 2
    assert json.loads(origin.stdout)["forks"] == []


def test_a_title_that_is_not_utf8_leaves_list_show_and_the_clean_up_working():
    sid, _ = session_with_four_messages()
    damage("UPDATE sessions SET title = CAST(X'ff41' AS TEXT), updated_at = 1 WHERE id = ?", sid)

    listed = cli("sessions", "list", "--json")
    shown = cli("sessions", "show", sid[:8], "--json")
    cleaned = cli("sessions", "delete", "--older-than", "1d", "--yes")

    assert (listed.exit_code, shown.exit_code) == (0, 0), listed.output
    assert [r["title"] for r in json.loads(listed.stdout)] == ["\ufffdA"]
    assert json.loads(shown.stdout)["title"] == "\ufffdA"
    assert (cleaned.exit_code, cleaned.stdout) == (0, "Deleted 1 session.\n")


def test_a_working_directory_that_is_not_utf8_leaves_list_working():
    sid, _ = session_with_four_messages()
    damage(
        "INSERT INTO session_settings (session_id, model, context_window, workdir) "
        "VALUES (?, 'm', 1000, CAST(X'2f746d702fff' AS TEXT))",
        sid,
    )

    listed = cli("sessions", "list", "--json")

    assert listed.exit_code == 0, listed.output
    assert [r["workdir"] for r in json.loads(listed.stdout)] == ["/tmp/\ufffd"]
