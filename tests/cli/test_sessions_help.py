"""What `sessions list|show|delete --help` tell someone writing a script or a crontab."""

from __future__ import annotations

from tests.support.cli import cli


def help_text(*command: str) -> str:
    result = cli(*command, "--help")
    assert result.exit_code == 0, result.output
    return " ".join(result.stdout.split())


def test_delete_help_says_what_goes_with_a_session_and_gives_a_crontab_line():
    text = help_text("sessions", "delete")

    assert "A session goes with its sub-agents' sessions and its offloaded tool outputs;" in text
    assert "Without a terminal nothing is deleted unless --yes (exit 1)." in text
    assert "0 4 * * * harness9 sessions delete --older-than 30d --yes" in text


def test_list_help_names_the_json_fields():
    text = help_text("sessions", "list")

    assert (
        "--json prints an array of {id, parent_id, title, created_at, updated_at, "
        "message_count, workdir, usage, forked_from}; times are ISO-8601 UTC." in text
    )


def test_show_help_says_damaged_rows_are_skipped_with_a_warning():
    text = help_text("sessions", "show")

    assert "A damaged message row is skipped with a warning on stderr" in text
