"""``harness9 sessions list|show|delete`` through the real entry point."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import typer
from freezegun import freeze_time

from harness9.cli import app
from harness9.config import db_path
from harness9.schema import Message, TodoItem, ToolCall
from harness9.store import Checkpoint, open_manager
from tests.support.cli import (
    NO_SUBAGENTS,
    NO_SUMMARIES,
    cli,
    old_and_new_sessions,
    run_cli,
    runner,
    stored_ids,
    terminal,
)
from tests.support.cli import stored_session as make_session


def insert_session(home: Path, sid: str) -> None:
    with open_manager(db_path()):
        pass
    conn = sqlite3.connect(home / "sessions.db", isolation_level=None)
    conn.execute("INSERT INTO sessions (id, created_at, updated_at) VALUES (?, 1, 1)", (sid,))
    conn.close()


# -- list --------------------------------------------------------------------------


def test_list_json_on_a_fresh_home_is_empty_and_creates_nothing(harness9_home: Path):
    result = cli("sessions", "list", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == []
    assert not (harness9_home / "sessions.db").exists()


def test_list_json_prints_id_title_times_and_count():
    with freeze_time("2026-05-17 14:30:00"):
        sid = make_session(Message("user", "Refactor the parser"), Message("assistant", "done"))
    result = cli("sessions", "list", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == [
        {
            "id": sid,
            "parent_id": None,
            "title": "Refactor the parser",
            "created_at": "2026-05-17T14:30:00Z",
            "updated_at": "2026-05-17T14:30:00Z",
            "message_count": 2,
            "workdir": None,  # made by hand, never run by chat
            "usage": {  # no model call was made in this session
                "model_calls": 0,
                "input_tokens": 0,
                "cached_tokens": 0,
                "cache_write_tokens": 0,
                "output_tokens": 0,
                "total_tokens": 0,
                "cost_usd": None,
                "unpriced_calls": 0,
                "summaries": NO_SUMMARIES,
                "subagents": NO_SUBAGENTS,
            },
            "forked_from": None,  # an original
        }
    ]


def test_list_is_newest_first_and_honours_limit():
    with freeze_time("2026-05-17 10:00:00") as clock:
        old = make_session(Message("user", "old"))
        clock.tick(60)
        new = make_session(Message("user", "new"))
    assert [s["id"] for s in json.loads(cli("sessions", "list", "--json").stdout)] == [new, old]
    assert [
        s["id"] for s in json.loads(cli("sessions", "list", "--json", "--limit", "1").stdout)
    ] == [new]


def test_list_table_shows_full_id_count_and_title():
    sid = make_session(Message("user", "Hello table"), Message("assistant", "hi"))
    result = cli("sessions", "list")
    assert result.exit_code == 0
    assert sid in result.stdout
    assert "Hello table" in result.stdout
    assert " 2 " in result.stdout


def test_list_table_says_so_when_empty():
    assert cli("sessions", "list").stdout == "No sessions.\n"


def test_negative_limit_is_a_usage_error():
    assert cli("sessions", "list", "--limit", "-1").exit_code == 2


# -- show --------------------------------------------------------------------------


def full_session() -> str:
    with freeze_time("2026-05-17 14:30:00"), open_manager(db_path()) as m:
        s = m.new_session()
        ids = s.add_messages(
            [
                Message("user", "list files"),
                Message("assistant", "", [ToolCall("call_1", "bash", '{"command": "ls"}')]),
                Message("tool", "a.py\nb.py", tool_call_id="call_1"),
            ]
        )
        s.save_todos([TodoItem("read a.py", "completed"), TodoItem("fix b.py", "in_progress")])
        s.add_checkpoint(Checkpoint(ids[1], "Goal: list files", "summarization", 900, 120, 3, 2))
        m.add_usage(
            s.session_id,
            input_tokens=900,
            output_tokens=20,
            cached_tokens=512,
            cost_usd=0.0003,
            cache_write_tokens=256,
        )
        return s.session_id


def test_show_json_prints_messages_todos_and_checkpoints():
    sid = full_session()
    result = cli("sessions", "show", sid, "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    t = "2026-05-17T14:30:00Z"
    assert data == {
        "id": sid,
        "parent_id": None,
        "title": "list files",
        "created_at": t,
        "updated_at": t,
        "message_count": 3,
        "workdir": None,
        "usage": {
            "model_calls": 1,
            "input_tokens": 900,
            "cached_tokens": 512,
            "cache_write_tokens": 256,
            "output_tokens": 20,
            "total_tokens": 920,
            "cost_usd": 0.0003,
            "unpriced_calls": 0,
            "summaries": NO_SUMMARIES,
            "subagents": NO_SUBAGENTS,
        },
        "forked_from": None,
        "forks": [],
        "pins": [],
        "messages": [
            {
                "id": 1,
                "role": "user",
                "content": "list files",
                "tool_calls": [],
                "tool_call_id": None,
                "created_at": t,
                "offload": None,
                "metadata": None,
            },
            {
                "id": 2,
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "call_1", "name": "bash", "arguments": '{"command": "ls"}'}],
                "tool_call_id": None,
                "created_at": t,
                "offload": None,
                "metadata": None,
            },
            {
                "id": 3,
                "role": "tool",
                "content": "a.py\nb.py",
                "tool_calls": [],
                "tool_call_id": "call_1",
                "created_at": t,
                "offload": None,
                "metadata": None,
            },
        ],
        "todos": [
            {"content": "read a.py", "status": "completed"},
            {"content": "fix b.py", "status": "in_progress"},
        ],
        "checkpoints": [
            {
                "id": 1,
                "last_message_id": 2,
                "strategy": "summarization",
                "summary": "Goal: list files",
                "tokens_before": 900,
                "tokens_after": 120,
                "messages_before": 3,
                "messages_after": 2,
                "created_at": t,
                "recall": [],
                "recall_overflow": 0,
                "stubs": {},
                "state": [],
                "instructions": [],
                "facts": None,  # a checkpoint stored without its facts
            }
        ],
        "corrupt_rows": [],
        "tool_call_id": None,  # not a sub-agent's session
        "children": [],
    }


def test_show_renders_roles_content_tool_calls_todos_and_checkpoints():
    sid = full_session()
    out = cli("sessions", "show", sid).stdout
    for expected in (
        "#1 user",
        "list files",
        "#2 assistant",
        'bash({"command": "ls"})',
        "#3 tool (result of call_1)",
        "a.py\nb.py",
        "[x] read a.py",
        "[~] fix b.py",
        "up to message #2",
        "900 → 120 tokens",
        "Goal: list files",
    ):
        assert expected in out


def test_show_accepts_a_unique_prefix():
    sid = make_session(Message("user", "by prefix"))
    result = cli("sessions", "show", sid[:8], "--json")
    assert json.loads(result.stdout)["id"] == sid


def test_show_limit_keeps_the_newest_messages():
    sid = make_session(*[Message("user", f"m{i}") for i in range(5)])
    data = json.loads(cli("sessions", "show", sid, "--json", "--limit", "2").stdout)
    assert [m["content"] for m in data["messages"]] == ["m3", "m4"]
    assert data["message_count"] == 5


def test_show_prints_markup_and_escape_sequences_inert():
    sid = make_session(Message("user", "[bold]not bold[/bold] \x1b[31mred\x1b[0m \x07 \u202eevil"))
    out = cli("sessions", "show", sid).stdout
    assert "[bold]not bold[/bold]" in out
    assert "\\x1b[31mred\\x1b[0m \\x07 \\u202eevil" in out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out


def test_show_of_an_unknown_id_is_a_one_line_error():
    make_session(Message("user", "x"))
    result = cli("sessions", "show", "deadbeef")
    assert result.exit_code == 1
    assert result.stderr == "harness9: no session with id 'deadbeef'\n"


def test_show_of_an_ambiguous_prefix_is_a_one_line_error(harness9_home: Path):
    insert_session(harness9_home, "abcd0000-0000-4000-8000-000000000001")
    insert_session(harness9_home, "abcd0000-0000-4000-8000-000000000002")
    result = cli("sessions", "show", "abcd")
    assert result.exit_code == 1
    assert result.stderr.startswith("harness9: session id prefix 'abcd' is ambiguous")
    assert result.stderr.count("\n") == 1


def test_debug_shows_the_traceback():
    make_session(Message("user", "x"))
    result = cli("--debug", "sessions", "show", "deadbeef")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr


def test_show_skips_a_corrupt_row_with_a_warning(harness9_home: Path):
    sid = make_session(
        Message("user", "before"),
        Message("assistant", "", [ToolCall("c1", "bash", "{}")]),
        Message("user", "after"),
    )
    conn = sqlite3.connect(harness9_home / "sessions.db", isolation_level=None)
    conn.execute("UPDATE messages SET tool_calls = '[{oops' WHERE id = 2")
    conn.close()
    result = cli("sessions", "show", sid)
    assert result.exit_code == 0
    assert (
        result.stderr
        == "warning: message row 2 is corrupt (tool_calls is not valid JSON); skipped\n"
    )
    assert "before" in result.stdout and "after" in result.stdout
    data = json.loads(cli("sessions", "show", sid, "--json").stdout)
    assert data["corrupt_rows"] == [{"id": 2, "reason": "tool_calls is not valid JSON"}]
    assert [m["content"] for m in data["messages"]] == ["before", "after"]


def test_a_damaged_database_file_is_a_one_line_error(harness9_home: Path):
    harness9_home.mkdir()
    (harness9_home / "sessions.db").write_bytes(b"garbage" * 1000)
    result = cli("sessions", "list")
    assert result.exit_code == 1
    assert result.stderr.startswith("harness9: cannot open session database ")
    assert result.stderr.count("\n") == 1


# -- delete --------------------------------------------------------------------------


def test_delete_by_id_with_yes(harness9_home: Path):
    sid = make_session(Message("user", "bye"))
    keep = make_session(Message("user", "stay"))
    (harness9_home / "offload_store" / sid).mkdir(parents=True)
    result = cli("sessions", "delete", sid[:10], "--yes")
    assert result.exit_code == 0
    assert result.stdout == "Deleted 1 session.\n"
    assert stored_ids() == {keep}
    assert not (harness9_home / "offload_store" / sid).exists()


def test_delete_several_ids_at_once():
    a, b = make_session(Message("user", "a")), make_session(Message("user", "b"))
    result = cli("sessions", "delete", a, b, "--yes")
    assert result.stdout == "Deleted 2 sessions.\n"
    assert stored_ids() == set()


def test_delete_with_one_unknown_id_deletes_nothing():
    sid = make_session(Message("user", "a"))
    result = cli("sessions", "delete", sid, "0000dead", "--yes")
    assert result.exit_code == 1
    assert result.stderr == "harness9: no session with id '0000dead'\n"
    assert stored_ids() == {sid}


def test_delete_without_a_terminal_or_yes_refuses():
    sid = make_session(Message("user", "a"))
    result = cli("sessions", "delete", sid)
    assert result.exit_code == 1
    assert "refusing to delete 1 session without --yes" in result.stderr
    assert stored_ids() == {sid}


def test_delete_on_a_terminal_asks_and_deletes_on_yes():
    sid = make_session(Message("user", "a"))
    env = terminal("y\n")
    result = runner.invoke(app, ["sessions", "delete", sid], obj=env)
    assert result.exit_code == 0
    assert "Delete 1 session? [y/N]: " in env.stdout.getvalue()
    assert "Deleted 1 session." in env.stdout.getvalue()
    assert stored_ids() == set()


def test_delete_on_a_terminal_keeps_everything_on_no_and_exits_0():
    # Declining is the user's choice, not an error.
    sid = make_session(Message("user", "a"))
    env = terminal("n\n")
    result = runner.invoke(app, ["sessions", "delete", sid], obj=env)
    assert result.exit_code == 0
    assert env.stdout.getvalue().endswith("Nothing deleted.\n")
    assert env.stderr.getvalue() == ""
    assert stored_ids() == {sid}


def test_delete_on_a_terminal_treats_end_of_input_as_no():
    sid = make_session(Message("user", "a"))
    env = terminal("")
    result = runner.invoke(app, ["sessions", "delete", sid], obj=env)
    assert result.exit_code == 0 and stored_ids() == {sid}  # a no, like "n": not an error
    assert env.stdout.getvalue().endswith("Nothing deleted.\n")


def test_delete_older_than_removes_only_idle_sessions():
    with freeze_time("2026-01-01") as clock:
        old, new = old_and_new_sessions(clock)
        result = cli("sessions", "delete", "--older-than", "30d", "--yes")
    assert result.exit_code == 0
    assert result.stdout == "Deleted 1 session.\n"
    assert stored_ids() == {new}


def test_delete_older_than_in_weeks_and_hours():
    with freeze_time("2026-01-01") as clock:
        old, new = old_and_new_sessions(clock)
        assert (
            cli("sessions", "delete", "--older-than", "5w", "--yes").stdout
            == "No sessions older than 5w.\n"
        )
        assert cli("sessions", "delete", "--older-than", "264h", "--yes").exit_code == 0  # 11 days
    assert stored_ids() == {new}


def test_delete_older_than_dry_run_lists_and_deletes_nothing():
    with freeze_time("2026-01-01") as clock:
        old, new = old_and_new_sessions(clock)
        result = cli("sessions", "delete", "--older-than", "30d", "--dry-run")
    assert result.exit_code == 0
    assert result.stdout.startswith("Would delete 1 session:\n")
    assert old in result.stdout and new not in result.stdout
    assert stored_ids() == {old, new}


@pytest.mark.parametrize("age", ["30", "d", "30x", "-5d", "0d", "1.5h", ""])
def test_a_bad_age_is_a_usage_error(age: str):
    make_session(Message("user", "a"))
    result = cli("sessions", "delete", "--older-than", age, "--yes")
    assert result.exit_code == 2
    assert result.stderr.startswith("harness9: --older-than takes a positive number")
    assert len(stored_ids()) == 1


def test_delete_needs_ids_or_an_age():
    result = cli("sessions", "delete", "--yes")
    assert result.exit_code == 2
    assert result.stderr == "harness9: give the session ids to delete, or --older-than AGE\n"


def test_delete_refuses_ids_and_an_age_together():
    sid = make_session(Message("user", "a"))
    result = cli("sessions", "delete", sid, "--older-than", "1d", "--yes")
    assert result.exit_code == 2
    assert stored_ids() == {sid}


@pytest.mark.parametrize("command", ["list", "show", "delete"])
def test_every_option_and_argument_has_help_text(command: str):
    group = typer.main.get_command(app).commands["sessions"]
    params = group.commands[command].params
    assert params
    assert all(p.help for p in params), [p.name for p in params if not p.help]


# -- real processes --------------------------------------------------------------------


def test_sessions_list_in_a_real_process_never_imports_litellm():
    sid = make_session(Message("user", "cron"))
    result = run_cli("sessions", "list", "--json", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0
    assert [s["id"] for s in json.loads(result.stdout)] == [sid]
    assert "harness9.cli" in result.stderr  # the import profile really is there
    assert "litellm" not in result.stderr


def test_delete_in_a_real_process_without_a_terminal_refuses():
    sid = make_session(Message("user", "cron"))
    result = run_cli("sessions", "delete", sid)
    assert result.returncode == 1
    assert result.stderr == (
        "harness9: refusing to delete 1 session without --yes (stdin is not a terminal); "
        "nothing deleted\n"
    )
    assert stored_ids() == {sid}


def test_subcommand_help_is_not_mistaken_for_an_error():
    result = cli("sessions", "delete", "--help")
    assert result.exit_code == 0
    assert "--older-than AGE" in result.stdout
    assert result.stderr == ""
