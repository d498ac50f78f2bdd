"""Damaged rows about a session, not its messages, do not break `sessions list`, `show`,
`export`, `fork` or the cron clean-up: a fork row whose message number is text (the fork
is then shown as an original), a message count that is text (a fork counts the messages
it shares), a title, working directory or todo that is not UTF-8 (shown, exported and
copied by a fork with replacement characters)."""

from __future__ import annotations

import json

from harness9.config import db_path
from harness9.schema import TodoItem
from harness9.store import open_manager
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


def test_a_fork_of_a_session_whose_message_count_is_text_keeps_every_message():
    sid, _ = session_with_four_messages()
    damage("UPDATE sessions SET message_count = 'many' WHERE id = ?", sid)

    forked = cli("sessions", "fork", sid, "--json")

    assert forked.exit_code == 0, forked.output
    fork = json.loads(forked.stdout)
    assert (fork["message_count"], fork["forked_from"]["message"]) == (4, 4)
    shown = json.loads(cli("sessions", "show", fork["id"], "--json").stdout)
    assert [m["content"] for m in shown["messages"]] == [
        "first question",
        "first answer",
        "second question",
        "second answer",
    ]


def test_a_fork_copies_a_title_that_is_not_utf8_as_the_listing_shows_it():
    sid, _ = session_with_four_messages()
    damage("UPDATE sessions SET title = CAST(X'ff41' AS TEXT) WHERE id = ?", sid)

    forked = cli("sessions", "fork", sid, "--at", "2")

    assert forked.exit_code == 0, forked.output
    fork = forked.stdout.strip()
    assert json.loads(cli("sessions", "show", fork, "--json").stdout)["title"] == "\ufffdA"
    assert json.loads(cli("sessions", "show", sid, "--json").stdout)["title"] == "\ufffdA"


def todo_list_with_a_damaged_item() -> str:
    sid, _ = session_with_four_messages()
    with open_manager(db_path()) as m:
        m.open_session(sid).save_todos([TodoItem("write tests", "completed"), TodoItem("ship")])
    damage(
        "UPDATE todos SET content = CAST(X'ff41' AS TEXT) WHERE session_id = ? AND position = 1",
        sid,
    )
    return sid


def test_show_gives_a_todo_that_is_not_utf8_with_replacement_characters():
    sid = todo_list_with_a_damaged_item()

    shown = cli("sessions", "show", sid, "--json")

    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["todos"] == [
        {"content": "write tests", "status": "completed"},
        {"content": "\ufffdA", "status": "pending"},
    ]
    assert len(data["messages"]) == 4


def test_export_gives_a_todo_that_is_not_utf8_with_replacement_characters():
    sid = todo_list_with_a_damaged_item()

    exported = cli("sessions", "export", sid, "-f", "json")
    markdown = cli("sessions", "export", sid)

    assert (exported.exit_code, markdown.exit_code) == (0, 0), exported.output + markdown.output
    assert json.loads(exported.stdout)["todos"][1] == {"content": "\ufffdA", "status": "pending"}
    assert "\ufffdA" in markdown.stdout


def session_with_a_sub_agent() -> tuple[str, str]:
    sid, _ = session_with_four_messages()
    with open_manager(db_path()) as m:
        kid = m.new_child_session(sid, "call_1", "look around").session_id
    return sid, kid


def test_show_of_a_parent_gives_a_sub_agent_title_that_is_not_utf8_with_replacement():
    sid, kid = session_with_a_sub_agent()
    damage("UPDATE sessions SET title = CAST(X'ff41' AS TEXT) WHERE id = ?", kid)

    shown = cli("sessions", "show", sid, "--json")

    assert shown.exit_code == 0, shown.output
    children = json.loads(shown.stdout)["children"]
    assert [(c["id"], c["title"], c["description"]) for c in children] == [
        (kid, "\ufffdA", "look around")
    ]


def test_a_sub_agent_description_that_is_not_utf8_leaves_show_and_export_working():
    sid, kid = session_with_a_sub_agent()
    damage(
        "UPDATE subagent_sessions SET description = CAST(X'ff41' AS TEXT) WHERE session_id = ?",
        kid,
    )

    parent = cli("sessions", "show", sid, "--json")
    child = cli("sessions", "show", kid, "--json")
    exported = cli("sessions", "export", sid, "-f", "json")

    assert (parent.exit_code, child.exit_code, exported.exit_code) == (0, 0, 0), parent.output
    assert json.loads(parent.stdout)["children"][0]["description"] == "\ufffdA"
    assert json.loads(child.stdout)["tool_call_id"] == "call_1"
    assert "\ufffdA" in exported.stdout
