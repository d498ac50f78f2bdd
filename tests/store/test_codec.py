"""The one codec: Message/ToolCall/Checkpoint <-> row values and <-> JSON."""

from __future__ import annotations

import json

import pytest

from harness9.schema import Message, TodoItem, ToolCall
from harness9.store.codec import (
    CHECKPOINT_FIELDS,
    CorruptValueError,
    calls_from_text,
    calls_to_text,
    checkpoint_from_values,
    checkpoint_to_json,
    checkpoint_values,
    message_from_values,
    message_values,
    offload_from_values,
    record_to_json,
)
from harness9.store.session import (
    STUB_EVICTED,
    STUB_STUBBED,
    Checkpoint,
    OffloadLink,
    RecallEntry,
    StoredMessage,
    Stub,
)

CALL = ToolCall("c1", "bash", '{"command": "ls é"}')
CP = Checkpoint(7, "sum", "summarize", 900, 300, 12, 4, created_at=1.5, id=3)


def test_tool_calls_are_stored_as_their_flat_json_and_none_when_absent():
    assert calls_to_text([]) is None
    text = calls_to_text([CALL])
    assert json.loads(text) == [CALL.to_flat()] and "é" in text
    assert calls_from_text(text) == [CALL] and calls_from_text(None) == []


@pytest.mark.parametrize(
    ("text", "reason"),
    [("{not json", "tool_calls is not valid JSON"), ('[{"id": "x"}]', "not a list of tool")],
)
def test_corrupt_tool_calls_say_what_is_wrong(text: str, reason: str):
    with pytest.raises(CorruptValueError, match=reason):
        calls_from_text(text)


def test_a_message_round_trips_through_its_row_values():
    for msg in (Message("assistant", "", [CALL]), Message("tool", "out", tool_call_id="c1")):
        assert message_from_values(*message_values(msg)[:4]) == msg
    assert message_values(Message("user", "hi")) == ("user", "hi", None, None, "", None, None)


def test_an_offload_link_round_trips_through_its_row_values():
    msg = Message("tool", "its summary", tool_call_id="c1")
    link = OffloadLink("ofl_0123456789ab", 5000)
    assert message_values(msg, link)[4:6] == ("ofl_0123456789ab", 5000)
    assert offload_from_values(msg, *message_values(msg, link)[4:6]) == link
    assert offload_from_values(msg, *message_values(msg)[4:6]) is None
    # A damaged link reads as none: the result is its text.
    assert offload_from_values(msg, "ofl_0123456789ab", "5000") is None
    assert offload_from_values(msg, "ofl_0123456789ab", -1) is None


def test_a_row_from_before_links_reads_the_link_its_summary_names():
    old = Message("tool", "📂 [offload:ofl_0123456789ab] 5000 tokens offloaded\nsum")
    assert offload_from_values(old, None, None) == OffloadLink("ofl_0123456789ab", 5000)
    for text in ("📂 [offload:ofl_0123456789ab] many tokens offloaded", "plain output"):
        assert offload_from_values(Message("tool", text), None, None) is None
    assert offload_from_values(Message("user", old.content), None, None) is None


def test_a_record_as_json_carries_flat_calls_and_null_for_no_call_id():
    rec = StoredMessage(5, Message("assistant", "x", [CALL]), 2.0)
    assert record_to_json(rec) == {
        "id": 5,
        "role": "assistant",
        "content": "x",
        "tool_calls": [{"id": "c1", "name": "bash", "arguments": '{"command": "ls é"}'}],
        "tool_call_id": None,
        "created_at": 2.0,
        "offload": None,
        "metadata": None,
    }


def test_a_checkpoint_round_trips_in_field_order_through_values_and_json():
    values = checkpoint_values(CP)
    assert values == (3, 7, "sum", "summarize", 900, 300, 12, 4, 1.5)
    assert checkpoint_from_values(values) == CP
    assert list(checkpoint_to_json(CP)) == [
        *CHECKPOINT_FIELDS,
        "recall",
        "recall_overflow",
        "stubs",
        "state",
        "instructions",
        "facts",
    ]


def test_an_unnumbered_checkpoint_leaves_the_id_to_sqlite():
    assert checkpoint_values(Checkpoint(1, "", "budget", 1, 1, 1, 1))[0] is None


def data_checkpoint() -> Checkpoint:
    return Checkpoint(
        0,
        "",
        "hybrid:stubs",
        9,
        5,
        4,
        4,
        1.5,
        3,
        recall=[RecallEntry("msg_4", "bash", "cat é.log", 1200)],
        recall_overflow=2,
        stubs={12: Stub(STUB_STUBBED, 3), 7: Stub(STUB_EVICTED, 9, "ofl_0123456789ab", "x")},
        state=[TodoItem("ship it", "in_progress")],
    )


