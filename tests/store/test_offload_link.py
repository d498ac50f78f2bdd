"""A logged tool result is linked to its offload as data.

The stored record names the offload's id and the full output's size; the view carries
that link, and the stub and the recall index read it, never the summary's first line.
Rows and export files from before the link keep giving the same stubs. Every test runs
on the SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness9.config import store_location
from harness9.context.pipeline import STRATEGY_STUBS, HybridCompactor
from harness9.context.stubs import offload_source, stub_for, stub_message
from harness9.context.view import checkpoint_for, load_view
from harness9.engine.views import LiveViews
from harness9.schema import Message, ToolCall, Usage
from harness9.store.backend import SessionStore, open_store
from harness9.store.holding import HoldingSession
from harness9.store.legacy_checkpoint import legacy_stubs
from harness9.store.session import (
    STUB_STUBBED,
    STUB_VERBATIM,
    OffloadLink,
    Stub,
)
from tests.support.cli import chat, cli, export_json, import_json
from tests.support.migrations import undo_migrations
from tests.support.stores import LockedMemorySession

OID = "ofl_0123456789ab"
LINK = OffloadLink(OID, 5000)
HEADER = f"📂 [offload:{OID}] 5000 tokens offloaded"
BODY = "bash: 900 lines, exit code 1\n" + "FAILED tests/test_app.py::test_x\n" * 30
MIGRATION = "message_offload_link"
SYSTEM = Message("system", "sys")
STUB = f'[stubbed] 5000 tokens stubbed; offload_recall(id="{OID}") for it'


pytestmark = pytest.mark.usefixtures("on_each_store")


def store() -> SessionStore:
    return open_store(store_location())


class Summariser:
    def generate(self, messages, tools):
        return Message("assistant", "**Goal:** go on."), Usage()


def logged(s, first: str) -> list[int]:
    """An offloaded result (text ``first``, linked to LINK) then 8 plain ones."""
    msgs = [
        Message("user", "run the tests"),
        Message("assistant", "", [ToolCall("c0", "bash", '{"command": "pytest"}')]),
        Message("tool", first, tool_call_id="c0"),
        Message("assistant", "they fail"),
    ]
    for i in range(1, 9):
        msgs += [
            Message("user", f"step {i}"),
            Message("assistant", "", [ToolCall(f"c{i}", "bash", f'{{"command": "cat f{i}"}}')]),
            Message("tool", "x" * 4000, tool_call_id=f"c{i}"),
            Message("assistant", f"done {i}"),
        ]
    links = [LINK if m.content == first else None for m in msgs]
    return s.add_messages(msgs, links)


def stubbed_once(s) -> tuple[str, Stub]:
    """Compact the session by stubbing (the default's cheapest step); the offloaded
    result's text in the result, and its stub as the checkpoint stores it."""
    view = load_view(s, SYSTEM)
    res = HybridCompactor(Summariser(), 10_000).compact(view.messages)
    assert res.strategy == STRATEGY_STUBS
    cp = checkpoint_for(view, res)
    assert cp is not None
    s.add_checkpoint(cp)
    rid = view.ids[3]
    assert rid is not None
    return res.messages[3].content, cp.stubs[rid]


def test_chat_stores_an_offloaded_result_with_its_offload_id_and_size(llm_server, tmp_path: Path):
    (tmp_path / "big.txt").write_text("line of a big file\n" * 4000)
    llm_server.reply_tool_calls(
        [
            ("c1", "read_file", json.dumps({"path": "big.txt"})),  # offloaded by the policy
            ("c2", "bash", json.dumps({"command": "seq 1 20000"})),  # streamed by the tool
            ("c3", "bash", json.dumps({"command": "echo small"})),
        ]
    )
    llm_server.reply_text("read and counted")

    result = chat(llm_server, "read and count\n", "--yes", workdir=tmp_path)

    assert result.exit_code == 0, result.output
    with store() as m:
        [info] = m.list_sessions()
        tools = [r for r in m.open_session(info.id).get_records() if r.message.role == "tool"]
    assert [r.offload is not None for r in tools] == [True, True, False]
    for rec in tools[:2]:
        link = rec.offload
        assert link is not None and link.offload_id.startswith("ofl_") and link.tokens > 2000
        header = f"📂 [offload:{link.offload_id}] {link.tokens} tokens offloaded\n"
        assert rec.message.content.startswith(header)


def test_a_stubbed_offloaded_result_names_its_offload_from_the_data_not_its_text():
    with store() as m:
        s = m.new_session()
        logged(s, "its summary, reworded: " + BODY)  # no header: only the link says where

        text, stub = stubbed_once(s)

        assert text == STUB
        assert stub == Stub(STUB_STUBBED, 5000, OID)
        # The resumed view renders the stored stub the same way.
        assert load_view(s, SYSTEM).messages[3].content == STUB


def test_the_recall_index_lists_an_offloaded_result_by_its_offload():
    with store() as m:
        s = m.new_session()
        ids = logged(s, "reworded: " + BODY)
        view = load_view(s, SYSTEM)
        comp = HybridCompactor(Summariser(), 3_000)
        cp = checkpoint_for(view, comp.compact(view.messages, force=True), recall_budget=500)
    assert cp is not None and cp.last_message_id > ids[2]
    assert [(e.handle, e.tokens) for e in cp.recall][0] == (OID, 5000)


def test_the_view_between_calls_carries_the_link_of_a_result_logged_after_it():
    # Chat reads only the rows stored since the last call: those carry their links too.
    with store() as m:
        s = m.new_session()
        views = LiveViews()
        views.load(s, SYSTEM)
        logged(s, "reworded: " + BODY)
        live = views.load(s, SYSTEM).view
    assert offload_source(live.messages[3]) == (OID, 5000)
    comp = HybridCompactor(Summariser(), 3_000)
    cp = checkpoint_for(live, comp.compact(live.messages, force=True), recall_budget=500)
    assert cp is not None and [(e.handle, e.tokens) for e in cp.recall][0] == (OID, 5000)


def as_before_the_migration(backend: str) -> None:
    """Undo ``message_offload_link`` (and the later ``message_result_metadata`` and
    ``checkpoint_facts``): the rows lose their links, as if stored before."""
    columns = ["offload_id", "offload_tokens", "metadata", "compactions.facts"]
    undo_migrations(backend, str(store_location()), MIGRATION, columns=columns)


def test_a_row_stored_before_the_link_gives_the_same_stub_from_its_header(backend: str):
    with store() as m:
        sid = m.new_session().session_id
        logged(m.open_session(sid), f"{HEADER}\n{BODY}")
    as_before_the_migration(backend)

    with store() as m:  # migrates: the old rows have no link stored
        s = m.open_session(sid)
        recs = s.get_records()
        assert recs[2].offload == LINK  # read from the summary's first line
        assert [r.offload for r in recs if r.id != recs[2].id] == [None] * (len(recs) - 1)
        text, stub = stubbed_once(s)
    assert (text, stub) == (STUB, Stub(STUB_STUBBED, 5000, OID))


def test_a_fork_shares_the_link_with_its_origin():
    with store() as m:
        s = m.new_session()
        logged(s, "reworded: " + BODY)
        fork = m.open_session(m.fork_session(s.session_id))
        assert fork.get_records()[2].offload == LINK


def reimport(doc: dict, tmp_path: Path) -> list:
    with store() as m:
        m.delete_session(doc["id"])
    import_json(doc, tmp_path)
    with store() as m:
        return m.open_session(doc["id"]).get_records()


def test_export_then_import_keeps_the_link(tmp_path: Path):
    with store() as m:
        s = m.new_session()
        logged(s, "reworded: " + BODY)
    doc = export_json(s.session_id)
    assert doc["messages"][2]["offload"] == {"id": OID, "tokens": 5000}
    assert doc["messages"][3]["offload"] is None

    recs = reimport(doc, tmp_path)

    assert recs[2].offload == LINK and recs[3].offload is None


def test_an_export_from_before_the_link_imports_it_from_the_header(tmp_path: Path):
    with store() as m:
        s = m.new_session()
        logged(s, f"{HEADER}\n{BODY}")
    doc = export_json(s.session_id)
    for msg in doc["messages"]:
        del msg["offload"]

    recs = reimport(doc, tmp_path)

    assert recs[2].offload == LINK
    assert all(r.offload is None for r in recs[3:])


@pytest.mark.parametrize("bad", [{"id": OID}, {"id": "", "tokens": 3}, "ofl_x", {"tokens": -1}])
def test_an_export_with_a_damaged_link_is_a_one_line_error(bad: object, tmp_path: Path):
    with store() as m:
        s = m.new_session()
        logged(s, "reworded: " + BODY)
    doc = export_json(s.session_id)
    doc["messages"][2]["offload"] = bad
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))

    result = cli("sessions", "import", str(path), "--new-id")

    assert result.exit_code != 0 and "messages[2].offload" in result.stderr


def test_an_old_eviction_stub_naming_its_offload_keeps_its_id_and_size():
    text = f'📂 [offload:{OID}] [evicted] 900 tokens evicted\nbash: 12 lines\nuse offload_recall(id="{OID}") for the full content'
    stubs = legacy_stubs(json.dumps({"7": text, "8": "[stubbed] 30 tokens stubbed"}))
    assert stubs == {
        7: Stub(STUB_VERBATIM, 900, OID, text),
        8: Stub(STUB_VERBATIM, text="[stubbed] 30 tokens stubbed"),
    }
    shown = stub_message(stubs[7], Message("tool", "full output", tool_call_id="c"), 7)
    assert shown.content == text  # the old view, byte for byte
    assert stub_for(shown).stub == Stub(STUB_STUBBED, 900, OID)


def test_a_result_held_while_the_database_is_locked_keeps_its_link():
    inner = LockedMemorySession("held")
    inner.locked = True
    held = HoldingSession(inner, retry_s=0.0)
    result = Message("tool", "reworded: " + BODY, tool_call_id="c0")

    assert held.add_messages([result], [LINK]) == []
    assert held.get_records()[0].offload == LINK
    inner.locked = False
    assert held.flush()
    assert inner.get_records()[0].offload == LINK
