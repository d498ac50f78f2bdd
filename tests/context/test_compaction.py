"""The cut rule, SlidingWindowCompactor (seed §6.3) and TokenBudgetCompactor (seed §6.2)."""

import copy

import pytest

from harness9.context import (
    SlidingWindowCompactor,
    TokenBudgetCompactor,
    estimate_tokens,
    find_cut,
    is_valid_tool_sequence,
)
from harness9.context.pipeline import budget_for_window
from harness9.schema import TRUNCATED_STUB, Message
from tests.support.history import SYSTEM, asst, call, result, user, users

# -- find_cut ---------------------------------------------------------------


def test_cut_keeps_exactly_the_newest_messages_when_no_result_is_split():
    msgs = [SYSTEM, *users(9)]
    assert find_cut(msgs, 4) == 6


def test_cut_on_a_result_moves_back_over_the_parallel_results_to_their_call():
    msgs = [SYSTEM, user("go"), call("a", "b"), result("a"), result("b"), asst("done")]
    # Keeping the newest 2 would begin at result("b"): the call at index 2 comes along.
    assert find_cut(msgs, 2) == 2


def test_cut_on_a_result_whose_call_is_not_adjacent_stays_put():
    msgs = [SYSTEM, call("a"), user("interrupt"), result("a"), asst("done")]
    assert find_cut(msgs, 2) == 3


def test_cut_is_never_before_the_first_non_system_message():
    msgs = [SYSTEM, *users(3)]
    assert find_cut(msgs, 10) == 1
    assert find_cut([SYSTEM, result("a"), asst("x")], 2) == 1


# -- shared rules -----------------------------------------------------------


@pytest.mark.parametrize(
    "compactor", [SlidingWindowCompactor(3), TokenBudgetCompactor(10, min_tail_messages=1)]
)
def test_input_not_starting_with_the_system_message_is_returned_unchanged(compactor):
    msgs = [*users(10), result("orphan")]
    out = compactor.compact(msgs).messages
    assert out == msgs
    assert compactor.plan(msgs).would_compact is False


@pytest.mark.parametrize(
    "compactor", [SlidingWindowCompactor(4), TokenBudgetCompactor(300, min_tail_messages=3)]
)
def test_compactors_do_not_modify_their_input(compactor):
    msgs = [SYSTEM, *users(6), call("a"), result("a"), call("b"), user("x"), result("zz")]
    snapshot = copy.deepcopy(msgs)
    compactor.compact(msgs)
    assert msgs == snapshot


# -- SlidingWindowCompactor -------------------------------------------------


def test_window_returns_a_short_history_as_it_is():
    msgs = [SYSTEM, *users(4)]
    assert SlidingWindowCompactor(5).compact(msgs).messages == msgs


def test_window_keeps_the_system_message_and_the_newest_max_minus_one():
    msgs = [SYSTEM, *users(9)]
    out = SlidingWindowCompactor(5).compact(msgs).messages
    assert out == [SYSTEM, *msgs[6:]]
    assert len(out) == 5


def test_window_default_is_one_hundred_messages():
    msgs = [SYSTEM, *users(150, size=5)]
    out = SlidingWindowCompactor().compact(msgs).messages
    assert len(out) == 100
    assert out[1] is msgs[52]  # 151 messages: the newest 99 follow the system message


def test_window_start_on_a_result_is_moved_back_to_its_call():
    # Boundary fix A of §6.3: the window would start at result("a").
    msgs = [SYSTEM, *users(3), call("a"), result("a"), asst("done"), user("next")]
    out = SlidingWindowCompactor(4).compact(msgs).messages
    assert out == [SYSTEM, call("a"), result("a"), asst("done"), user("next")]


def test_window_drops_a_kept_result_whose_call_was_cut_off():
    # Type A: the call is not adjacent (an interrupt sits between). The seed's backtrack
    # moves the start back over the result to the user message; the repair drops the
    # orphaned result, and the window holds its 3 messages.
    msgs = [SYSTEM, user("go"), call("a"), user("stop"), result("a"), asst("ok")]
    out = SlidingWindowCompactor(3).compact(msgs).messages
    assert out == [SYSTEM, user("stop"), asst("ok")]


def test_window_of_three_keeps_the_user_message_before_an_orphaned_result():
    # The case of seed §6.3 step 3: [system, assistant(call a), user, tool(a), user].
    msgs = [SYSTEM, call("a"), user("u1"), result("a"), user("u2")]
    out = SlidingWindowCompactor(max_messages=3).compact(msgs).messages
    assert out == [SYSTEM, user("u1"), user("u2")]


def test_window_stubs_a_kept_call_whose_result_never_came():
    # Type B (boundary fix B): the interrupted call has no result anywhere.
    msgs = [SYSTEM, *users(4), call("a"), asst("interrupted"), user("again")]
    out = SlidingWindowCompactor(4).compact(msgs).messages
    assert out == [
        SYSTEM,
        call("a"),
        Message("tool", TRUNCATED_STUB, tool_call_id="a"),
        asst("interrupted"),
        user("again"),
    ]


