"""One numbering for messages (issue 36, item 4): every place that shows or takes a message
number uses its position in the session, #1 for the first, as `sessions show` does."""

from __future__ import annotations

import re

from harness9.config import store_location
from harness9.schema import Message
from harness9.store import open_manager
from harness9.store.session import Checkpoint
from tests.support.cli import cli


def second_session() -> str:
    """A session whose rows come after another session's: its row ids are not 1..N."""
    with open_manager(store_location()) as m:
        m.new_session().add_messages([Message("user", "other"), Message("assistant", "o")] * 20)
        s = m.new_session()
        ids = s.add_messages(
            [
                Message("user", "one alpha"),
                Message("assistant", "echo alpha"),
                Message("user", "two beta"),
                Message("assistant", "echo beta"),
            ]
        )
        s.add_checkpoint(Checkpoint(ids[1], "alpha summary", "summarization", 900, 120, 4, 3))
        return s.session_id


def test_markdown_export_numbers_messages_as_sessions_show_does():
    sid = second_session()

    exported = cli("sessions", "export", sid).stdout
    shown = cli("sessions", "show", sid).stdout

    assert re.findall(r"^## \w+ · #(\d+)", exported, re.M) == ["1", "2", "3", "4"]
    assert re.findall(r"^#(\d+) ", shown, re.M) == ["1", "2", "3", "4"]
    assert "> **Compaction checkpoint #1** · summarization · messages up to #2 folded" in exported


def test_a_number_copied_from_the_markdown_export_forks_there():
    sid = second_session()
    exported = cli("sessions", "export", sid).stdout
    number = re.search(r"^## User · #(\d+) · .*\n\ntwo beta", exported, re.M).group(1)

    result = cli("sessions", "fork", sid, "--at", number)

    assert result.exit_code == 0, result.stderr
    with open_manager(store_location()) as m:
        kept = [x.content for x in m.open_session(result.stdout.strip()).get_messages()]
    assert kept == ["one alpha", "echo alpha", "two beta"]
