"""`sessions delete`'s question at a terminal, answered with Ctrl-D (end of input): the
answer is a no, and what follows starts a line of its own (the terminal echoed nothing
after the question)."""

from __future__ import annotations

from harness9.config import store_location
from harness9.schema import Message
from harness9.store import open_manager
from tests.support.cli import cli, terminal


def test_ctrl_d_at_the_question_ends_its_line_before_nothing_deleted():
    with open_manager(store_location()) as m:
        s = m.new_session()
        s.add_messages([Message("user", "keep me")])
    env = terminal("")

    result = cli("sessions", "delete", s.session_id, obj=env)

    assert result.exit_code == 0
    assert env.stdout.getvalue().endswith("Delete 1 session? [y/N]: \nNothing deleted.\n")
