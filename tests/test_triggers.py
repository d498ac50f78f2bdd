import pytest

from harness9.context.triggers import SessionTriggerState, SmartTrigger, TriggerInfo, read_heavy


def info(current, *, max_tokens=50_000, growth=0.0, reads=False, cd=False):
    return TriggerInfo(
        max_tokens=max_tokens,
        threshold_tokens=max_tokens * 80 // 100,
        current_tokens=current,
        growth_rate=growth,
        read_heavy=reads,
        in_cooldown=cd,
    )


def growth_after(*tokens: int) -> float:
    """The growth rate the trigger sees at the call after ``tokens`` were recorded."""
    state = SessionTriggerState()
    for t in tokens:
        state.info(t, [], max_tokens=10**9, threshold_tokens=10**9)
    return state.info(0, [], max_tokens=10**9, threshold_tokens=10**9).growth_rate


def test_growth_rate_is_average_tokens_added_per_iteration():
    assert growth_after(10_000, 20_000, 30_000) == 10_000.0


def test_growth_rate_needs_two_snapshots():
    assert growth_after() == 0.0
    assert growth_after(5_000) == 0.0


def test_growth_window_keeps_the_last_ten_snapshots():
    tokens = [i * 1000 if i < 10 else 9000 + (i - 9) * 3000 for i in range(15)]
    state = SessionTriggerState()
    for t in tokens:
        state.info(t, [], max_tokens=10**9, threshold_tokens=10**9)
    assert list(state.tokens) == tokens[5:] and state.tokens[0] == 5000
    # (24,000 - 5,000) over 9 steps
    assert growth_after(*tokens) == pytest.approx(19_000 / 9)


def test_a_token_drop_restarts_the_window():
    state = SessionTriggerState()
    for t in [10_000, 30_000, 8_000, 9_000]:
        state.info(t, [], max_tokens=10**9, threshold_tokens=10**9)
    assert list(state.tokens) == [8_000, 9_000]
    assert growth_after(10_000, 30_000, 8_000, 9_000) == 1000.0


def test_cooldown_after_compress_at_5_covers_6_and_7_not_8():
    c = SessionTriggerState()
    assert not c.in_cooldown(5)
    c.iterations = 5
    c.compacted()
    assert [c.in_cooldown(i) for i in (6, 7, 8, 9)] == [True, True, False, False]


def test_cooldown_ends_when_iterations_restart_lower():
    c = SessionTriggerState(iterations=5)
    c.compacted()
    assert not c.in_cooldown(1)


def test_trigger_compacts_at_fixed_threshold():
    trig = SmartTrigger()
    assert not trig.should_compress_dynamic(info(39_999))
    assert trig.should_compress_dynamic(info(40_000))


def test_growth_prediction_compacts_at_30k_of_50k_before_40k_threshold():
    state = SessionTriggerState()
    for tokens in [10_000, 20_000, 30_000]:
        state.info(tokens, [], max_tokens=10**9, threshold_tokens=10**9)
    ti = state.info(30_000, [], max_tokens=50_000, threshold_tokens=40_000)
    assert ti.current_tokens == 30_000 and ti.growth_rate == 10_000.0
    assert state.iterations == 4
    assert SmartTrigger().should_compress_dynamic(ti)


def test_slow_growth_does_not_compact_below_threshold():
    # 30K + 2 * 4,999 = 39,998 < 40K
    assert not SmartTrigger().should_compress_dynamic(info(30_000, growth=4_999))
    assert SmartTrigger().should_compress_dynamic(info(30_000, growth=5_000))


def test_shrinking_context_compacts_only_at_the_threshold():
    assert not SmartTrigger().should_compress_dynamic(info(39_999, growth=-5_000))
    assert SmartTrigger().should_compress_dynamic(info(40_000, growth=-5_000))


def test_read_heavy_pattern_looks_three_iterations_ahead():
    # 34K + 2 * 2K = 38K stays under 40K; 34K + 3 * 2K = 40K reaches it.
    assert not SmartTrigger().should_compress_dynamic(info(34_000, growth=2_000))
    assert SmartTrigger().should_compress_dynamic(info(34_000, growth=2_000, reads=True))


def test_cooldown_blocks_threshold_and_prediction_but_not_hard_overflow():
    trig = SmartTrigger()
    assert not trig.should_compress_dynamic(info(45_000, cd=True))
    assert not trig.should_compress_dynamic(info(30_000, growth=20_000, cd=True))
    assert trig.should_compress_dynamic(info(50_000, cd=True))


def test_engine_loop_compress_at_5_then_6_7_skip_8_compacts():
    state = SessionTriggerState(iterations=4)
    trig = SmartTrigger()
    decisions = {}
    for _ in range(5, 9):  # 45K of 50K at every model call
        ti = state.info(45_000, [], max_tokens=50_000, threshold_tokens=40_000)
        decisions[state.iterations] = trig.should_compress_dynamic(ti)
        if decisions[state.iterations]:
            state.compacted()
    assert decisions == {5: True, 6: False, 7: False, 8: True}


def test_read_heavy_means_more_than_half_reads_and_no_sub_agent():
    assert not read_heavy([])
    assert read_heavy(["read_file", "grep", "read_file", "write_file"])
    assert read_heavy(["offload_recall", "ls", "bash"])
    assert not read_heavy(["read_file", "grep", "write_file", "bash"])  # half is not more
    assert not read_heavy(["write_file", "write_file", "write_todos", "read_file"])
    assert not read_heavy(["read_file", "read_file", "task"])  # a sub-agent call outranks reads


def test_trigger_info_reads_the_last_five_tools():
    state = SessionTriggerState()
    # The sixth-last call was a sub-agent's: counted, it would rule read-heavy out.
    tools = ["task", "bash", "read_file", "grep", "read_file", "read_file"]
    ti = state.info(1_000, tools, max_tokens=100_000, threshold_tokens=80_000)
    assert ti.read_heavy is True
    assert state.iterations == 1 and ti.in_cooldown is False
