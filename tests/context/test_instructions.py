"""harness9.context.view's kept instructions and harness9.store.lineage: the pure halves of going back."""

from __future__ import annotations

from harness9.context.stubs import summary_message
from harness9.context.view import (
    INSTRUCTIONS_HEADER,
    PINS_HEADER,
    carry_instructions,
    instruction_budget,
    render_instructions,
    with_notes,
)
from harness9.schema import Message
from harness9.store.lineage import ForkPoint, kept_checkpoints
from harness9.store.session import STUB_STUBBED, Checkpoint, Stub
from tests.support.history import user


def test_the_budget_scales_with_the_window_up_to_codexs_20k():
    assert instruction_budget(24_000) == 1_800
    assert instruction_budget(128_000) == 9_600
    assert instruction_budget(1_000_000) == 20_000


def test_only_the_users_own_messages_are_kept_oldest_first():
    folded = [
        user("use tabs"),
        Message("assistant", "ok"),
        Message("tool", "file contents", tool_call_id="c1"),
        summary_message("an earlier summary"),
        user("   "),
        user("deploy to staging"),
    ]
    assert carry_instructions(["be brief"], folded, 1000) == [
        "be brief",
        "use tabs",
        "deploy to staging",
    ]


def test_a_user_message_that_only_looks_like_a_summary_is_kept_as_the_users():
    # A user pasting an old summary into the chat wrote it: folded, it is kept like any
    # message of theirs, not dropped as if it were harness9's own summary.
    pasted = "[Conversation Summary]\n**Goal:** finish the migration; never drop a table"
    assert carry_instructions([], [user(pasted)], 1000) == [pasted]


def test_over_budget_the_newest_run_is_kept_and_the_oldest_dropped():
    # Each message is 800 bytes: 200 tokens, under the per-message cap (a quarter).
    folded = [user(f"{i}" * 800) for i in range(7)]
    kept = carry_instructions([], folded, 1000)
    assert kept == [f"{i}" * 800 for i in range(2, 7)]


def test_a_message_larger_than_a_quarter_of_the_budget_keeps_its_head():
    kept = carry_instructions([], [user("rule one. " + "log line\n" * 2000)], 1000)
    [text] = kept
    assert text.startswith("rule one. log line")
    assert "more characters; history_search finds the whole message]" in text
    assert len(text.encode()) <= 1000


def test_no_budget_keeps_nothing():
    assert carry_instructions(["a"], [user("b")], 0) == []


def test_pins_come_before_the_instructions_after_the_system_prompt():
    system = with_notes(Message("system", "You are harness9."), ["pin A"], ["use tabs"])
    assert system.role == "system"
    assert system.content == (
        "You are harness9.\n\n"
        f"{PINS_HEADER}\n1. pin A\n\n"
        f"{INSTRUCTIONS_HEADER}\n\n[user message 1]\nuse tabs"
    )
    assert render_instructions([]) == ""
    assert with_notes(Message("system", "x"), [], []) == Message("system", "x")


def cp(last: int, created: float, stubbed: tuple[int, ...] = ()) -> Checkpoint:
    c = Checkpoint(last, f"sum {last}", "summarize", 1, 1, 1, 1, created_at=created)
    c.stubs = {k: Stub(STUB_STUBBED, 9) for k in stubbed}
    return c


def test_a_fork_keeps_the_checkpoints_made_before_the_next_message():
    point = ForkPoint(number=9, last_id=90, next_created=100.0)
    cps = [
        cp(50, 60.0),  # folded up to 50, made at 60: kept
        cp(80, 99.0),  # made right after message 9, before message 10: kept
        cp(85, 120.0),  # ends before 90 but was made after message 10: not at N
        cp(95, 99.0),  # covers message 95: after N
        cp(70, 99.0, (93,)),  # stubs a message after N
    ]
    assert [c.last_message_id for c in kept_checkpoints(cps, point)] == [50, 80]
