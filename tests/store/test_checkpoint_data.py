"""The checkpoint is data: stored as JSON on both stores, old prose rows still read.

A store an older harness9 wrote keeps each checkpoint's recall index and state note as
the Markdown it showed, and its stubs as their texts (``compaction_details``). After the
``checkpoint_data_as_json`` migration those rows read as records, and the view the
model is sent from them is byte for byte the one it was sent before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from harness9.context.stubs import (
    RenderedMessage,
    is_stub,
    offloaded_message,
    render_stub,
    repair_orphaned_tool_pairs,
    stub_for,
    stub_message,
    stub_of,
    summary_of,
)
from harness9.context.view import build_view, folded_entries, load_view
from harness9.schema import UNFINISHED_STUB, Message, TodoItem, ToolCall
from harness9.store.backend import SessionStore, open_url
from harness9.store.session import (
    STUB_EVICTED,
    STUB_STUBBED,
    STUB_VERBATIM,
    Checkpoint,
    OffloadLink,
    RecallEntry,
    StoredMessage,
    Stub,
)
from tests.support.migrations import undo_migrations

SYSTEM = Message("system", "You are harness9.")
MIGRATION = "checkpoint_data_as_json"

# What harness9 rendered and stored before checkpoints were data (main at 91238bc).
OLD_INDEX = (
    "## Recall index\n"
    "Tool results folded out of this context, oldest first. "
    'offload_recall(id="<handle>") pages one back in full; '
    "history_search finds any text of this session.\n"
    "… and 3 earlier tool results not listed: "
    "history_search finds them (its hits carry their handles).\n"
    "- msg_{tool} read_file `src/app.py` (1.2K tokens)\n"
    "- ofl_0123456789ab bash `pytest -q` (45.2K tokens)"
)
OLD_STATE = (
    "## State at the last compaction\nTodo list:\n[x] read app.py\n[~] fix the test\n[ ] ship"
)
OLD_STUB = '[stubbed] 300 tokens stubbed; offload_recall(id="msg_{id}") for it'


def history(store: SessionStore) -> tuple[str, list[int]]:
    s = store.new_session()
    ids = s.add_messages(
        [
            Message("user", "fix the test"),
            Message("assistant", "", [ToolCall("c1", "read_file", '{"path": "src/app.py"}')]),
            Message("tool", "def app(): ...\n" * 300, tool_call_id="c1"),
            Message("assistant", "read it"),
            Message("user", "and run it"),
            Message("assistant", "", [ToolCall("c2", "bash", '{"command": "pytest -q"}')]),
            Message("tool", "F" * 1200, tool_call_id="c2"),
            Message("assistant", "one failure"),
        ]
    )
    return s.session_id, ids


def old_checkpoint_row(conn, param: str, prefix: str, sid: str, ids: list[int]) -> None:
    """A checkpoint exactly as harness9 stored it before: prose in compaction_details."""
    cur = conn.execute(
        f"INSERT INTO {prefix}compactions (session_id, last_message_id, summary, strategy, "
        "tokens_before, tokens_after, messages_before, messages_after, created_at) "
        f"VALUES ({', '.join([param] * 9)}) RETURNING id",
        (sid, ids[3], "**Goal:** fix the test.", "hybrid", 900, 300, 9, 5, 1000.0),
    )
    (cid,) = cur.fetchone()
    stub = OLD_STUB.format(id=ids[6]).replace('"', '\\"')
    conn.execute(
        f"INSERT INTO {prefix}compaction_details (compaction_id, recall_index, rewrites, "
        f"state_note) VALUES ({param}, {param}, {param}, {param})",
        (cid, OLD_INDEX.format(tool=ids[2]), f'{{"{ids[6]}": "{stub}"}}', OLD_STATE),
    )


@contextmanager
def driver(backend: str, url: str) -> Iterator[tuple[object, str, str]]:
    """A plain connection to the store (its parameter marker, its tables' prefix)."""
    if backend == "postgres":
        with psycopg.connect(url, autocommit=True) as conn:
            yield conn, "%s", "harness9."
    else:
        conn = sqlite3.connect(url, isolation_level=None)
        try:
            yield conn, "?", ""
        finally:
            conn.close()


def as_before_the_migration(backend: str, url: str) -> None:
    """Undo ``checkpoint_data_as_json`` (and the migrations after it: the messages' offload
    link and result metadata, the checkpoints' facts) as if the store predated it."""
    columns = ["offload_id", "offload_tokens", "metadata", "compactions.facts"]
    undo_migrations(backend, url, MIGRATION, columns=columns, tables=["compaction_data"])


def old_view_text(ids: list[int]) -> tuple[str, str]:
    summary = "[Conversation Summary]\n**Goal:** fix the test.\n\n"
    return summary + OLD_INDEX.format(tool=ids[2]) + "\n\n" + OLD_STATE, OLD_STUB.format(id=ids[6])


def test_a_store_from_before_the_migration_reads_its_old_checkpoints_as_data(
    backend: str, store_url: str
):
    with open_url(store_url) as store:
        sid, ids = history(store)
    as_before_the_migration(backend, store_url)
    with driver(backend, store_url) as (conn, param, prefix):
        old_checkpoint_row(conn, param, prefix, sid, ids)

    with open_url(store_url) as store:  # migrates
        session = store.open_session(sid)
        [cp] = session.list_checkpoints()
        view = load_view(session, SYSTEM)

    assert cp.summary == "**Goal:** fix the test." and cp.last_message_id == ids[3]
    assert cp.recall == [
        RecallEntry(f"msg_{ids[2]}", "read_file", "src/app.py", 1200),
        RecallEntry("ofl_0123456789ab", "bash", "pytest -q", 45200),
    ]
    assert cp.recall_overflow == 3
    assert cp.state == [
        TodoItem("read app.py", "completed"),
        TodoItem("fix the test", "in_progress"),
        TodoItem("ship", "pending"),
    ]
    assert cp.stubs == {ids[6]: Stub(STUB_VERBATIM, text=OLD_STUB.format(id=ids[6]))}
    # What the model is sent from the old checkpoint did not change by one byte.
    summary, stub = old_view_text(ids)
    assert [m.content for m in view.messages[1:]] == [
        summary,
        "and run it",
        "",
        stub,
        "one failure",
    ]


def as_data(ids: list[int]) -> Checkpoint:
    """The old checkpoint of ``old_checkpoint_row`` as data."""
    return Checkpoint(
        ids[3],
        "**Goal:** fix the test.",
        "hybrid",
        900,
        300,
        9,
        5,
        recall=[
            RecallEntry(f"msg_{ids[2]}", "read_file", "src/app.py", 1200),
            RecallEntry("ofl_0123456789ab", "bash", "pytest -q", 45200),
        ],
        recall_overflow=3,
        stubs={ids[6]: Stub(STUB_STUBBED, 300)},
        state=[
            TodoItem("read app.py", "completed"),
            TodoItem("fix the test", "in_progress"),
            TodoItem("ship"),
        ],
    )


def test_a_new_checkpoint_is_stored_as_json_and_read_back_whole(backend: str, store_url: str):
    with open_url(store_url) as store:
        sid, ids = history(store)
        cp = as_data(ids)
        store.open_session(sid).add_checkpoint(cp)
        [back] = store.open_session(sid).list_checkpoints()
    assert (back.recall, back.recall_overflow, back.stubs, back.state) == (
        cp.recall,
        cp.recall_overflow,
        cp.stubs,
        cp.state,
    )
    with driver(backend, store_url) as (conn, _, prefix):
        details = conn.execute(f"SELECT count(*) FROM {prefix}compaction_details").fetchone()
        data = conn.execute(f"SELECT data FROM {prefix}compaction_data").fetchone()
    assert details == (0,)  # nothing new is written as prose
    assert f'"stubs":{{"{ids[6]}":{{"kind":"stubbed","tokens":300' in data[0]


def test_the_view_renders_the_data_as_the_prose_it_replaced():
    """Rendered from data, the summary message and the stub are the texts harness9
    stored before (same bytes: prompt caches and the benchmarks' figures stay put)."""
    ids = list(range(1, 9))
    cp = as_data(ids)
    records = [
        StoredMessage(ids[4], Message("user", "and run it"), 1.0),
        StoredMessage(ids[6], Message("tool", "F" * 1200, tool_call_id="c2"), 1.0),
    ]
    view = build_view(SYSTEM, records, cp)
    summary, stub = old_view_text(ids)
    assert [m.content for m in view.messages[1:]] == [summary, "and run it", stub]
    assert stub_of(view.messages[3]) == cp.stubs[ids[6]]


def test_a_stub_renders_from_its_data_with_its_handle():
    assert render_stub(Stub(STUB_STUBBED, 300)) == "[stubbed] 300 tokens stubbed"
    assert render_stub(Stub(STUB_STUBBED, 300), 7) == OLD_STUB.format(id=7)
    offloaded = Stub(STUB_STUBBED, 300, "ofl_0123456789ab")
    assert render_stub(offloaded, 7).endswith('offload_recall(id="ofl_0123456789ab") for it')
    evicted = Stub(STUB_EVICTED, 900, "", "bash: 12 lines")
    assert render_stub(evicted, 7) == (
        '[evicted] bash: 12 lines (900 tokens evicted); offload_recall(id="msg_7") for it'
    )
    # Eviction no longer offloads; such a stub is recalled by the offload id it names.
    spilled = render_stub(Stub(STUB_EVICTED, 900, "ofl_0123456789ab", "bash: 12 lines"), 7)
    assert spilled == (
        '[evicted] bash: 12 lines (900 tokens evicted); offload_recall(id="ofl_0123456789ab") for it'
    )
    assert render_stub(Stub(STUB_VERBATIM, text="[context truncated]"), 7) == "[context truncated]"


CALL = Message("assistant", tool_calls=[ToolCall("c", "bash", "{}")])
RESULT = Message("tool", "x" * 4000, tool_call_id="c")


@pytest.mark.parametrize(
    ("made", "stub"),
    [
        (lambda: repair_orphaned_tool_pairs([CALL])[1], True),  # [context truncated]
        (lambda: stub_for(RESULT), True),  # [stubbed] 1000 tokens stubbed
        (lambda: stub_message(Stub(STUB_EVICTED, 3, text="bash"), RESULT), True),
        (lambda: repair_orphaned_tool_pairs([CALL], stub=UNFINISHED_STUB)[1], True),
        (lambda: offloaded_message(RESULT, OffloadLink("ofl_0123456789ab", 5000)), False),
        (lambda: Message("tool", "[stubbed] 3 tokens stubbed", tool_call_id="c"), False),
    ],
)
def test_one_predicate_knows_every_stand_in_for_a_result_by_its_data(made, stub: bool):
    # The last: a tool's own output that looks like a stub is a result.
    assert is_stub(made()) is stub


def test_the_index_takes_sizes_and_handles_from_stub_data_not_from_their_text():
    stub = Stub(STUB_EVICTED, 4321, "", "x" * 600)  # a long summary: no size near the start
    msgs = [
        SYSTEM,
        Message("assistant", "", [ToolCall("c1", "bash", '{"command": "make"}')]),
        RenderedMessage("tool", render_stub(stub, 5), tool_call_id="c1", stub=stub),
        Message("assistant", "", [ToolCall("c2", "read_file", '{"path": "a.py"}')]),
        offloaded_message(
            Message(
                "tool", "📂 [offload:ofl_0123456789ab] 5000 tokens offloaded", tool_call_id="c2"
            ),
            OffloadLink("ofl_0123456789ab", 5000),
        ),
    ]
    assert folded_entries(msgs[1:], [4, 5, 6, 7]) == [
        RecallEntry("msg_5", "bash", "make", 4321),
        RecallEntry("ofl_0123456789ab", "read_file", "a.py", 5000),
    ]


def test_the_summariser_gets_the_checkpoints_summary_even_if_it_quotes_a_heading():
    """The view's summary message carries the summary proper as data: a summary that
    itself mentions "## Recall index" is merged whole, not cut where the text says so."""
    prose = "**Goal:** x.\n\n## Recall index\nthe model wrote this heading itself"
    cp = Checkpoint(3, prose, "hybrid", 9, 5, 4, 4, recall=[RecallEntry("msg_2", "bash", "", 7)])
    view = build_view(SYSTEM, [], cp)
    assert view.messages[1].content.endswith("- msg_2 bash (7 tokens)")
    assert summary_of(view.messages[1]) == prose
    # A message that only looks like a summary is no summary: its text is not cut.
    pasted = "[Conversation Summary]\n**Goal:** y."
    assert summary_of(Message("user", pasted)) == pasted


def test_an_eviction_is_stored_as_stub_data_and_the_view_rebuilds_its_text():
    from harness9.context.pipeline import eviction_compactor
    from harness9.context.view import ModelView, checkpoint_for

    msgs = [SYSTEM]
    for i in range(6):
        call = ToolCall(f"c{i}", "bash", f'{{"command": "cat big{i}.log"}}')
        msgs += [
            Message("assistant", "", [call]),
            Message("tool", f"line {i}\n" * 400, tool_call_id=f"c{i}"),
        ]
    ids = list(range(len(msgs)))
    # Eviction alone lands under 70 % of 4,000 (1,458 tokens), so nothing folds.
    res = eviction_compactor(max_tokens=4000, keep_groups=2).compact(msgs, force=True)
    cp = checkpoint_for(ModelView(msgs, [None, *ids[1:]]), res)

    assert cp is not None and cp.last_message_id == 0
    assert sorted(cp.stubs) == [2, 4, 6, 8]  # all but the newest two groups' results
    assert {s.kind for s in cp.stubs.values()} == {STUB_EVICTED}
    assert all(s.tokens == len(msgs[k].content) // 4 for k, s in cp.stubs.items())
    records = [StoredMessage(i, m, 1.0) for i, m in enumerate(msgs) if i]
    view = build_view(SYSTEM, records, cp)
    for k in cp.stubs:  # the compactor's text, with the handle the checkpoint adds
        assert view.messages[k].content == (
            res.messages[k].content + f'; offload_recall(id="msg_{k}") for it'
        )


def test_moving_a_checkpoints_ids_moves_its_data_and_leaves_its_prose():
    """What an import under new ids (and a held save) applies: anchor, stubs and recall
    handles follow their messages; a message not copied loses its stub."""
    from harness9.store.session import checkpoint_message_ids, move_checkpoint_ids

    cp = as_data([0, 1, 2, 3, 4, 5, 6, 7])
    cp.summary = "see msg_2"
    moved = move_checkpoint_ids(cp, {3: 103, 2: 102}.get)
    assert checkpoint_message_ids(cp) == {3, 6, 2}
    assert moved.last_message_id == 103 and moved.stubs == {}  # message 6 was not copied
    assert [e.handle for e in moved.recall] == ["msg_102", "ofl_0123456789ab"]
    assert moved.summary == "see msg_2" and cp.last_message_id == 3  # input untouched
