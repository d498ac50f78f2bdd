"""Recall memory and the hybrid compactor, as pure functions over messages."""

from __future__ import annotations

import re

from harness9.context.pipeline import (
    RECALL_SHARE,
    STRATEGY_HYBRID,
    STRATEGY_STUBS,
    CompactionPlan,
    CompactionResult,
    HybridCompactor,
    stub_old_results,
)
from harness9.context.stubs import (
    is_summary,
    offloaded_message,
    render_stub,
    stub_for,
    summary_message,
    summary_of,
    with_handle,
)
from harness9.context.view import (
    ModelView,
    budget_recall,
    build_view,
    checkpoint_for,
    key_argument,
    render_recall,
    summary_text,
)
from harness9.schema import Message, TodoItem, ToolCall, Usage
from harness9.store.session import (
    STUB_EVICTED,
    STUB_STUBBED,
    Checkpoint,
    OffloadLink,
    RecallEntry,
    Stub,
    handle_message_id,
)


class Summariser:
    def __init__(self, text: str = "**Goal:** go on.", fail: bool = False) -> None:
        self.text, self.fail, self.calls = text, fail, 0

    def generate(self, messages, tools):
        self.calls += 1
        if self.fail:
            raise RuntimeError("down")
        return Message("assistant", self.text), Usage()


def history(n: int, size: int = 2000) -> list[Message]:
    msgs = [Message("system", "sys")]
    for i in range(n):
        msgs += [
            Message("user", f"step {i}"),
            Message("assistant", "", [ToolCall(f"c{i}", "bash", f'{{"command": "cat f{i}"}}')]),
            Message("tool", f"out {i} " + "x" * size, tool_call_id=f"c{i}"),
            Message("assistant", f"done {i}"),
        ]
    return msgs


def test_handles_name_message_ids_only():
    assert handle_message_id("msg_42") == 42
    assert handle_message_id(" msg_7 ") == 7
    for bad in ("msg_0", "msg_-1", "msg_x", "ofl_0123456789ab", "", "msg_1.5"):
        assert handle_message_id(bad) is None


def test_key_argument_is_the_command_or_path_on_one_line():
    assert key_argument('{"command": "cat a\\n b.log"}') == "cat a b.log"
    assert key_argument('{"path": "src/x.py", "n": 3}') == "src/x.py"
    assert len(key_argument('{"command": "' + "y" * 300 + '"}')) == 80
    assert key_argument("not json") == "not json"


def test_the_index_keeps_the_newest_entries_within_budget_and_counts_the_rest():
    entries = [RecallEntry(f"msg_{i}", "bash", f"cat f{i}", 1000) for i in range(1, 201)]

    kept, overflow = budget_recall(entries, 0, budget_tokens=400)

    assert kept[-1] == entries[-1] and kept == entries[len(entries) - len(kept) :]
    assert 0 < len(kept) < 200 and overflow == 200 - len(kept)
    text = render_recall(kept, overflow)
    lines = [x for x in text.splitlines() if x.startswith("- ")]
    assert lines[-1] == "- msg_200 bash `cat f200` (1K tokens)" and len(lines) == len(kept)
    assert f"… and {overflow} earlier tool results not listed" in text
    again, more = budget_recall([*kept, RecallEntry("msg_201", "bash", "ls", 10)], overflow, 400)
    assert again[-1] == RecallEntry("msg_201", "bash", "ls", 10)  # carried over and extended
    assert more == 201 - len(again)
    assert "- msg_201 bash `ls` (10 tokens)" in render_recall(again, more)


def test_an_empty_index_renders_as_nothing():
    assert render_recall([], 0) == ""
    assert render_recall([], 3).endswith(
        "history_search finds them (its hits carry their handles)."
    )


def test_the_summariser_never_sees_the_index_or_the_state_as_summary():
    recall = [RecallEntry("msg_1", "bash", "", 7)]
    cp = Checkpoint(3, "**Goal:** x.", "hybrid", 9, 5, 4, 4, recall=recall, state=[TodoItem("a")])
    shown = build_view(Message("system", "sys"), [], cp).messages[1]
    assert "## Recall index" in shown.content and "## State at the last compaction" in shown.content
    assert summary_of(shown) == "**Goal:** x."


def test_a_compactors_summary_message_carries_its_summary_as_data():
    prose = "**Goal:** y.\n\n## Recall index\nquoted by the model"
    msg = summary_message(prose)
    assert msg == Message("user", "[Conversation Summary]\n" + prose)
    assert is_summary(msg) and summary_of(msg) == prose


def test_a_stub_points_to_its_offloaded_output_or_gets_its_message_handle():
    marker = offloaded_message(
        Message(
            "tool", "📂 [offload:ofl_0123456789ab] 5000 tokens offloaded\nsum", tool_call_id="c"
        ),
        OffloadLink("ofl_0123456789ab", 5000),
    )
    stub = stub_for(marker).content
    assert stub == '[stubbed] 5000 tokens stubbed; offload_recall(id="ofl_0123456789ab") for it'
    plain = stub_for(Message("tool", "z" * 4000, tool_call_id="c")).content
    assert plain.startswith("[stubbed] 1000 tokens")
    assert with_handle(plain, 9).endswith('offload_recall(id="msg_9") for it')


