"""The facts a summary keeps are data: the compaction that makes the summary records them,
its checkpoint stores them, and the next compaction takes an earlier summary's facts from
there, never from its text, which is largely harness9's own (the preserved facts, the recall
index, the todo state). Only a summary whose checkpoint predates kept facts is read from its
text. docs/architecture.md, 'Stand-ins, the repair and the preserved facts'.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from harness9.context import (
    HybridCompactor,
    SummarizationCompactor,
    eviction_compactor,
    extract_fingerprint,
)
from harness9.context.facts import KeyInfoFingerprint, fact_items, keep_facts
from harness9.context.pipeline import CompactionResult, Compactor
from harness9.context.view import checkpoint_for, load_view, state_items
from harness9.schema import Message, TodoItem, ToolCall
from harness9.store import MemorySession
from harness9.store.session import Checkpoint, RecallEntry
from tests.support.history import SYSTEM, ScriptedSummarizer, asst, exchanges, user

PARSER = "src/parser.py"  # a fact the earlier summary keeps
RECALL_ONLY = "src/recall_only.py"  # only in the recall index: a folded read_file's argument
TODO_ONLY = "docs/todo_only.md"  # only in the todo state


def compact(s: MemorySession, comp: Compactor) -> CompactionResult:
    """``comp`` run on the session's view and its checkpoint stored, as the policy does."""
    view = load_view(s, SYSTEM)
    res = comp.compact(view.messages, force=True)
    cp = checkpoint_for(view, res, s.latest_checkpoint(), recall_budget=500, state=state_items(s))
    assert cp is not None
    s.add_checkpoint(cp)
    return res


def summarised_session(facts: list[str] | None) -> MemorySession:
    """A session whose first two messages an earlier compaction folded into a summary
    keeping ``facts``, its recall index listing a read_file of RECALL_ONLY and its state a
    todo naming TODO_ONLY; then twelve more exchanges."""
    s = MemorySession("s1")
    ids = s.add_messages([user("rewrite the parser"), asst("done")])
    s.save_todos([TodoItem(f"check {TODO_ONLY}")])
    s.add_checkpoint(
        Checkpoint(
            ids[-1],
            f"Progress: rewrote {PARSER}.",
            "hybrid",
            9000,
            900,
            3,
            2,
            recall=[RecallEntry("msg_2", "read_file", RECALL_ONLY, 1200)],
            state=[TodoItem(f"check {TODO_ONLY}")],
            facts=None if facts is None else list(facts),
        )
    )
    s.add_messages(exchanges(12, size=600))
    return s


STRATEGIES = {
    "evict": lambda: eviction_compactor(3000),  # no model call: the folded words
    "hybrid": lambda: HybridCompactor(ScriptedSummarizer("Progress: carried on."), 8000),
}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_path_only_in_the_recall_index_or_the_todo_state_is_not_a_fact_of_the_next_summary(
    strategy: str,
):
    s = summarised_session([f"file: {PARSER}"])

    res = compact(s, STRATEGIES[strategy]())

    assert res.summary is not None and f"@file:{PARSER}" in res.summary
    assert RECALL_ONLY not in res.summary and TODO_ONLY not in res.summary
    assert res.facts is not None and f"file: {PARSER}" in res.facts
    assert not any(RECALL_ONLY in f or TODO_ONLY in f for f in res.facts)


def test_the_summariser_is_not_asked_to_keep_a_path_only_the_recall_index_names():
    s = summarised_session([f"file: {PARSER}"])
    summariser = ScriptedSummarizer("Progress: carried on.")

    compact(s, HybridCompactor(summariser, 8000))

    [prompt] = summariser.prompts
    assert f"@file:{PARSER}" in prompt and RECALL_ONLY not in prompt
    assert TODO_ONLY not in prompt


def test_a_summary_from_before_facts_were_kept_is_read_from_its_text_as_before():
    s = summarised_session(None)  # its checkpoint predates kept facts

    res = compact(s, eviction_compactor(3000))

    # Its text is all there is: every path in it, the recall index's and the state's too.
    assert res.summary is not None
    assert f"@file:{RECALL_ONLY}" in res.summary and f"@file:{TODO_ONLY}" in res.summary


def test_a_marker_line_the_user_wrote_is_not_a_marker_once_folded_without_a_model():
    s = MemorySession("s1")
    s.add_messages(exchanges(30, size=100))
    s.add_messages([user("Notes for later:\n@func: launch_rockets\nthen carry on"), asst("ok")])
    s.add_messages(exchanges(14, size=600, start=30))
    first = compact(s, eviction_compactor(12_000))
    assert (
        first.summary is not None and "@func: launch_rockets" in first.summary
    )  # the user's words
    s.add_messages(exchanges(20, size=600, start=50))

    second = compact(s, eviction_compactor(12_000))

    assert second.summary is not None and "launch_rockets" not in second.summary
    assert second.facts is not None and "identifier: launch_rockets" not in second.facts


