"""history_search skips an earlier search's own output by the call it answers, not by its text."""

from __future__ import annotations

from pathlib import Path

from harness9.schema import Message, ToolCall
from harness9.store import Manager
from harness9.tools.base import ToolContext
from harness9.tools.history_search import HistorySearchTool


def search(session, query: str, tmp_path: Path) -> str:
    ctx = ToolContext(workdir=tmp_path, session=session, session_id=session.session_id)
    return HistorySearchTool().run({"query": query}, ctx).content


def test_an_earlier_searchs_result_is_not_a_hit(tmp_path: Path):
    with Manager(tmp_path / "s.db") as m:
        session = m.new_session()
        session.add_messages([Message("user", "the flaky quokka test")])
        first = search(session, "quokka", tmp_path)
        call = ToolCall("c1", "history_search", '{"query": "quokka"}')
        session.add_messages(
            [Message("assistant", tool_calls=[call]), Message("tool", first, tool_call_id="c1")]
        )
        hits = search(session, "quokka", tmp_path).splitlines()[1:]
    # msg_2 is the call (its arguments name the word), msg_3 the earlier search's result.
    assert [h.split()[0] for h in hits] == ["msg_2", "msg_1"]


def test_a_user_message_opening_like_a_search_result_is_found(tmp_path: Path):
    with Manager(tmp_path / "s.db") as m:
        session = m.new_session()
        session.add_messages([Message("user", "[history_search] the wombat note")])
        out = search(session, "wombat", tmp_path)
    assert "1 hits for 'wombat'" in out and "[user, in context]" in out
