import json

import pytest
from history import ScriptedSummarizer, seen_tokens
from hypothesis import given
from hypothesis import strategies as st

from harness9.context.compaction import CompactionPlan, CompactionResult
from harness9.context.offload import OffloadConfig, OffloadStore
from harness9.context.pipeline import TokenBudgetCompactor, evict_summary_compactor
from harness9.context.repair import is_valid_tool_sequence
from harness9.context.tokens import estimate_tokens
from harness9.schema import SUMMARY_PREFIX, TRUNCATED_STUB, Message, ToolCall

SYS = Message("system", "You are harness9.")


def evict_summary(summarizer, window, **options):
    """The evict+summary configuration for a ``window``-token context: its threshold is 80 % of it."""
    return evict_summary_compactor(summarizer, window, **options)


class KeepLastTwo:
    """A trivial fallback: system plus the last two messages."""

    strategy = "fallback"
    threshold_tokens = 0

    def plan(self, msgs, *, force=False):
        before, after = estimate_tokens(msgs), estimate_tokens([msgs[0], *msgs[-2:]])
        return CompactionPlan(True, self.strategy, len(msgs) - 2, before, after, 0)

    def compact(self, msgs, *, force=False, instructions=None, on_progress=None):
        return CompactionResult([msgs[0], *msgs[-2:]], self.plan(msgs), None, self.strategy)


def group(n: int, name: str, content: str, args: dict | None = None) -> list[Message]:
    call = ToolCall(f"call_{n}", name, json.dumps(args or {}))
    return [Message("assistant", "", [call]), Message("tool", content, tool_call_id=call.id)]


def tool_heavy() -> list[Message]:
    """~10K tokens, most of it in three old 3,000-token tool results."""
    return [
        SYS,
        Message("user", "refactor the loader"),
        *group(1, "read_file", "a = 1\n" * 2000, {"path": "src/loader.py"}),
        *group(2, "bash", "ValueError: bad header in data.csv\n" + "b" * 12000),
        *group(3, "grep", "src/x.py:1:y\n" * 900),
        *group(4, "bash", "ok"),
        *group(5, "bash", "ok"),
        *group(6, "bash", "ok"),
        Message("assistant", "done"),
    ]


def chatty() -> list[Message]:
    """~10K tokens of plain conversation: nothing to evict."""
    msgs = [SYS]
    for i in range(10):
        msgs.append(Message("user", f"question {i} about src/mod{i}.py " + "q" * 2000))
        msgs.append(Message("assistant", f"answer {i} " + "a" * 2000))
    return msgs


def test_under_threshold_nothing_happens():
    msgs = tool_heavy()
    s = ScriptedSummarizer("Progress: working on the loader")
    comp = evict_summary(s, estimate_tokens(msgs) * 2)
    result = comp.compact(msgs)
    assert not result.plan.would_compact and result.messages == msgs and s.calls == []


def test_eviction_alone_when_it_brings_history_under_threshold():
    msgs = tool_heavy()
    before = estimate_tokens(msgs)
    s = ScriptedSummarizer("Progress: working on the loader")
    comp = evict_summary(s, before)  # threshold 80 % of before
    result = comp.compact(msgs)
    assert result.strategy == "evict" and result.summary is None and s.calls == []
    assert len(result.messages) == len(msgs)
    assert estimate_tokens(result.messages) <= int(before * 0.7)
    assert result.plan.tokens_after == seen_tokens(result.messages)
    # The grep wall scores lowest and alone gets under 70 %; the others stay.
    assert result.messages[7].content.startswith("[evicted] grep: 900 matches")
    assert result.messages[3] == msgs[3] and result.messages[5] == msgs[5]


def test_summarises_when_eviction_is_not_enough():
    msgs = chatty()
    s = ScriptedSummarizer("Progress: working on the loader")
    comp = evict_summary(s, estimate_tokens(msgs), summarizer_window=10**6)
    result = comp.compact(msgs)
    assert result.strategy == "evict+summary" and len(s.calls) == 1
    assert result.messages[0] == SYS
    assert result.messages[1].content.startswith(SUMMARY_PREFIX + "Progress: working on the loader")
    assert result.messages[2:] == msgs[-6:]
    assert result.plan.cut == len(msgs) - 6


def test_summary_is_repaired_with_facts_the_model_left_out():
    msgs = chatty()
    result = evict_summary(
        ScriptedSummarizer("Progress: working on the loader"), estimate_tokens(msgs)
    ).compact(msgs)
    for i in range(7):  # src/mod0..6 were in the folded head
        assert f"@file:src/mod{i}.py" in result.summary
    assert "src/mod9.py" not in result.summary  # still verbatim in the tail


