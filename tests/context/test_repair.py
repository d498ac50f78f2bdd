"""repair_orphaned_tool_pairs and is_valid_tool_sequence (seed §6.4, strengthened)."""

import copy

from harness9.context import is_valid_tool_sequence, repair_orphaned_tool_pairs
from harness9.schema import TRUNCATED_STUB, Message
from tests.support.history import SYSTEM, asst, call, result, user


def roles_and_ids(msgs: list[Message]) -> list[tuple[str, str]]:
    return [(m.role, m.tool_call_id or ",".join(tc.id for tc in m.tool_calls)) for m in msgs]


def test_valid_history_comes_back_with_the_same_messages():
    msgs = [SYSTEM, user("hi"), call("a", "b"), result("a"), result("b"), asst("done")]
    out = repair_orphaned_tool_pairs(msgs)
    assert out == msgs
    assert all(o is m for o, m in zip(out, msgs, strict=True))
    assert out is not msgs


def test_type_a_result_without_its_call_is_dropped():
    # Seed §6.4 type A: the call was truncated away, its result remains.
    msgs = [SYSTEM, result("x", "listing"), asst("the result")]
    assert repair_orphaned_tool_pairs(msgs) == [SYSTEM, asst("the result")]


def test_type_b_call_without_result_gets_a_stub_right_after_it():
    # Seed §6.4 type B: the call survived, its result did not.
    msgs = [SYSTEM, call("x"), asst("the result")]
    out = repair_orphaned_tool_pairs(msgs)
    assert out == [
        SYSTEM,
        call("x"),
        Message("tool", TRUNCATED_STUB, tool_call_id="x"),
        asst("the result"),
    ]
    assert TRUNCATED_STUB == "[context truncated]"


def test_late_result_moves_up_into_its_block_and_the_interrupt_stays_after_it():
    msgs = [SYSTEM, call("x"), user("stop, use -la"), result("x", "late"), asst("ok")]
    out = repair_orphaned_tool_pairs(msgs)
    assert out == [SYSTEM, call("x"), result("x", "late"), user("stop, use -la"), asst("ok")]


def test_second_answer_to_the_same_call_is_dropped():
    msgs = [SYSTEM, call("x"), result("x", "first"), result("x", "again"), asst("ok")]
    assert repair_orphaned_tool_pairs(msgs) == [SYSTEM, call("x"), result("x", "first"), asst("ok")]


def test_result_before_its_call_is_dropped_and_the_call_stubbed():
    msgs = [SYSTEM, result("x", "early"), call("x")]
    out = repair_orphaned_tool_pairs(msgs)
    assert out == [SYSTEM, call("x"), Message("tool", TRUNCATED_STUB, tool_call_id="x")]


def test_parallel_results_are_put_in_call_order_with_a_stub_for_the_missing_one():
    msgs = [SYSTEM, call("a", "b", "c"), result("c", "C"), result("a", "A"), asst("next")]
    out = repair_orphaned_tool_pairs(msgs)
    assert out == [
        SYSTEM,
        call("a", "b", "c"),
        result("a", "A"),
        Message("tool", TRUNCATED_STUB, tool_call_id="b"),
        result("c", "C"),
        asst("next"),
    ]


def test_reused_call_ids_bind_each_result_to_the_nearest_call():
    # Some local models number their calls call_0 on every turn.
    msgs = [
        SYSTEM,
        call("call_0"),
        result("call_0", "one"),
        call("call_0"),
        result("call_0", "two"),
    ]
    assert repair_orphaned_tool_pairs(msgs) == msgs


def test_newer_call_with_a_reused_id_takes_the_late_result():
    msgs = [SYSTEM, call("call_0"), user("interrupt"), call("call_0"), result("call_0", "r")]
    out = repair_orphaned_tool_pairs(msgs)
    assert roles_and_ids(out) == [
        ("system", ""),
        ("assistant", "call_0"),
        ("tool", "call_0"),
        ("user", ""),
        ("assistant", "call_0"),
        ("tool", "call_0"),
    ]
    assert out[2].content == TRUNCATED_STUB
    assert out[5].content == "r"


def test_repair_is_idempotent_on_a_messy_history():
    msgs = [
        SYSTEM,
        result("gone"),
        call("a", "b"),
        user("interrupt"),
        result("b", "B"),
        result("b", "dup"),
        call("c"),
        asst("end"),
        result("a", "very late"),
    ]
    once = repair_orphaned_tool_pairs(msgs)
    assert repair_orphaned_tool_pairs(once) == once
    assert is_valid_tool_sequence(once)


def test_repair_does_not_modify_its_input():
    msgs = [SYSTEM, call("a", "b"), user("x"), result("b"), result("zz")]
    snapshot = copy.deepcopy(msgs)
    repair_orphaned_tool_pairs(msgs)
    assert msgs == snapshot


def test_valid_sequence_accepts_parallel_results_in_any_order():
    assert is_valid_tool_sequence([SYSTEM, call("a", "b"), result("b"), result("a"), asst("ok")])


def test_valid_sequence_rejects_a_tool_message_outside_a_block():
    assert not is_valid_tool_sequence([SYSTEM, user("hi"), result("a")])


def test_valid_sequence_rejects_a_message_between_a_call_and_its_result():
    assert not is_valid_tool_sequence([SYSTEM, call("a"), user("wait"), result("a")])


def test_valid_sequence_rejects_a_missing_result():
    assert not is_valid_tool_sequence([SYSTEM, call("a", "b"), result("a"), asst("ok")])


def test_valid_sequence_rejects_a_duplicate_result():
    assert not is_valid_tool_sequence([SYSTEM, call("a"), result("a"), result("a")])


def test_valid_sequence_rejects_a_call_at_the_very_end():
    assert not is_valid_tool_sequence([SYSTEM, user("hi"), call("a")])
