"""The one codec: Message/ToolCall/Checkpoint <-> row values and <-> JSON."""

from __future__ import annotations

import json

import pytest

from harness9.schema import Message, ToolCall
from harness9.store.codec import (
    CHECKPOINT_DETAIL_FIELDS,
    CHECKPOINT_FIELDS,
    CorruptValueError,
    calls_from_text,
    calls_to_text,
    checkpoint_from_values,
    checkpoint_to_json,
    checkpoint_values,
    message_from_values,
    message_values,
    record_to_json,
)
from harness9.store.session import Checkpoint, StoredMessage

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
        assert message_from_values(*message_values(msg)) == msg
    assert message_values(Message("user", "hi")) == ("user", "hi", None, None)


def test_a_record_as_json_carries_flat_calls_and_null_for_no_call_id():
    rec = StoredMessage(5, Message("assistant", "x", [CALL]), 2.0)
    assert record_to_json(rec) == {
        "id": 5,
        "role": "assistant",
        "content": "x",
        "tool_calls": [{"id": "c1", "name": "bash", "arguments": '{"command": "ls é"}'}],
        "tool_call_id": None,
        "created_at": 2.0,
    }


def test_a_checkpoint_round_trips_in_field_order_through_values_and_json():
    values = checkpoint_values(CP)
    assert values == (3, 7, "sum", "summarize", 900, 300, 12, 4, 1.5)
    assert checkpoint_from_values(values) == CP
    assert list(checkpoint_to_json(CP)) == [
        *CHECKPOINT_FIELDS,
        *CHECKPOINT_DETAIL_FIELDS,
        "instructions",
    ]
    assert checkpoint_from_values(list(checkpoint_to_json(CP).values())) == CP


def test_an_unnumbered_checkpoint_leaves_the_id_to_sqlite():
    assert checkpoint_values(Checkpoint(1, "", "budget", 1, 1, 1, 1))[0] is None


def test_a_checkpoints_details_round_trip_through_their_table_values():
    from harness9.store.codec import checkpoint_details

    cp = Checkpoint(0, "", "hybrid:stubs", 9, 5, 4, 4, 1.5, 3, recall_index="## Recall index")
    cp.rewrites = {12: "[stubbed] 3 tokens", 7: "[stubbed] 9 tokens"}
    details = checkpoint_details(cp)
    assert details is not None and details[1] == (
        '{"7": "[stubbed] 9 tokens", "12": "[stubbed] 3 tokens"}'
    )
    assert checkpoint_from_values([*checkpoint_values(cp), *details]) == cp
    assert checkpoint_details(Checkpoint(1, "s", "summarize", 1, 1, 1, 1)) is None


def test_a_checkpoints_kept_instructions_round_trip_through_their_row_and_json():
    from harness9.store.codec import encode_instructions

    cp = Checkpoint(7, "sum", "summarize", 900, 300, 12, 4, created_at=1.5, id=3)
    cp.instructions = ["use tabs", 'say "oui"']
    row = [*checkpoint_values(cp), "", "", "", encode_instructions(cp.instructions)]
    assert checkpoint_from_values(row).instructions == ["use tabs", 'say "oui"']
    assert checkpoint_from_values(list(checkpoint_to_json(cp).values())) == cp
    assert (
        checkpoint_from_values([*checkpoint_values(cp), "", "", "", "{damaged"]).instructions == []
    )
