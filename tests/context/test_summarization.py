"""SummarizationCompactor (seed §6.1): threshold, split, template, incremental update, fallback, chunking."""

import copy

from harness9.context import (
    CompactionPlan,
    CompactionResult,
    SummarizationCompactor,
    TokenBudgetCompactor,
    estimate_tokens,
    is_valid_tool_sequence,
)
from harness9.context.pipeline import Pipeline, summary_for_window
from harness9.context.stubs import summary_message
from harness9.context.summarize import summary_estimate
from harness9.schema import SUMMARY_PREFIX, TRUNCATED_STUB, Message
from tests.support.history import SYSTEM, ScriptedSummarizer, asst, call, result, user, users

SECTIONS = (
    "**Goal:**",
    "**Progress:**",
    "**Key Decisions:**",
    "**Next Steps:**",
    "**Critical Context:**",
)


def test_history_within_budget_is_returned_without_calling_the_summariser():
    fake = ScriptedSummarizer()
    msgs = [SYSTEM, *users(10)]
    assert SummarizationCompactor(fake, 2000).compact(msgs).messages == msgs
    assert fake.prompts == []


def test_history_not_starting_with_the_system_message_is_returned_unchanged():
    fake = ScriptedSummarizer()
    msgs = users(20)
    assert SummarizationCompactor(fake, 10).compact(msgs).messages == msgs
    assert fake.prompts == []


def test_nothing_to_summarise_when_only_the_min_tail_exists():
    fake = ScriptedSummarizer()
    msgs = [SYSTEM, *users(6)]
    res = SummarizationCompactor(fake, 10).compact(msgs)
    assert res.messages == msgs and res.plan.would_compact is False
    assert fake.prompts == []


def test_head_is_replaced_by_one_summary_message_before_the_tail():
    fake = ScriptedSummarizer("**Goal:** ship v1.")
    msgs = [SYSTEM, *users(20)]
    res = SummarizationCompactor(fake, 1000).compact(msgs)
    assert res.messages == [
        SYSTEM,
        summary_message("**Goal:** ship v1."),
        *msgs[-6:],
    ]
    assert res.summary == "**Goal:** ship v1."
    assert res.strategy == "summarize" and res.error is None
    assert res.plan.cut == 15


def test_summariser_is_called_without_tools_and_asked_for_the_five_sections():
    fake = ScriptedSummarizer()
    SummarizationCompactor(fake, 1000).compact([SYSTEM, *users(20)])
    assert fake.tools_seen == [[]]
    assert all(section in fake.prompts[0] for section in SECTIONS)
    assert "000xxx" in fake.prompts[0] and "013xxx" in fake.prompts[0]
    assert "014xxx" not in fake.prompts[0]  # the tail is kept verbatim, not summarised


def test_earlier_summary_at_the_head_is_merged_incrementally():
    fake = ScriptedSummarizer("**Goal:** merged.")
    old = summary_message("**Goal:** old goal.")
    msgs = [SYSTEM, old, *users(20)]
    res = SummarizationCompactor(fake, 1000).compact(msgs)
    prompt = fake.prompts[0]
    assert "<previous-summary>\n**Goal:** old goal.\n</previous-summary>" in prompt
    assert "New conversation to merge:\n[user]: 000xxx" in prompt
    assert "[Conversation Summary]" not in prompt  # the old summary is not replayed as a message
    assert res.messages[1].content == SUMMARY_PREFIX + "**Goal:** merged."


def test_summariser_error_falls_back_to_the_token_budget_compactor():
    fake = ScriptedSummarizer(error=ConnectionError("provider down"))
    msgs = [SYSTEM, *users(20)]
    res = SummarizationCompactor(fake, 1000).compact(msgs)
    assert res.messages == TokenBudgetCompactor(1000).compact(msgs).messages
    assert res.strategy == "budget" and res.plan.strategy == "budget"
    assert res.summary is None
    assert res.error == "ConnectionError: provider down"


def test_empty_summary_falls_back_to_the_token_budget_compactor():
    res = SummarizationCompactor(ScriptedSummarizer("  \n"), 1000).compact([SYSTEM, *users(20)])
    assert res.strategy == "budget"
    assert res.error == "the summariser returned an empty summary"


