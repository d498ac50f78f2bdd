"""The facts a summary keeps outlive `harness9 chat --resume`: the resumed session's next
summary carries them from the stored checkpoint (docs/architecture.md, 'Stand-ins, the
repair and the preserved facts')."""

from __future__ import annotations

from harness9.config import db_path
from harness9.store import open_manager
from harness9.store.session import Checkpoint
from tests.support.cli import chat, cli, stored_session
from tests.support.history import asst, exchanges, user

RULE = "Never touch the migrations folder"
WINDOW = ("--strategy", "evict", "--context-window", "4000")


def checkpoints(sid: str) -> list[Checkpoint]:
    with open_manager(db_path()) as m:
        return m.open_session(sid).list_checkpoints()


def test_the_facts_a_summary_keeps_reach_the_summary_made_after_a_resume(llm_server):
    sid = stored_session(user(f"{RULE}."), asst("understood"), *exchanges(20, 400))
    first = cli("compact", "--session", sid, "--force", *WINDOW)
    assert first.exit_code == 0, first.stderr
    [kept] = checkpoints(sid)
    assert kept.facts == [f"constraint: {RULE}"]
    with open_manager(db_path()) as m:  # the session went on
        m.open_session(sid).add_messages(exchanges(20, 400, start=20))

    result = chat(llm_server, "/compact\n", "--resume", sid, *WINDOW)

    assert result.exit_code == 0, result.output
    assert "⚡ context compacted" in result.stderr
    [_, resumed] = checkpoints(sid)
    assert resumed.facts == [f"constraint: {RULE}"]
    assert f"@constraint:{RULE}" in resumed.summary
