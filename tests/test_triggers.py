import pytest

from harness9.context.triggers import (
    CompressCooldown,
    SessionTriggerState,
    SmartTrigger,
    TokenGrowthTracker,
    ToolCallPattern,
    TriggerInfo,
    classify_pattern,
    classify_tool,
)

R, W, B = ToolCallPattern.READ_HEAVY, ToolCallPattern.WRITE_HEAVY, ToolCallPattern.MIXED


def info(current, *, max_tokens=50_000, growth=0.0, pattern=ToolCallPattern.CONVERSATION, cd=False):
    return TriggerInfo(
        max_tokens=max_tokens,
        threshold_tokens=max_tokens * 80 // 100,
        current_tokens=current,
        growth_rate=growth,
        tool_pattern=pattern,
        in_cooldown=cd,
    )


def test_growth_rate_is_average_tokens_added_per_iteration():
    t = TokenGrowthTracker()
    for i, tokens in enumerate([10_000, 20_000, 30_000], start=1):
        t.record(i, tokens)
    assert t.growth_rate() == 10_000.0
    assert t.history() == [10_000, 20_000, 30_000]


def test_growth_rate_needs_two_snapshots():
    t = TokenGrowthTracker()
    assert t.growth_rate() == 0.0
    t.record(1, 5_000)
    assert t.growth_rate() == 0.0


def test_growth_window_keeps_the_last_ten_snapshots():
    t = TokenGrowthTracker()
    for i in range(15):
        t.record(i, i * 1000 if i < 10 else 9000 + (i - 9) * 3000)
    assert len(t.history()) == 10
    assert t.history()[0] == 5000
    # (24,000 - 5,000) over 9 steps
    assert t.growth_rate() == pytest.approx(19_000 / 9)


def test_a_token_drop_restarts_the_window():
    t = TokenGrowthTracker()
    for i, tokens in enumerate([10_000, 30_000, 8_000, 9_000]):
        t.record(i, tokens)
    assert t.history() == [8_000, 9_000]
    assert t.growth_rate() == 1000.0


def test_reset_clears_the_tracker():
    t = TokenGrowthTracker()
    t.record(1, 1)
    t.record(2, 100)
    t.reset()
    assert t.history() == [] and t.growth_rate() == 0.0


def test_cooldown_after_compress_at_5_covers_6_and_7_not_8():
    c = CompressCooldown()
    assert not c.in_cooldown(5)
    c.record_compress(5)
    assert [c.in_cooldown(i) for i in (6, 7, 8, 9)] == [True, True, False, False]


def test_cooldown_ends_when_iterations_restart_lower():
    c = CompressCooldown()
    c.record_compress(5)
    assert not c.in_cooldown(1)


def test_trigger_compacts_at_fixed_threshold():
    trig = SmartTrigger()
    assert not trig.should_compress_dynamic(info(39_999))
    assert trig.should_compress_dynamic(info(40_000))


def test_growth_prediction_compacts_at_30k_of_50k_before_40k_threshold():
    state = SessionTriggerState()
    for i, tokens in enumerate([10_000, 20_000, 30_000], start=1):
        state.growth_tracker.record(i, tokens)
    state.iterations = 3
    ti = state.info(30_000, [], max_tokens=50_000, threshold_tokens=40_000)
    assert ti.current_tokens == 30_000 and ti.growth_rate == 10_000.0
    assert ti.iteration_count == 4
    assert SmartTrigger().should_compress_dynamic(ti)


def test_slow_growth_does_not_compact_below_threshold():
    # 30K + 2 * 4,999 = 39,998 < 40K
    assert not SmartTrigger().should_compress_dynamic(info(30_000, growth=4_999))
    assert SmartTrigger().should_compress_dynamic(info(30_000, growth=5_000))


def test_read_heavy_pattern_looks_three_iterations_ahead():
    # 34K + 2 * 2K = 38K stays under 40K; 34K + 3 * 2K = 40K reaches it.
    assert not SmartTrigger().should_compress_dynamic(info(34_000, growth=2_000))
    assert SmartTrigger().should_compress_dynamic(info(34_000, growth=2_000, pattern=R))


def test_cooldown_blocks_threshold_and_prediction_but_not_hard_overflow():
    trig = SmartTrigger()
    assert not trig.should_compress_dynamic(info(45_000, cd=True))
    assert not trig.should_compress_dynamic(info(30_000, growth=20_000, cd=True))
    assert trig.should_compress_dynamic(info(50_000, cd=True))


def test_engine_loop_compress_at_5_then_6_7_skip_8_compacts():
    state = SessionTriggerState()
    state.iterations = 4
    trig = SmartTrigger()
    decisions = {}
    for _ in range(5, 9):  # 45K of 50K at every model call
        ti = state.info(45_000, [], max_tokens=50_000, threshold_tokens=40_000)
        decisions[ti.iteration_count] = trig.should_compress_dynamic(ti)
        if decisions[ti.iteration_count]:
            state.compacted()
    assert decisions == {5: True, 6: False, 7: False, 8: True}


@pytest.mark.parametrize(
    ("name", "args", "kind"),
    [
        ("read_file", "{}", "read"),
        ("grep", "{}", "read"),
        ("offload_recall", "{}", "read"),
        ("write_file", "{}", "write"),
        ("write_todos", "{}", "write"),
        ("bash", '{"command": "cat a.py | head -5"}', "read"),
        ("bash", '{"command": "git log --oneline"}', "read"),
        ("bash", '{"command": "git commit -m x"}', "exec"),
        ("bash", '{"command": "sed -i s/a/b/ f"}', "exec"),
        ("bash", '{"command": "echo hi > out.txt"}', "exec"),
        ("bash", '{"command": "pytest -q"}', "exec"),
        ("task", "{}", "sub_agent"),
        ("fetch_url", "{}", "other"),
    ],
)
def test_classify_tool(name, args, kind):
    assert classify_tool(name, args) == kind


def test_pattern_classification_from_recent_tools():
    assert classify_pattern([]) is ToolCallPattern.CONVERSATION
    assert classify_pattern(["read_file", "grep", "read_file", "write_file"]) is R
    assert classify_pattern(["write_file", "write_file", "write_todos", "read_file"]) is W
    assert classify_pattern(["read_file", "write_file", "bash", "fetch_url"]) is B
    assert classify_pattern(["read_file", "task"]) is ToolCallPattern.SUB_AGENT


def test_trigger_info_reads_the_recent_tools():
    state = SessionTriggerState()
    tools = ["write_file", "bash", "read_file", "grep", "read_file", "read_file"]
    ti = state.info(1_000, tools[-5:], max_tokens=100_000, threshold_tokens=80_000)
    assert ti.recent_tools == ["bash", "read_file", "grep", "read_file", "read_file"]
    assert ti.tool_call_count == 5
    assert ti.tool_pattern is R
    assert ti.iteration_count == 1 and ti.in_cooldown is False


def test_state_reset_clears_tracker_cooldown_and_iterations():
    p = SessionTriggerState()
    p.growth_tracker.record(1, 10)
    p.growth_tracker.record(2, 20)
    p.iterations = 2
    p.compacted()
    p.reset()
    assert p.growth_tracker.history() == [] and not p.cooldown.in_cooldown(3)
    assert p.iterations == 0
