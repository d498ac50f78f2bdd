import json

from hypothesis import given
from hypothesis import strategies as st

from harness9.context.pipeline import (
    density_score,
    evict_by_density,
    eviction_compactor,
    is_large_code_dump,
    is_repetitive_grep,
    tool_groups,
)
from harness9.context.stubs import is_valid_tool_sequence
from harness9.schema import Message, ToolCall
from harness9.tokens import estimate_tokens
from tests.support.history import seen_tokens

SYS = Message("system", "You are harness9.")
CODE = "\n".join(f"    def method_{i}(self):\n        return {i}" for i in range(100))
GREP = "".join(f"src/m{i}.py:{i}:    import os\n" for i in range(200))
ERROR_OUT = "Traceback (most recent call last):\nValueError: bad config in settings.toml\n"
MARKER = "📂 [offload:ofl_0123456789ab] 5000 tokens offloaded\nbash: ...\nuse offload_recall"


def group(n: int, name: str, content: str, args: dict | None = None) -> list[Message]:
    call = ToolCall(f"call_{n}", name, json.dumps(args or {}))
    return [Message("assistant", "", [call]), Message("tool", content, tool_call_id=call.id)]


def test_density_scores_follow_the_seed_rules():
    assert density_score(Message("tool", "ValueError: boom")) == 3.0 + 1.5
    assert density_score(Message("assistant", "We decided to use sqlite")) == 2.5 + 1.5
    assert density_score(Message("tool", "see src/app.py")) == 1.0 + 1.5
    assert density_score(Message("tool", "x" * 3001)) == -2.0
    assert density_score(Message("tool", CODE)) == -2.0 - 2.0  # dump, and over 3,000 chars
    assert density_score(Message("tool", GREP)) == 1.0 - 1.5 - 2.0  # paths, grep, long


def test_code_dump_and_grep_detectors():
    assert is_large_code_dump(CODE) and not is_large_code_dump("plain words " * 300)
    assert is_repetitive_grep(GREP) and not is_repetitive_grep("a.py:1:x\n" * 9)


def test_tool_groups_pair_calls_with_results():
    msgs = [SYS, Message("user", "go"), *group(1, "bash", "a"), *group(2, "bash", "b")]
    assert [(g.call_index, g.result_indices) for g in tool_groups(msgs)] == [(2, [3]), (4, [5])]


def history() -> list[Message]:
    return [
        SYS,
        Message("user", "fix the config loader"),
        *group(1, "read_file", CODE, {"path": "src/loader.py"}),  # idx 3: lowest score
        *group(2, "bash", ERROR_OUT + "z" * 4000),  # idx 5: error keeps it high
        *group(3, "grep", GREP),  # idx 7: low
        *group(4, "bash", MARKER),  # idx 9: never evicted
        *group(5, "bash", "n" * 4000),  # idx 11, kept (newest 3)
        *group(6, "bash", "m" * 4000),  # idx 13, kept
        *group(7, "bash", "k" * 4000),  # idx 15, kept
    ]


def test_lowest_density_is_evicted_first_and_stops_at_target():
    msgs = history()
    before = estimate_tokens(msgs)
    code_tokens = len(CODE) // 4
    # Slack for the stub itself (~110 tokens: summary plus up to 320 bytes of names).
    out = evict_by_density(msgs, keep_groups=3, target_tokens=before - code_tokens + 200)
    assert out[3].content.startswith("[evicted] read_file src/loader.py: 200 lines")
    assert out[3].content.endswith(f"({code_tokens} tokens evicted)")
    assert [m.content for i, m in enumerate(out) if i != 3] == [
        m.content for i, m in enumerate(msgs) if i != 3
    ]


def test_eviction_order_is_code_then_grep_then_error_output():
    msgs = history()
    out = evict_by_density(msgs, keep_groups=3, target_tokens=0)
    assert out[3].content.startswith("[evicted] read_file")
    assert out[5].content.startswith("[evicted] bash: exit code unknown")
    assert out[7].content.startswith("[evicted] grep: 200 matches\n  src/m0.py:0:")
    assert out[9].content == MARKER
    assert [m.content for m in out[10:]] == [m.content for m in msgs[10:]]


