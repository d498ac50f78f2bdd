import pytest

from harness9.context.policy import SessionContextState, read_heavy
from harness9.schema import ToolDefinition

UNBOUNDED = 10**9  # a window and threshold no call reaches


def due(current, *, window=50_000, growth=0, reads=False, cd=False):
    """The trigger's decision at ``current`` tokens (threshold 80 % of ``window``), after
    two calls that grew by ``growth`` each; ``reads``: the recent calls mostly read;
    ``cd``: the call before it compacted."""
    state = SessionContextState()
    for tokens in (current - 2 * growth, current - growth):
        state.smart_trigger(tokens, False, UNBOUNDED, UNBOUNDED)
    if cd:
        state.compacted()
    return state.smart_trigger(current, reads, window, window * 80 // 100)


def growth_after(*tokens: int) -> float:
    """The growth rate the trigger sees at the call after ``tokens`` were recorded."""
    state = SessionContextState()
    for t in tokens:
        state.smart_trigger(t, False, UNBOUNDED, UNBOUNDED)
    return state.growth()


def test_growth_rate_is_average_tokens_added_per_iteration():
    assert growth_after(10_000, 20_000, 30_000) == 10_000.0


def test_growth_rate_needs_two_snapshots():
    assert growth_after() == 0.0
    assert growth_after(5_000) == 0.0


def test_growth_window_keeps_the_last_ten_snapshots():
    tokens = [i * 1000 if i < 10 else 9000 + (i - 9) * 3000 for i in range(15)]
    state = SessionContextState()
    for t in tokens:
        state.smart_trigger(t, False, UNBOUNDED, UNBOUNDED)
    assert list(state.tokens) == tokens[5:] and state.tokens[0] == 5000
    # (24,000 - 5,000) over 9 steps
    assert growth_after(*tokens) == pytest.approx(19_000 / 9)


def test_a_token_drop_restarts_the_window():
    state = SessionContextState()
    for t in [10_000, 30_000, 8_000, 9_000]:
        state.smart_trigger(t, False, UNBOUNDED, UNBOUNDED)
    assert list(state.tokens) == [8_000, 9_000]
    assert growth_after(10_000, 30_000, 8_000, 9_000) == 1000.0


def test_cooldown_after_compress_at_5_covers_6_and_7_not_8():
    c = SessionContextState()
    assert not c.in_cooldown(5)
    c.iterations = 5
    c.compacted()
    assert [c.in_cooldown(i) for i in (6, 7, 8, 9)] == [True, True, False, False]


def test_cooldown_ends_when_iterations_restart_lower():
    c = SessionContextState(iterations=5)
    c.compacted()
    assert not c.in_cooldown(1)


def test_trigger_compacts_at_fixed_threshold():
    assert not due(39_999)
    assert due(40_000)


def test_growth_prediction_compacts_at_30k_of_50k_before_40k_threshold():
    state = SessionContextState()
    for tokens in [10_000, 20_000, 30_000]:
        state.smart_trigger(tokens, False, UNBOUNDED, UNBOUNDED)
    assert state.growth() == 10_000.0
    assert state.smart_trigger(30_000, False, 50_000, 40_000)
    assert state.iterations == 4


def test_slow_growth_does_not_compact_below_threshold():
    # 30K + 2 * 4,999 = 39,998 < 40K
    assert not due(30_000, growth=4_999)
    assert due(30_000, growth=5_000)


def test_shrinking_context_compacts_only_at_the_threshold():
    assert not due(39_999, growth=-5_000)
    assert due(40_000, growth=-5_000)


def test_read_heavy_pattern_looks_three_iterations_ahead():
    # 34K + 2 * 2K = 38K stays under 40K; 34K + 3 * 2K = 40K reaches it.
    assert not due(34_000, growth=2_000)
    assert due(34_000, growth=2_000, reads=True)


def test_cooldown_blocks_threshold_and_prediction_but_not_hard_overflow():
    assert not due(45_000, cd=True)
    assert not due(30_000, growth=20_000, cd=True)
    assert due(50_000, cd=True)


def test_engine_loop_compress_at_5_then_6_7_skip_8_compacts():
    state = SessionContextState(iterations=4)
    decisions = {}
    for call in range(5, 9):  # 45K of 50K at every model call
        decisions[call] = state.smart_trigger(45_000, False, 50_000, 40_000)
        assert state.iterations == call
        if decisions[call]:
            state.compacted()
    assert decisions == {5: True, 6: False, 7: False, 8: True}


def tool(name, **declared):
    return ToolDefinition(name, f"the {name} tool", **declared)


# As the tools declare themselves (tests/tools checks that the built-in ones do).
TOOLS = [
    tool("read_file", reads=True),
    tool("mcp__fs__list_directory", reads=True),
    tool("write_file"),
    tool("bash"),
    tool("task", sub_agent=True),
]


def test_read_heavy_means_more_than_half_of_the_calls_are_of_tools_that_read():
    assert not read_heavy([], TOOLS)
    assert read_heavy(["read_file", "mcp__fs__list_directory", "write_file"], TOOLS)
    assert not read_heavy(["read_file", "mcp__fs__list_directory", "write_file", "bash"], TOOLS)
    assert not read_heavy(["write_file", "bash", "read_file"], TOOLS)


def test_a_tool_that_does_not_declare_that_it_reads_is_not_a_read_whatever_its_name():
    assert not read_heavy(["grep", "grep", "bash"], [*TOOLS, tool("grep")])
    # Nor is a call of a tool no longer offered (a server that went away).
    assert not read_heavy(["list_files", "list_files", "read_file"], TOOLS)


def test_a_sub_agent_call_outranks_the_reads():
    assert not read_heavy(["read_file", "read_file", "task"], TOOLS)


def test_the_trigger_reads_the_last_five_tools():
    # The sixth-last call was a sub-agent's: counted, it would rule read-heavy out.
    recent = ["task", "bash", "read_file", "mcp__fs__list_directory", "read_file", "read_file"]
    assert read_heavy(recent, TOOLS)
    assert not read_heavy(recent[:-1], TOOLS)
