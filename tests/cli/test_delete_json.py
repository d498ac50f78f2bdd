"""``harness9 sessions delete --json``: what a cron script reads of a clean-up.

stdout holds one JSON array, the sessions as ``sessions list --json`` prints them, each
with ``deleted``; everything meant for people goes to stderr; exit codes as without it.
"""

from __future__ import annotations

import json

from freezegun import freeze_time

from harness9.cli import app
from harness9.config import db_path
from harness9.schema import Message
from tests.support.cli import cli, old_and_new_sessions, runner, stored_ids, terminal
from tests.support.cli import stored_session as make_session


def test_dry_run_json_lists_the_idle_session_as_not_deleted_and_deletes_nothing():
    with freeze_time("2026-01-01") as clock:
        old, new = old_and_new_sessions(clock)
        listed = {r["id"]: r for r in json.loads(cli("sessions", "list", "--json").stdout)}
        result = cli("sessions", "delete", "--older-than", "30d", "--dry-run", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [{**listed[old], "deleted": False}]
    assert result.stderr.startswith("Would delete 1 session:\n")
    assert old in result.stderr
    assert stored_ids() == {old, new}


def test_json_with_yes_lists_the_deleted_session_and_says_so_on_stderr():
    with freeze_time("2026-01-01") as clock:
        old, new = old_and_new_sessions(clock)
        listed = {r["id"]: r for r in json.loads(cli("sessions", "list", "--json").stdout)}
        result = cli("sessions", "delete", "--older-than", "30d", "--yes", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [{**listed[old], "deleted": True}]
    assert result.stderr == "Deleted 1 session.\n"
    assert stored_ids() == {new}


def test_json_by_id_gives_each_session_once_in_the_order_named():
    first = make_session(Message("user", "one"))
    second = make_session(Message("user", "two"))

    result = cli("sessions", "delete", second[:8], first, second, "--yes", "--json")

    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["id"], r["title"], r["message_count"], r["deleted"]) for r in rows] == [
        (second, "two", 1, True),
        (first, "one", 1, True),
    ]
    assert stored_ids() == set()


def test_json_with_nothing_old_enough_prints_an_empty_array():
    make_session(Message("user", "recent"))

    result = cli("sessions", "delete", "--older-than", "30d", "--yes", "--json")

    assert (result.exit_code, result.stdout) == (0, "[]\n")
    assert result.stderr == "No sessions older than 30d.\n"


def test_json_before_any_store_exists_prints_an_empty_array():
    result = cli("sessions", "delete", "--older-than", "30d", "--dry-run", "--json")

    assert (result.exit_code, result.stdout) == (0, "[]\n")
    assert result.stderr == "No sessions older than 30d.\n"
    assert not db_path().exists()


def test_json_without_a_terminal_or_yes_refuses_with_nothing_on_stdout():
    sid = make_session(Message("user", "a"))

    result = cli("sessions", "delete", sid, "--json")

    assert (result.exit_code, result.stdout) == (1, "")
    assert "refusing to delete 1 session without --yes" in result.stderr
    assert stored_ids() == {sid}


def test_json_on_a_terminal_asks_on_stderr_and_keeps_stdout_for_the_json():
    sid = make_session(Message("user", "a"))
    env = terminal("y\n")

    result = runner.invoke(app, ["sessions", "delete", sid, "--json"], obj=env)

    assert result.exit_code == 0
    assert [(r["id"], r["deleted"]) for r in json.loads(env.stdout.getvalue())] == [(sid, True)]
    assert "Delete 1 session? [y/N]: " in env.stderr.getvalue()
    assert env.stderr.getvalue().endswith("Deleted 1 session.\n")


def test_json_on_a_terminal_answered_no_lists_the_session_as_not_deleted():
    sid = make_session(Message("user", "a"))
    env = terminal("n\n")

    result = runner.invoke(app, ["sessions", "delete", sid, "--json"], obj=env)

    assert result.exit_code == 0
    assert [(r["id"], r["deleted"]) for r in json.loads(env.stdout.getvalue())] == [(sid, False)]
    assert env.stderr.getvalue().endswith("Nothing deleted.\n")
    assert stored_ids() == {sid}


def test_delete_help_describes_json():
    result = cli("sessions", "delete", "--help")

    assert result.exit_code == 0
    assert "--json" in result.stdout
    assert '"deleted"' in result.stdout