def test_a_checkpoints_data_is_one_json_value_in_its_row():
    from harness9.store.codec import encode_details

    cp = data_checkpoint()
    data = encode_details(cp)
    assert data is not None and json.loads(data) == {
        "recall": [
            {"handle": "msg_4", "tool": "bash", "key_argument": "cat é.log", "tokens": 1200}
        ],
        "recall_overflow": 2,
        "stubs": {
            "7": {"kind": "evicted", "tokens": 9, "offload_id": "ofl_0123456789ab", "text": "x"},
            "12": {"kind": "stubbed", "tokens": 3, "offload_id": "", "text": ""},
        },
        "state": [{"content": "ship it", "status": "in_progress"}],
    }
    assert (
        checkpoint_from_values([*checkpoint_values(cp), data, None, None, None, None, None]) == cp
    )
    assert encode_details(Checkpoint(1, "s", "summarize", 1, 1, 1, 1)) is None


def test_a_damaged_data_value_reads_as_no_data():
    cp = data_checkpoint()
    for bad in ("{damaged", '{"stubs": {"7": {"kind": "shouted"}}}', '{"recall": [3]}'):
        read = checkpoint_from_values([*checkpoint_values(cp), bad, None, None, None, None, None])
        assert read.recall == [] and read.stubs == {} and read.state == []


def test_a_checkpoints_data_round_trips_through_json():
    from harness9.store.codec import details_from_json

    cp = data_checkpoint()
    doc = json.loads(json.dumps(checkpoint_to_json(cp)))
    assert details_from_json(doc) == (cp.recall, cp.recall_overflow, cp.stubs, cp.state)


def test_a_row_stored_before_checkpoints_were_data_is_converted_on_read():
    cp = data_checkpoint()
    index = (
        "## Recall index\nTool results folded out of this context, oldest first. …\n"
        "… and 2 earlier tool results not listed: history_search finds them.\n"
        "- msg_4 bash `cat é.log` (1.2K tokens)\n- ofl_0123456789ab read_file (45.2K tokens)"
    )
    rewrites = '{"12": "[stubbed] 3 tokens stubbed; offload_recall(id=\\"msg_12\\") for it"}'
    note = "## State at the last compaction\nTodo list:\n[~] ship it\n[x] plan"
    read = checkpoint_from_values([*checkpoint_values(cp), None, index, rewrites, note, None, None])
    assert read.recall == [
        RecallEntry("msg_4", "bash", "cat é.log", 1200),
        RecallEntry("ofl_0123456789ab", "read_file", "", 45200),
    ]
    assert read.recall_overflow == 2
    assert read.stubs == {
        12: Stub("verbatim", text='[stubbed] 3 tokens stubbed; offload_recall(id="msg_12") for it')
    }
    assert read.state == [TodoItem("ship it", "in_progress"), TodoItem("plan", "completed")]


def test_a_checkpoints_kept_instructions_round_trip_through_their_row_and_json():
    from harness9.store.codec import encode_instructions

    cp = Checkpoint(7, "sum", "summarize", 900, 300, 12, 4, created_at=1.5, id=3)
    cp.instructions = ["use tabs", 'say "oui"']
    row = [*checkpoint_values(cp), None, "", "", "", encode_instructions(cp.instructions), None]
    assert checkpoint_from_values(row).instructions == ["use tabs", 'say "oui"']
    assert checkpoint_to_json(cp)["instructions"] == ["use tabs", 'say "oui"']
    damaged = [*checkpoint_values(cp), None, "", "", "", "{damaged", None]
    assert checkpoint_from_values(damaged).instructions == []


def test_a_checkpoints_facts_round_trip_through_their_column_and_json():
    from harness9.store.codec import encode_facts

    cp = Checkpoint(7, "sum", "hybrid", 900, 300, 12, 4, created_at=1.5, id=3)
    cp.facts = ["constraint: never touch migrations/", "file: src/é.py"]
    row = [*checkpoint_values(cp), None, "", "", "", None, encode_facts(cp.facts)]
    assert checkpoint_from_values(row).facts == [
        "constraint: never touch migrations/",
        "file: src/é.py",
    ]
    assert checkpoint_to_json(cp)["facts"] == cp.facts
    assert checkpoint_from_values([*row[:-1], encode_facts([])]).facts == []


def test_a_checkpoint_stored_before_facts_were_kept_or_damaged_has_none():
    cp = Checkpoint(7, "sum", "hybrid", 900, 300, 12, 4, created_at=1.5, id=3)
    for value in (None, "{damaged", "[1, 2]", '"file: a.py"'):
        row = [*checkpoint_values(cp), None, "", "", "", None, value]
        assert checkpoint_from_values(row).facts is None
    assert checkpoint_to_json(cp)["facts"] is None