def test_forced_window_keeps_the_window_it_promises():
    # "window: the last 100 messages": forcing it does not drop half of a short history.
    msgs = [SYSTEM, *users(19)]
    plan = SlidingWindowCompactor(100).plan(msgs, force=True)
    assert not plan.would_compact and plan.cut == 1
    long = [SYSTEM, *users(150)]
    assert SlidingWindowCompactor(100).plan(long, force=True).cut == 52  # the newest 99 kept


def test_window_plan_reports_the_exact_tokens_of_the_result():
    msgs = [SYSTEM, *users(9), call("a"), asst("x")]
    compactor = SlidingWindowCompactor(5)
    res = compactor.compact(msgs)
    assert res.plan.tokens_before == estimate_tokens(msgs)
    assert res.plan.tokens_after == estimate_tokens(res.messages)
    assert res.strategy == "window" and res.summary is None


# -- TokenBudgetCompactor ---------------------------------------------------


def test_budget_for_context_window_is_eighty_percent():
    c = budget_for_window(128_000)
    assert (c.steps.target, c.steps.min_tail) == (102_400, 6)


def test_budget_leaves_a_history_within_budget_alone():
    msgs = [SYSTEM, *users(20)]  # 20 * 100 + 4 tokens
    assert TokenBudgetCompactor(2100).compact(msgs).messages == msgs


def test_budget_leaves_a_history_of_only_the_min_tail_alone_even_over_budget():
    msgs = [SYSTEM, *users(6)]
    assert TokenBudgetCompactor(10).compact(msgs).messages == msgs


def test_budget_keeps_the_largest_suffix_that_fits():
    msgs = [SYSTEM, *users(20)]  # system 17 bytes, each user message 400 bytes (100 tokens)
    out = TokenBudgetCompactor(1000).compact(msgs).messages
    # 9 messages: (17 + 3600) // 4 = 904 tokens; 10 would be 1004 > 1000.
    assert out == [SYSTEM, *msgs[12:]]
    assert estimate_tokens(out) == 904


def test_budget_rounds_once_over_the_sum_of_bytes():
    system = Message("system", "abc")
    msgs = [system, *[user("hello") for _ in range(10)]]
    out = TokenBudgetCompactor(5, min_tail_messages=1).compact(msgs).messages
    # (3 + 5k) // 4 <= 5 allows k = 4; rounding each message (5 // 4 = 1) would allow 5.
    assert len(out) == 1 + 4


def test_budget_keeps_the_min_tail_even_when_it_does_not_fit():
    msgs = [SYSTEM, *users(20)]
    out = TokenBudgetCompactor(100, min_tail_messages=6).compact(msgs).messages
    assert out == [SYSTEM, *msgs[-6:]]


def test_budget_takes_the_call_along_with_results_at_the_start_of_the_tail():
    msgs = [SYSTEM, *users(10), call("a", "b"), result("a", "A"), result("b", "B"), asst("done")]
    out = TokenBudgetCompactor(50, min_tail_messages=2).compact(msgs).messages
    assert out == [SYSTEM, call("a", "b"), result("a", "A"), result("b", "B"), asst("done")]


def test_budget_drops_a_kept_result_whose_call_was_cut_off():
    msgs = [SYSTEM, *users(10), call("a"), user("stop"), result("a", "late"), asst("ok")]
    # The newest 2 (19 bytes with the system message) fit 4 tokens; 3 would not.
    out = TokenBudgetCompactor(4, min_tail_messages=2).compact(msgs).messages
    assert out == [SYSTEM, asst("ok")]


def test_budget_stubs_a_kept_call_whose_result_never_came():
    msgs = [SYSTEM, *users(10), call("a"), asst("interrupted")]
    out = TokenBudgetCompactor(40, min_tail_messages=2).compact(msgs).messages
    assert out == [
        SYSTEM,
        call("a"),
        Message("tool", TRUNCATED_STUB, tool_call_id="a"),
        asst("interrupted"),
    ]
    assert is_valid_tool_sequence(out)


def test_budget_counts_the_stubs_it_will_add_against_the_budget():
    msgs = [SYSTEM, *users(3, size=8), call("c" * 10, args="{}"), *users(2, size=8)]
    # System 17 + two users 16 = 33 bytes. The call adds 16 bytes (49 -> 12 tokens, would
    # fit 14) but its stub adds 29 more (78 -> 19 tokens): so the call must stay out.
    out = TokenBudgetCompactor(14, min_tail_messages=2).compact(msgs).messages
    assert out == [SYSTEM, *msgs[-2:]]


def test_budget_plan_reports_the_exact_tokens_of_the_result():
    msgs = [SYSTEM, *users(10), call("a"), user("stop"), result("a", "late" * 50), asst("ok")]
    compactor = TokenBudgetCompactor(300, min_tail_messages=2)
    res = compactor.compact(msgs)
    assert res.plan.would_compact
    assert res.plan.tokens_after == estimate_tokens(res.messages)
    assert res.plan.threshold == 300


def test_forced_budget_halves_a_history_under_budget():
    msgs = [SYSTEM, *users(20)]  # 2004 tokens, budget 10,000
    res = TokenBudgetCompactor(10_000).compact(msgs, force=True)
    assert res.plan.would_compact
    assert res.plan.tokens_after <= 2004 // 2
    # Target min(10,000, 2004 // 2) = 1002: 9 messages are 904 tokens, 10 would be 1004.
    assert res.messages == [SYSTEM, *msgs[12:]]