def test_grep_is_evicted_before_error_output():
    msgs = history()
    code_and_grep = (len(CODE) + len(GREP)) // 4
    out = evict_by_density(
        msgs, keep_groups=3, target_tokens=estimate_tokens(msgs) - code_and_grep + 400
    )
    assert out[7].content.startswith("[evicted]")
    assert out[5].content == msgs[5].content


def test_ties_evict_the_oldest_first():
    msgs = [SYS, *group(1, "bash", "a" * 4000), *group(2, "bash", "b" * 4000), *group(3, "x", "c")]
    out = evict_by_density(msgs, keep_groups=1, target_tokens=estimate_tokens(msgs) - 500)
    assert out[2].content.startswith("[evicted]") and out[4].content == "b" * 4000


def test_roles_ids_and_length_are_unchanged_and_input_is_not_mutated():
    msgs = history()
    snapshot = [(m.role, m.content, m.tool_call_id, list(m.tool_calls)) for m in msgs]
    out = evict_by_density(msgs, keep_groups=3, target_tokens=0)
    assert [(m.role, m.tool_call_id) for m in out] == [(m.role, m.tool_call_id) for m in msgs]
    assert [(m.role, m.content, m.tool_call_id, list(m.tool_calls)) for m in msgs] == snapshot


def test_under_target_returns_an_equal_copy():
    msgs = history()
    out = evict_by_density(msgs, target_tokens=10**9)
    assert out == msgs and out is not msgs


def test_short_results_are_not_replaced_by_longer_summaries():
    msgs = [
        SYS,
        *group(1, "bash", "ok"),
        *group(2, "bash", "b"),
        *group(3, "bash", "c"),
        *group(4, "x", "d"),
    ]
    assert evict_by_density(msgs, keep_groups=3, target_tokens=0)[2].content == "ok"


def test_eviction_compactor_plans_and_compacts_over_budget():
    msgs = history()
    before = estimate_tokens(msgs)
    comp = eviction_compactor(max_tokens=before - 1, target_ratio=0.7)
    plan = comp.plan(msgs)
    assert plan.would_compact and plan.strategy == "evict" and plan.cut == 1  # nothing folded
    assert plan.tokens_before == before and plan.threshold == before - 1
    result = comp.compact(msgs)
    assert result.summary is None and result.strategy == "evict" and result.error is None
    assert seen_tokens(result.messages) == plan.tokens_after < before


def test_eviction_compactor_leaves_history_under_budget_alone_unless_forced():
    msgs = history()
    comp = eviction_compactor(max_tokens=10**6)
    assert not comp.plan(msgs).would_compact
    assert comp.compact(msgs).messages == msgs
    assert comp.plan(msgs, force=True).would_compact


def test_eviction_compactor_returns_input_not_starting_with_system():
    msgs = history()[1:]
    assert eviction_compactor(max_tokens=1).compact(msgs).messages == msgs