def test_custom_fallback_is_used():
    class KeepLast:
        strategy = "fallback"
        threshold_tokens = 0

        def plan(self, msgs, *, force=False, fixed=0):
            before = estimate_tokens(msgs) + fixed
            after = estimate_tokens([msgs[0], msgs[-1]]) + fixed
            return CompactionPlan(True, self.strategy, len(msgs) - 1, before, after, 0)

        def compact(self, msgs, *, force=False, fixed=0, instructions=None, on_progress=None):
            plan = self.plan(msgs, fixed=fixed)
            return CompactionResult([msgs[0], msgs[-1]], plan, None, self.strategy)

    msgs = [SYSTEM, *users(20)]
    out = (
        SummarizationCompactor(
            ScriptedSummarizer(error=RuntimeError("x")), 1000, fallback=KeepLast()
        )
        .compact(msgs)
        .messages
    )
    assert out == [SYSTEM, msgs[-1]]


def test_for_context_window_sets_budget_and_summariser_window():
    c = summary_for_window(ScriptedSummarizer(), 10_000)
    assert (c.threshold_tokens, c.window, c.steps.min_tail) == (8000, 10_000, 6)
    assert isinstance(c.fallback, Pipeline) and c.fallback.steps == TokenBudgetCompactor(8000).steps


def test_head_is_rendered_compactly_for_the_summariser():
    fake = ScriptedSummarizer()
    big = "y" * 10_000
    msgs = [
        SYSTEM,
        call("a", name="read_file", args='{"path":"src/app.py"}'),
        result("a", big),
        *users(20),
    ]
    SummarizationCompactor(fake, 1000).compact(msgs)
    prompt = fake.prompts[0]
    assert '-> read_file({"path":"src/app.py"})' in prompt
    assert "[read_file result]: " + "y" * 2000 + "… [8000 more characters]" in prompt
    assert "y" * 2001 not in prompt


def test_plan_estimates_the_summary_at_a_quarter_of_the_head_between_150_and_1500_tokens():
    msgs = [SYSTEM, *users(20)]
    plan = SummarizationCompactor(ScriptedSummarizer(), 1000).plan(msgs)
    kept = estimate_tokens([SYSTEM, *msgs[-6:]])
    # The head is 14 * 100 tokens: a quarter, 350; the prefix adds 23 // 4 tokens.
    assert plan.tokens_after == kept + 350 + 5
    assert plan.tokens_before == estimate_tokens(msgs) and plan.threshold == 1000
    assert [summary_estimate(n) for n in (20, 600, 1400, 8000)] == [150, 150, 350, 1500]


def test_forced_compaction_folds_all_but_the_tail_under_the_threshold():
    fake = ScriptedSummarizer()
    msgs = [SYSTEM, *users(10)]
    res = SummarizationCompactor(fake, 100_000).compact(msgs, force=True)
    assert res.plan.would_compact and res.plan.cut == 5
    assert res.messages[2:] == msgs[-6:]
    assert len(fake.prompts) == 1


def test_focus_instructions_and_progress_reach_the_summariser():
    fake = ScriptedSummarizer()
    seen = []
    SummarizationCompactor(fake, 1000).compact(
        [SYSTEM, *users(20)],
        instructions="the database schema",
        on_progress=lambda i, n: seen.append((i, n)),
    )
    assert "Focus especially on: the database schema" in fake.prompts[0]
    assert seen == [(1, 1)]


def test_compaction_keeps_a_results_block_with_its_call():
    fake = ScriptedSummarizer()
    msgs = [
        SYSTEM,
        *users(10),
        user("go"),
        call("a", "b"),
        result("a", "A"),
        result("b", "B"),
        asst("done"),
        user("ok"),
    ]
    res = SummarizationCompactor(fake, 200, min_tail_messages=4).compact(msgs)
    assert res.messages[2:] == [
        call("a", "b"),
        result("a", "A"),
        result("b", "B"),
        asst("done"),
        user("ok"),
    ]