def test_hybrid_stubs_old_results_without_a_model_when_that_reaches_the_target():
    summariser = Summariser()
    comp = HybridCompactor(summariser, 10_000)
    msgs = history(8, size=4000)

    res = comp.compact(msgs)

    assert res.strategy == STRATEGY_STUBS and summariser.calls == 0
    stubbed = [m for m in res.messages if m.content.startswith("[stubbed]")]
    assert len(stubbed) == 5  # all but the newest 3 tool groups
    assert res.plan.tokens_after <= comp.steps.enough_at < comp.threshold_tokens


def test_hybrid_summarises_when_stubs_are_not_enough_and_indexes_what_it_folds():
    comp = HybridCompactor(Summariser(), 4_000)
    msgs = history(150, size=600)
    ids = [None, *range(1, len(msgs))]

    res = comp.compact(msgs)

    assert res.strategy == STRATEGY_HYBRID and res.summary
    cp = checkpoint_for(ModelView(msgs, ids), res, recall_budget=int(comp.window * RECALL_SHARE))
    assert cp is not None and cp.last_message_id > 0
    assert cp.recall and cp.recall_overflow > 0  # the newest listed, the rest counted
    assert all(e.handle.startswith("msg_") and e.tool == "bash" for e in cp.recall)
    assert {e.tokens for e in cp.recall} == {152}
    text = summary_text(cp)
    assert re.search(r"^- msg_\d+ bash `cat f\d+` \(152 tokens\)$", text, re.M)
    assert "earlier tool results not listed" in text
    assert cp.stubs and {s.kind for s in cp.stubs.values()} == {STUB_STUBBED}


def test_hybrid_falls_back_to_truncation_when_the_summariser_fails():
    comp = HybridCompactor(Summariser(fail=True), 4_000)

    res = comp.compact(history(150, size=600))

    assert res.error and "down" in res.error and res.summary is None
    assert len(res.messages) < 1 + 150 * 4


def test_hybrid_under_the_threshold_does_nothing():
    comp = HybridCompactor(Summariser(), 100_000)
    msgs = history(3)
    res = comp.compact(msgs)
    assert not res.plan.would_compact and res.messages == msgs


def test_an_old_result_that_only_reads_like_a_stub_is_stubbed_all_the_same():
    # What is a stub is in the message's data, not in its text: a tool's own output that
    # begins "[stubbed] " is 1,000 tokens of output, and goes like any other old result.
    groups = [
        m
        for i in range(4)
        for m in (
            Message("assistant", tool_calls=[ToolCall(f"c{i}", "bash", "{}")]),
            Message("tool", "[stubbed] " + "x" * 3990, tool_call_id=f"c{i}"),
        )
    ]
    out = stub_old_results([Message("system", "s"), *groups], keep_groups=3)
    assert out[2].content == "[stubbed] 1000 tokens stubbed"
    assert [m.content[:12] for m in out[4::2]] == ["[stubbed] xx"] * 3


def test_an_evicted_stub_quoting_a_recall_call_still_gets_its_own_handle():
    stub = Stub(STUB_EVICTED, 900, text="bash `grep offload_recall(`: exit code 0, 3 lines")
    assert render_stub(stub, 7).endswith('; offload_recall(id="msg_7") for it')


def test_a_summary_is_known_by_the_summary_it_carries_not_by_its_text():
    # What the view and the compactors make with ``summary_message`` is a summary; a
    # message that only starts like one (a user pasting an old summary) is not.
    assert is_summary(summary_message("Goal: x"))
    assert not is_summary(Message("user", "[Conversation Summary]\nGoal: x"))


def test_a_kept_result_a_compactor_shortened_gets_its_handle_whatever_its_text_says():
    # A result that quotes ``offload_recall(`` itself (a grep of code that calls it) names
    # no handle of its own: shortened by a compactor, it still gets its message's.
    grep = 'src/tool.py:12:    offload_recall(id="ofl_x")\n' * 40
    msgs = [
        Message("system", "s"),
        Message("assistant", "", [ToolCall("c1", "grep", '{"pattern": "offload_recall("}')]),
        Message("tool", grep, tool_call_id="c1"),
    ]
    cut = Message("tool", grep[:60] + " [cut]", tool_call_id="c1")
    plan = CompactionPlan(True, "peer", 1, 900, 100, 500)
    result = CompactionResult([msgs[0], msgs[1], cut], plan, None, "peer")

    cp = checkpoint_for(ModelView(msgs, [None, 1, 2]), result)

    assert cp is not None
    assert cp.stubs[2].text == cut.content + '; offload_recall(id="msg_2") for it'