@given(
    st.lists(
        st.tuples(st.sampled_from(["bash", "read_file", "grep"]), st.integers(0, 6000)), max_size=12
    ),
    st.integers(0, 5),
    st.integers(0, 20000),
)
def test_eviction_keeps_any_valid_sequence_valid(specs, keep, target):
    msgs = [SYS, Message("user", "go")]
    for n, (name, size) in enumerate(specs):
        msgs += group(n, name, "line of output\n" * (size // 15))
    out = evict_by_density(msgs, keep_groups=keep, target_tokens=target)
    assert is_valid_tool_sequence(out) and len(out) == len(msgs)
    assert estimate_tokens(out) <= estimate_tokens(msgs)


def test_evicted_failing_run_keeps_its_error_line():
    output = "Traceback (most recent call last):\nKeyError: 'tenant_42'\n" + "log line\n" * 400
    msgs = [SYS, *group(1, "bash", output, {"command": "pytest"})]
    msgs += [*group(2, "bash", "ok"), *group(3, "bash", "ok"), *group(4, "bash", "ok")]
    out = evict_by_density(msgs, keep_groups=3, target_tokens=0)
    assert out[2].content.startswith("[evicted] bash `pytest`: exit code unknown, 402 lines")
    assert "errors:\n  KeyError: 'tenant_42'" in out[2].content


def old_result(name: str, content: str, args: dict) -> list[Message]:
    """One result old enough to evict, then three newer groups that are kept."""
    msgs = [SYS, *group(1, name, content, args)]
    return msgs + [*group(2, "bash", "ok"), *group(3, "bash", "ok"), *group(4, "bash", "ok")]


def test_evicted_read_keeps_every_declared_name_that_fits_the_stub():
    code = "".join(f"def fn_{i:02}(x):\n    return x\n" for i in range(12)) + "pad\n" * 500
    msgs = old_result("read_file", code, {"path": "src/fns.py"})
    stub = evict_by_density(msgs, keep_groups=3, target_tokens=0)[2].content
    assert stub.startswith("[evicted] read_file src/fns.py: 524 lines\n")
    assert "defines: fn_00, fn_01, fn_02, fn_03, fn_04, fn_05, fn_06, fn_07\n" in stub
    assert stub.endswith("\nnames: fn_08, fn_09, fn_10, fn_11 (581 tokens evicted)")


def test_evicted_grep_lists_paths_within_320_bytes_and_counts_the_rest():
    # Each "src/mod_NN.py" costs 15 bytes in the stub: 21 of the 59 not already shown.
    grep = "".join(f"src/mod_{i:02}.py:{i + 1}:    import os\n" for i in range(60))
    stub = evict_by_density(old_result("grep", grep, {}), 3, 0)[2].content
    shown = ", ".join(f"src/mod_{i:02}.py" for i in range(1, 22))
    assert f"\npaths: {shown} … and 38 more not shown (" in stub


def conversation(turns: int) -> list[Message]:
    """Turns whose weight is the conversation, not its tool results (each too short to
    evict): what is left once every old result has been evicted."""
    msgs = [SYS]
    for i in range(turns):
        msgs += [
            Message("user", f"step {i}: never edit the table audit_{i} by hand.\n" + "u" * 300),
            Message("assistant", f"We decided to use backend_{i}.\n" + "a" * 300),
            *group(i, "bash", f"ok {i}", {"command": f"make step{i}"}),
        ]
    return msgs


def test_eviction_that_cannot_land_folds_the_head_keeping_its_facts():
    from harness9.context.facts import extract_fingerprint, validate_markers

    msgs = conversation(40)
    before = estimate_tokens(msgs)  # 8,461
    comp = eviction_compactor(max_tokens=6_000)  # evicts to 4,200; folds to a 3,000 tail
    result = comp.compact(msgs)

    assert result.strategy == "evict" and result.error is None and result.plan.cut > 1
    assert estimate_tokens(result.messages) <= 4_200 < before
    assert is_valid_tool_sequence(result.messages)
    head = msgs[1 : result.plan.cut]
    assert validate_markers(result.summary, extract_fingerprint(head)) == []
    newest_user = next(m for m in reversed(head) if m.role == "user")
    assert f"User: {newest_user.content}" in result.summary  # the newest words, verbatim
    assert "@constraint:never edit the table audit_0 by hand" in result.summary  # the oldest's rule
    assert result.messages[2:] == msgs[result.plan.cut :]  # the tail is kept as it was


def test_a_forced_eviction_with_nothing_left_to_evict_folds():
    msgs = conversation(12)
    comp = eviction_compactor(max_tokens=10**6)
    result = comp.compact(msgs, force=True)
    assert result.plan.would_compact and result.plan.cut > 1 and result.summary
    assert estimate_tokens(result.messages) < estimate_tokens(msgs)


def test_a_second_fold_keeps_the_rules_the_first_kept_only_as_words():
    """The first fold keeps its newest words verbatim, not as facts; the second drops
    those words for newer ones, so it reads them again for the facts they state."""
    comp = eviction_compactor(max_tokens=6_000)
    first = comp.compact(conversation(36))
    assert first.plan.cut > 1
    later = conversation(60)[1 + 4 * 36 :]  # turns 36..59, as they came after

    second = comp.compact([*first.messages, *later])

    assert second.plan.cut > 1 and is_valid_tool_sequence(second.messages)
    text = "\n".join(m.content for m in second.messages)
    assert all(f"audit_{i} by hand" in text for i in range(60))
