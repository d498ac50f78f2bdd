"""A damaged fork row (a hand edit putting text where a message number belongs) does not
break `sessions list` or `show`: the fork is shown as an original, the rest as stored."""

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