def test_summarised_tail_drops_a_result_whose_call_was_folded():
    # Type A: an interrupt sits between the call (folded) and its late result (kept).
    msgs = [SYSTEM, *users(10), call("a"), user("stop"), result("a", "late"), asst("ok")]
    res = SummarizationCompactor(ScriptedSummarizer(), 200, min_tail_messages=2).compact(msgs)
    assert res.messages[2:] == [asst("ok")]


def test_summarised_tail_stubs_a_call_without_result():
    # Type B: the interrupted call in the tail never got a result.
    msgs = [SYSTEM, *users(10), call("a"), asst("interrupted"), user("again")]
    res = SummarizationCompactor(ScriptedSummarizer(), 200, min_tail_messages=3).compact(msgs)
    assert res.messages[2:] == [
        call("a"),
        Message("tool", TRUNCATED_STUB, tool_call_id="a"),
        asst("interrupted"),
        user("again"),
    ]
    assert is_valid_tool_sequence(res.messages)


def test_compaction_does_not_modify_its_input():
    msgs = [
        SYSTEM,
        summary_message("old"),
        *users(10),
        call("a"),
        user("x"),
        result("a"),
    ]
    snapshot = copy.deepcopy(msgs)
    SummarizationCompactor(ScriptedSummarizer(), 200, min_tail_messages=2).compact(msgs)
    assert msgs == snapshot


# -- chunking: the context has already overflowed -----------------------------


def test_three_times_overflowed_session_is_summarised_in_chunks_within_the_window():
    window = 4000
    fake = ScriptedSummarizer(lambda prompt, n: f"**Goal:** part summary {n}.", window=window)
    msgs = [SYSTEM, *users(120)]  # 12,004 tokens: 3x the window
    progress = []
    compactor = summary_for_window(fake, window)
    res = compactor.compact(msgs, on_progress=lambda i, n: progress.append((i, n)))
    assert res.strategy == "summarize" and res.error is None
    assert len(fake.prompts) >= 5  # at least 11,400 tokens of head in 2,400-token calls, + merge
    assert max(fake.sizes) <= window * 60 // 100
    final = fake.prompts[-1]
    assert final.count("<part-summary>") == len(fake.prompts) - 1
    assert res.summary == f"**Goal:** part summary {len(fake.prompts)}."
    assert progress == [(i, len(fake.prompts)) for i in range(1, len(fake.prompts) + 1)]
    assert estimate_tokens(res.messages) <= compactor.threshold_tokens


def test_chunks_keep_the_history_in_order_and_complete():
    fake = ScriptedSummarizer("**Goal:** s.", window=4000)
    msgs = [SYSTEM, *users(120)]
    summary_for_window(fake, 4000).compact(msgs)
    seen = [
        p.split("[user]: ", 1)[1][:3]
        for p in fake.prompts[:-1]
        for p in p.split("\n\n")
        if p.startswith("[user]: ")
    ]
    assert seen == [f"{i:03d}" for i in range(114)]


def test_oversized_partial_summaries_are_merged_hierarchically():
    window = 4000
    # Every partial is ~1,000 tokens: they cannot all be merged in one 2,400-token call.
    fake = ScriptedSummarizer(lambda prompt, n: f"**Goal:** {n} " + "z" * 4000, window=window)
    msgs = [SYSTEM, *users(120)]
    res = summary_for_window(fake, window).compact(msgs)
    assert res.strategy == "summarize" and res.error is None
    assert max(fake.sizes) <= window * 60 // 100
    merges = [p for p in fake.prompts if "<part-summary>" in p]
    assert len(merges) >= 2


def test_huge_previous_summary_is_summarised_as_the_oldest_part():
    window = 4000
    fake = ScriptedSummarizer("**Goal:** s.", window=window)
    old = summary_message("OLD " + "w" * 20_000)
    res = summary_for_window(fake, window).compact([SYSTEM, old, *users(40)])
    assert res.strategy == "summarize"
    assert fake.prompts[0].startswith("Below is part 1 of")
    assert "[previous summary]: OLD" in fake.prompts[0]
