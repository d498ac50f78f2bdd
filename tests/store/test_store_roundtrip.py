"""Any message history comes back from the store exactly as it went in."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness9.schema import ROLES, Message, ToolCall
from harness9.store import Manager, MemorySession

text = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1),  # includes NUL and other controls
    st.text(min_size=1, max_size=3).map(
        lambda s: s * 50_000
    ),  # huge content (large cases: test_store.py)
)
tool_calls = st.lists(
    st.builds(ToolCall, id=st.text(), name=st.text(), arguments=st.text()), max_size=40
)
messages = st.lists(
    st.builds(
        Message,
        role=st.sampled_from(ROLES),
        content=text,
        tool_calls=tool_calls,
        tool_call_id=st.text(),
    ),
    max_size=12,
)


@settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    max_examples=40,
)
@given(msgs=messages)
def test_sqlite_session_round_trips_any_messages(tmp_path: Path, msgs: list[Message]):
    with Manager(tmp_path / "sessions.db") as manager:
        session = manager.new_session()
        session.add_messages(msgs)
        assert session.get_messages() == msgs
        assert session.corrupt_rows == []
        assert manager.session_info(session.session_id).message_count == len(msgs)


@given(msgs=messages)
def test_memory_session_round_trips_any_messages(msgs: list[Message]):
    session = MemorySession()
    session.add_messages(msgs)
    assert session.get_messages() == msgs