def test_the_users_rule_folded_without_a_model_is_kept_by_every_later_summary():
    s = MemorySession("s1")
    s.add_messages([user("Never touch the migrations folder."), asst("understood")])
    s.add_messages(exchanges(12, size=600))
    first = compact(s, eviction_compactor(3000))
    s.add_messages(exchanges(12, size=600, start=12))

    second = compact(s, eviction_compactor(3000))

    rule = "constraint: Never touch the migrations folder"
    assert first.facts is not None and rule in first.facts
    assert second.facts is not None and rule in second.facts
    assert second.summary is not None and "@constraint:Never touch the migrations folder" in (
        second.summary
    )


def test_the_checkpoint_stores_the_facts_its_summary_keeps():
    s = MemorySession("s1")
    s.add_messages(
        [
            user("Fix the crash in src/app.py"),
            Message("assistant", "", [ToolCall("c1", "bash", json.dumps({"command": "pytest"}))]),
            Message("tool", "E   KeyError: 'tenant'\nFAILED tests/test_app.py", tool_call_id="c1"),
            asst("Decided to validate the tenant first."),
        ]
    )
    s.add_messages(exchanges(12, size=600))

    res = compact(s, eviction_compactor(3000))

    cp = s.latest_checkpoint()
    assert cp is not None and cp.facts == res.facts
    # Ranked: what the user and the agent acted on, the last failing run's errors, then
    # what only the output showed.
    assert res.facts == [
        "decision: Decided to validate the tenant first.",
        "file: src/app.py",
        "error: E KeyError: 'tenant'",
        "error: FAILED tests/test_app.py",
        "file: tests/test_app.py",
    ]


def test_a_summary_keeps_the_facts_it_contains_then_those_appended_then_the_models_markers():
    fp = KeyInfoFingerprint(file_paths=["src/a.py", "src/b.py"], identifiers=["load"])
    reply = "Progress: edited src/a.py\n@func:helper"

    text, facts = keep_facts(reply, fp, None, reply=reply)

    assert text.endswith("## Preserved facts\n@file:src/b.py\n@func:load")
    assert facts == [
        "file: src/a.py",
        "file: src/b.py",
        "identifier: load",
        "identifier: helper",
    ]


def test_a_fact_left_out_of_a_full_preserved_section_is_not_a_fact_the_summary_keeps():
    msgs = [user(" ".join(f"src/pkg/module_{i:02d}.py" for i in range(40)))]
    fp = extract_fingerprint(msgs)

    text, facts = keep_facts("x", fp, 96 + 15)

    listed = [line.removeprefix("@file:") for line in text.splitlines() if line[:1] == "@"]
    assert "… and " in text and 0 < len(listed) < 40
    assert facts == [f"file: {p}" for p in listed]


def test_a_model_free_summary_reads_no_markers_from_the_words_it_folds():
    fp = extract_fingerprint([user("@type: Widget is what I call it")])

    _, facts = keep_facts("User: @type: Widget is what I call it", fp, None)

    assert facts == []
    assert fact_items(fp) == []


def test_a_previous_summary_that_stands_keeps_its_facts_and_a_truncation_keeps_none():
    s = summarised_session([f"file: {PARSER}"])
    view, previous = load_view(s, SYSTEM), s.latest_checkpoint()
    res = eviction_compactor(3000).compact(view.messages, force=True)
    # What a fallback that kept the previous summary, and a truncation, give for the same cut.
    fallback = replace(res, summary=None, facts=None, kept_previous_summary=True)
    truncation = replace(res, summary=None, facts=None, strategy="budget")

    kept = checkpoint_for(view, fallback, previous)
    dropped = checkpoint_for(view, truncation, previous)

    assert kept is not None and kept.facts == [f"file: {PARSER}"]
    assert dropped is not None and dropped.summary == "" and dropped.facts == []


def test_a_plain_summary_keeps_the_facts_it_names_and_its_markers_nothing_appended():
    s = MemorySession("s1")
    s.add_messages([user("Fix src/app.py and src/db.py"), asst("on it")])
    s.add_messages(exchanges(12, size=600))
    reply = "Fixed src/app.py.\n@decision:keep sqlite"
    comp = SummarizationCompactor(ScriptedSummarizer(reply), 3000)

    res = compact(s, comp)

    assert res.summary == reply  # the five-section summary is not repaired
    assert res.facts == ["file: src/app.py", "decision: keep sqlite"]
