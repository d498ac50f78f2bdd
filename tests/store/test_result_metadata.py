"""A tool result's run facts (a command's exit code, whether it timed out) are stored with
it as data, and eviction's summary reads them, never the output's own "exit code" lines.

Rows and export files from before the facts were kept have none: their summary reads the
text, as it always did. Every test runs on the SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness9.config import store_location
from harness9.context.pipeline import evict_by_density
from harness9.context.view import load_view
from harness9.engine.views import LiveViews
from harness9.schema import Message, ToolCall
from harness9.store.backend import SessionStore, open_store
from tests.support.cli import cli, export_json, reimport_json
from tests.support.migrations import undo_migrations

pytestmark = pytest.mark.usefixtures("on_each_store")

MIGRATION = "message_result_metadata"
SYSTEM = Message("system", "sys")
COMMAND = "./check.sh"
# The command's own output ends with a line of its own that looks like the tool's trailer.
OUTPUT = "".join(f"checking module {i}\n" for i in range(120)) + "exit code: 0"
FAILED = {"exit_code": 1, "timed_out": False}


def store() -> SessionStore:
    return open_store(store_location())


def logged(s, metadata: dict | None = FAILED) -> list[int]:
    """A shell call whose output ends with "exit code: 0", its result stored with
    ``metadata``, and the assistant's answer."""
    return s.add_messages(
        [
            Message("user", "run the checks"),
            Message("assistant", "", [ToolCall("c1", "bash", json.dumps({"command": COMMAND}))]),
            Message("tool", OUTPUT, tool_call_id="c1", metadata=metadata),
            Message("assistant", "the checks ran"),
        ]
    )


def evicted_summary(s) -> str:
    """The first line of the eviction stub of the session's shell result (in a view read
    back from the store)."""
    view = load_view(s, SYSTEM)
    out = evict_by_density(view.messages, keep_groups=0, target_tokens=0)
    [stub] = [m.content for m in out if m.role == "tool"]
    return stub.splitlines()[0]


def test_an_evicted_shell_result_says_the_exit_code_stored_with_it_not_the_one_it_printed():
    with store() as m:
        sid = m.new_session().session_id
        logged(m.open_session(sid))

    with store() as m:  # read back by another manager, as --resume and compact do
        line = evicted_summary(m.open_session(sid))

    assert line == f"[evicted] bash `{COMMAND}`: exit code 1, 121 lines"


def test_a_timed_out_command_is_evicted_as_timed_out_whatever_it_printed():
    with store() as m:
        s = m.new_session()
        logged(s, {"exit_code": None, "timed_out": True})

        assert evicted_summary(s) == f"[evicted] bash `{COMMAND}`: timed out, 121 lines"


def test_the_stored_result_keeps_exactly_the_facts_and_other_messages_none():
    with store() as m:
        s = m.new_session()
        logged(s)
        records = m.open_session(s.session_id).get_records()

    assert [r.message.metadata for r in records] == [None, None, FAILED, None]


def test_the_view_between_calls_carries_the_facts_of_a_result_logged_after_it():
    # Chat reads only the rows stored since the last call: those carry their facts too.
    with store() as m:
        s = m.new_session()
        views = LiveViews()
        views.load(s, SYSTEM)
        logged(s)
        live = views.load(s, SYSTEM).view

    assert [msg.metadata for msg in live.messages] == [None, None, None, FAILED, None]


def test_a_result_whose_tool_reported_no_exit_code_reads_the_code_from_its_text():
    # An MCP server's shell tool: the facts are kept ({}), and none of them is a code.
    with store() as m:
        s = m.new_session()
        logged(s, {})

        assert m.open_session(s.session_id).get_records()[2].message.metadata == {}
        assert evicted_summary(s) == f"[evicted] bash `{COMMAND}`: exit code 0, 121 lines"


def as_before_the_migration(backend: str) -> None:
    """Undo ``message_result_metadata`` (and the later ``checkpoint_facts``): the rows lose
    their facts, as if stored before."""
    columns = ["metadata", "compactions.facts"]
    undo_migrations(backend, str(store_location()), MIGRATION, columns=columns)


def test_a_row_stored_before_the_facts_were_kept_is_summarised_from_its_text(backend: str):
    with store() as m:
        sid = m.new_session().session_id
        logged(m.open_session(sid))
    as_before_the_migration(backend)

    with store() as m:  # migrates: the old rows have no facts stored
        s = m.open_session(sid)
        assert [r.message.metadata for r in s.get_records()] == [None] * 4
        # The text is all there is: its last "exit code" line.
        assert evicted_summary(s) == f"[evicted] bash `{COMMAND}`: exit code 0, 121 lines"
        logged(s)  # and new rows keep theirs again
        assert s.get_records()[6].message.metadata == FAILED


def test_a_fork_and_a_rewind_keep_the_facts():
    with store() as m:
        s = m.new_session()
        logged(s)
        fork = m.open_session(m.fork_session(s.session_id))
        rewound = m.open_session(m.fork_session(s.session_id, 3))  # up to the result

        assert fork.get_records()[2].message.metadata == FAILED
        assert [r.message.metadata for r in rewound.get_records()] == [None, None, FAILED]
        assert evicted_summary(fork).startswith(f"[evicted] bash `{COMMAND}`: exit code 1,")


def test_export_then_import_keeps_the_facts(tmp_path: Path):
    with store() as m:
        s = m.new_session()
        logged(s)
    doc = export_json(s.session_id)
    assert [msg["metadata"] for msg in doc["messages"]] == [None, None, FAILED, None]

    sid = reimport_json(doc, tmp_path)

    with store() as m:
        s = m.open_session(sid)
        assert s.get_records()[2].message.metadata == FAILED
        assert evicted_summary(s).startswith(f"[evicted] bash `{COMMAND}`: exit code 1,")
    assert export_json(sid) == doc  # and the re-export is the same document


def test_an_export_from_before_the_facts_imports_without_them(tmp_path: Path):
    with store() as m:
        s = m.new_session()
        logged(s)
    doc = export_json(s.session_id)
    for msg in doc["messages"]:
        del msg["metadata"]

    sid = reimport_json(doc, tmp_path)

    with store() as m:
        s = m.open_session(sid)
        assert [r.message.metadata for r in s.get_records()] == [None] * 4
        assert evicted_summary(s).startswith(f"[evicted] bash `{COMMAND}`: exit code 0,")


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ("exit 1", "messages[2].metadata is not an object"),
        ({"exit_code": "1"}, "messages[2].metadata.exit_code"),
        ({"exit_code": True}, "messages[2].metadata.exit_code"),
        ({"exit_code": 1, "timed_out": 0}, "messages[2].metadata.timed_out"),
    ],
)
def test_an_export_with_damaged_facts_is_a_one_line_error(bad: object, where: str, tmp_path: Path):
    with store() as m:
        s = m.new_session()
        logged(s)
    doc = export_json(s.session_id)
    doc["messages"][2]["metadata"] = bad
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))

    result = cli("sessions", "import", str(path), "--new-id")

    assert result.exit_code == 1
    assert where in result.stderr and len(result.stderr.strip().splitlines()) == 1
