"""The facts a checkpoint's summary keeps are stored with the checkpoint as data, copied with
it (forks, rewinds, export and import), and None for a checkpoint stored before they were
kept, whose summary the next compaction then reads from its text.

Every test runs on the SQLite file and on PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness9.config import store_location
from harness9.context.view import load_view
from harness9.schema import Message
from harness9.store.backend import SessionStore, open_store
from harness9.store.session import Checkpoint
from tests.support.cli import export_json, reimport_json
from tests.support.migrations import undo_migrations

pytestmark = pytest.mark.usefixtures("on_each_store")

MIGRATION = "checkpoint_facts"
SYSTEM = Message("system", "sys")
FACTS = ["constraint: never touch migrations/", "file: src/é.py", "error: KeyError: 'x'"]


def store() -> SessionStore:
    return open_store(store_location())


def summarised(s, facts: list[str] | None = FACTS) -> Checkpoint:
    """Two messages folded by a checkpoint keeping ``facts``, then two more."""
    ids = s.add_messages([Message("user", "fix it"), Message("assistant", "fixed")])
    cp = Checkpoint(ids[1], "Progress: fixed.", "hybrid", 900, 300, 5, 3, facts=facts)
    cp = s.add_checkpoint(cp)
    s.add_messages([Message("user", "thanks"), Message("assistant", "welcome")])
    return cp


def test_a_checkpoint_keeps_its_facts_in_their_order_when_read_back():
    with store() as m:
        sid = m.new_session().session_id
        summarised(m.open_session(sid))

    with store() as m:  # another manager, as --resume reads it
        s = m.open_session(sid)
        cp = s.latest_checkpoint()
        summary = load_view(s, SYSTEM).messages[1]

    assert cp is not None and cp.facts == FACTS
    assert getattr(summary, "facts", None) == FACTS  # the view hands them on as data


def test_a_summary_keeping_no_facts_is_stored_with_none_not_as_unknown():
    with store() as m:
        s = m.new_session()
        summarised(s, [])

        cp = m.open_session(s.session_id).latest_checkpoint()

    assert cp is not None and cp.facts == []


def test_a_fork_and_a_rewind_keep_the_facts():
    with store() as m:
        s = m.new_session()
        summarised(s)
        fork = m.open_session(m.fork_session(s.session_id))
        rewound = m.open_session(m.fork_session(s.session_id, 3))

        assert [cp.facts for cp in fork.list_checkpoints()] == [FACTS]
        assert [cp.facts for cp in rewound.list_checkpoints()] == [FACTS]


def test_a_checkpoint_stored_before_the_facts_were_kept_has_none(backend: str):
    with store() as m:
        sid = m.new_session().session_id
        summarised(m.open_session(sid))
    undo_migrations(backend, str(store_location()), MIGRATION, columns=["compactions.facts"])

    with store() as m:  # migrates: the old checkpoint has no facts stored
        s = m.open_session(sid)
        assert [cp.facts for cp in s.list_checkpoints()] == [None]
        s.add_checkpoint(Checkpoint(0, "", "hybrid:stubs", 9, 5, 4, 4, facts=["file: a.py"]))
        assert [cp.facts for cp in s.list_checkpoints()] == [None, ["file: a.py"]]


def test_export_then_import_keeps_the_facts(tmp_path: Path):
    with store() as m:
        s = m.new_session()
        summarised(s)
    doc = export_json(s.session_id)
    assert [c["facts"] for c in doc["checkpoints"]] == [FACTS]

    sid = reimport_json(doc, tmp_path)

    with store() as m:
        assert [cp.facts for cp in m.open_session(sid).list_checkpoints()] == [FACTS]
    assert export_json(sid) == doc  # and the re-export is the same document


def test_an_export_from_before_the_facts_imports_without_them(tmp_path: Path):
    with store() as m:
        s = m.new_session()
        summarised(s)
    doc = export_json(s.session_id)
    del doc["checkpoints"][0]["facts"]

    sid = reimport_json(doc, tmp_path)

    with store() as m:
        assert [cp.facts for cp in m.open_session(sid).list_checkpoints()] == [None]