def test_facts_from_evicted_results_survive_the_summary():
    msgs = tool_heavy() + chatty()[1:]
    s = ScriptedSummarizer("Progress: working on the loader")
    comp = evict_summary(s, estimate_tokens(msgs) // 2, summarizer_window=10**6)
    result = comp.compact(msgs)
    assert result.strategy == "evict+summary"
    # The model saw only the evicted stub, yet the error line is kept in the summary.
    prompt = s.calls[0][1].content
    assert "ValueError: bad header in data.csv" not in prompt.split("</facts-to-keep>")[1]
    assert "@error:ValueError: bad header in data.csv" in result.summary


def test_cut_never_separates_a_tool_result_from_its_call():
    msgs = chatty() + [*group(1, "bash", "x" * 100), *group(2, "bash", "y" * 100)]
    comp = evict_summary(
        ScriptedSummarizer("Progress: working on the loader"),
        estimate_tokens(msgs),
        min_tail_messages=3,
    )
    result = comp.compact(msgs)
    assert result.plan.cut == len(msgs) - 4  # moved back from a tool result to its call
    assert is_valid_tool_sequence(result.messages)


def test_force_summarises_under_the_threshold():
    msgs = chatty()
    s = ScriptedSummarizer("Progress: working on the loader")
    result = evict_summary(s, 10**6).compact(msgs, force=True)
    assert result.strategy == "evict+summary" and len(s.calls) == 1


def test_head_larger_than_the_summarisers_window_is_summarised_in_chunks():
    msgs = chatty()  # a head of ~7,000 tokens
    s = ScriptedSummarizer("Progress: working on the loader")
    comp = evict_summary(s, estimate_tokens(msgs), summarizer_window=2000)
    result = comp.compact(msgs)
    assert result.strategy == "evict+summary"
    assert len(s.calls) >= 5  # four or more parts, then the merge
    # Every call fits 60 % of the summariser's 2,000-token window.
    assert max(estimate_tokens(call) for call in s.calls) <= 1200
    assert "@file:src/mod0.py" in result.summary and "@file:src/mod6.py" in result.summary


def test_summariser_window_defaults_to_the_context_window():
    s = ScriptedSummarizer("Progress: working on the loader")
    assert evict_summary(s, 5000).span.window == 5000
    assert evict_summary(s, 9000, summarizer_window=300).span.window == 300


def test_previous_summary_at_the_head_is_merged_not_dropped():
    msgs = chatty()
    msgs[1] = Message("user", SUMMARY_PREFIX + "@file:old/legacy.py\nProgress: earlier work")
    s = ScriptedSummarizer("Progress: working on the loader")
    comp = evict_summary(s, estimate_tokens(msgs), summarizer_window=10**6)
    result = comp.compact(msgs)
    prompt = s.calls[0][1].content
    assert (
        "<previous-summary>\n@file:old/legacy.py\nProgress: earlier work\n</previous-summary>"
        in (prompt)
    )
    # The scripted model dropped it; the fingerprint repair brings the marker back.
    assert "@file:old/legacy.py" in result.summary


def test_summariser_failure_uses_fallback_and_records_error():
    msgs = chatty()
    comp = evict_summary(
        ScriptedSummarizer(error=ConnectionError("model unreachable")),
        estimate_tokens(msgs),
        fallback=KeepLastTwo(),
    )
    result = comp.compact(msgs)
    assert result.strategy == "fallback" and result.messages == [SYS, *msgs[-2:]]
    assert result.error == "ConnectionError: model unreachable"


def test_default_fallback_is_a_token_budget_at_80_percent():
    comp = evict_summary(ScriptedSummarizer("Progress: working on the loader"), 10_000)
    assert isinstance(comp.fallback, TokenBudgetCompactor)
    assert (comp.fallback.max_tokens, comp.fallback.min_tail_messages) == (8000, 6)


def test_summariser_failure_truncates_the_evicted_history_to_the_budget():
    msgs = tool_heavy() + chatty()[1:]
    max_tokens = estimate_tokens(msgs) // 2
    comp = evict_summary(ScriptedSummarizer(error=ConnectionError("model unreachable")), max_tokens)
    result = comp.compact(msgs)
    assert result.strategy == "budget" and result.error == "ConnectionError: model unreachable"
    assert estimate_tokens(result.messages) <= int(max_tokens * 0.8)
    assert result.messages[0] == SYS and result.messages[-1] == msgs[-1]


def test_empty_summary_falls_back_too():
    msgs = chatty()
    comp = evict_summary(
        ScriptedSummarizer(reply="  "), estimate_tokens(msgs), summarizer_window=10**6
    )
    result = comp.compact(msgs)
    assert result.strategy == "budget" and result.summary is None
    assert result.error == "SummaryError: the summariser returned an empty summary"


def test_plan_is_a_dry_run_without_model_calls():
    msgs = chatty()
    s = ScriptedSummarizer("Progress: working on the loader")
    plan = evict_summary(s, estimate_tokens(msgs)).plan(msgs)
    assert plan.would_compact and plan.strategy == "evict+summary" and s.calls == []
    assert plan.threshold == int(estimate_tokens(msgs) * 0.8)
    # The tail as kept, plus the summary estimated at the head's size (at most 1,500).
    head = min(estimate_tokens(msgs[1:-6]), 1500) + len(SUMMARY_PREFIX) // 4
    assert plan.tokens_after == estimate_tokens([SYS, *msgs[-6:]]) + head


def test_input_not_starting_with_system_is_returned_unchanged():
    msgs = chatty()[1:]
    assert (
        evict_summary(ScriptedSummarizer("Progress: working on the loader"), 1)
        .compact(msgs)
        .messages
        == msgs
    )


def test_input_is_not_mutated():
    msgs = tool_heavy() + chatty()[1:]
    snapshot = [(m.role, m.content) for m in msgs]
    evict_summary(
        ScriptedSummarizer("Progress: working on the loader"), estimate_tokens(msgs) // 2
    ).compact(msgs)
    assert [(m.role, m.content) for m in msgs] == snapshot


def test_orphaned_call_in_tail_gets_a_stub():
    msgs = chatty() + [Message("assistant", "", [ToolCall("dangling", "bash", "{}")])]
    result = (
        evict_summary(ScriptedSummarizer("Progress: working on the loader"), estimate_tokens(msgs))
        .compact(msgs)
        .messages
    )
    assert result[-1] == Message("tool", TRUNCATED_STUB, tool_call_id="dangling")


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("chat"), st.integers(0, 3000)),
            st.tuples(st.just("tool"), st.integers(0, 6000)),
        ),
        max_size=20,
    ),
    st.integers(50, 5000),
    st.integers(1, 8),
)
def test_evict_summary_output_is_always_a_valid_tool_sequence(specs, max_tokens, tail):
    msgs = [SYS]
    for n, (kind, size) in enumerate(specs):
        if kind == "chat":
            msgs.append(Message("user" if n % 2 else "assistant", "w" * size))
        else:
            msgs += group(n, "bash", "o" * size)
    comp = evict_summary(
        ScriptedSummarizer("Progress: working on the loader"), max_tokens, min_tail_messages=tail
    )
    out = comp.compact(msgs).messages
    assert out[0] == SYS and is_valid_tool_sequence(out)


def test_preserved_facts_budget_is_15_percent_of_the_context_window():
    assert (
        evict_summary(
            ScriptedSummarizer("Progress: working on the loader"), 32_000
        ).preserved_budget
        == 4800
    )
    assert (
        evict_summary(
            ScriptedSummarizer("Progress: working on the loader"), 32_000, preserved_share=0.05
        ).preserved_budget
        == 1600
    )


def grep_wall_then_chat() -> list[Message]:
    """400 distinct paths seen only in one old grep result, then plain conversation."""
    wall = "".join(f"lib/g{i:03}.py:1:import os\n" for i in range(400))
    return [SYS, Message("user", "find the imports"), *group(1, "grep", wall), *chatty()[1:]]


def test_preserved_facts_that_overflow_are_counted_and_not_silently_lost():
    msgs = grep_wall_then_chat()
    comp = evict_summary(
        ScriptedSummarizer("Progress: working on the loader"), 4000, summarizer_window=10**6
    )
    summary = comp.compact(msgs).summary
    section = summary.split("## Preserved facts\n")[1]
    shown = sum(f"@file:lib/g{i:03}.py" in section for i in range(400))
    assert 0 < shown < 400 and f"… and {400 - shown} more paths not shown" in section
    assert len(section.encode()) // 4 <= 600  # 15 % of 4,000


def test_with_a_store_overflowing_facts_are_offloaded_and_recallable(tmp_path):
    store = OffloadStore(OffloadConfig(store_dir=tmp_path))
    comp = evict_summary(
        ScriptedSummarizer("Progress: working on the loader"),
        4000,
        summarizer_window=10**6,
        offload=store,
        session_id="s1",
    )
    summary = comp.compact(grep_wall_then_chat()).summary
    (spilled,) = [e for e in store.entries("s1") if e.tool_name == "preserved_facts"]
    assert summary.endswith(
        f'📂 [offload:{spilled.id}] the facts not shown, in full: offload_recall(id="{spilled.id}")'
    )
    recalled = store.recall("s1", spilled.id)
    assert "@file:lib/g399.py" in recalled and "@file:lib/g399.py" not in summary


def test_offload_without_a_valid_session_id_is_rejected(tmp_path):
    store = OffloadStore(OffloadConfig(store_dir=tmp_path))
    with pytest.raises(ValueError, match="offload needs a valid session id"):
        evict_summary(ScriptedSummarizer("Progress: working on the loader"), 4000, offload=store)


def test_plan_writes_nothing_to_the_store(tmp_path):
    store = OffloadStore(OffloadConfig(store_dir=tmp_path))
    comp = evict_summary(
        ScriptedSummarizer("Progress: working on the loader"), 4000, offload=store, session_id="s1"
    )
    assert comp.plan(grep_wall_then_chat()).would_compact and store.entries("s1") == []
