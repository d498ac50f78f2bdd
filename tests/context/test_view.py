"""The model view rebuilt from stored records and the latest checkpoint.

See docs/architecture.md, 'Compaction checkpoints'.
"""

from __future__ import annotations

from harness9.context import (
    CompactionPlan,
    CompactionResult,
    ModelView,
    SummarizationCompactor,
    TokenBudgetCompactor,
    build_view,
    checkpoint_for,
    estimate_tokens,
    load_view,
)
from harness9.schema import SUMMARY_PREFIX, Message, TodoItem
from harness9.store import Checkpoint, CheckpointedSession, StoredMessage
from tests.support.history import SYSTEM, ScriptedSummarizer, asst, call, result, user, users


def records(*msgs: Message, first_id: int = 1) -> list[StoredMessage]:
    return [StoredMessage(first_id + i, m, 1000.0 + i) for i, m in enumerate(msgs)]


class RecordLog:
    """A minimal in-memory CheckpointedSession over a list of records (test double of the store)."""

    def __init__(self, recs: list[StoredMessage]) -> None:
        self.recs = recs
        self.checkpoints: list[Checkpoint] = []
        self.after_ids: list[int] = []

    @property
    def session_id(self) -> str:
        return "s1"

    def get_messages(self, limit: int = 0) -> list[Message]:
        msgs = [r.message for r in self.recs]
        return msgs[-limit:] if limit else msgs

    def add_messages(self, msgs: list[Message]) -> None:
        start = self.recs[-1].id + 1 if self.recs else 1
        self.recs += records(*msgs, first_id=start)

    def pop_message(self) -> Message | None:
        return self.recs.pop().message if self.recs else None

    def clear(self) -> None:
        self.recs = []

    def get_todos(self) -> list[TodoItem] | None:
        return None

    def save_todos(self, items: list[TodoItem]) -> None:
        pass

    def get_record(self, message_id: int) -> StoredMessage | None:
        return next((r for r in self.recs if r.id == message_id), None)

    def search(self, query: str, *, limit: int = 10) -> list:
        return []

    def remember_model(self, settings: object) -> None:
        pass

    def model_settings(self) -> None:
        return None

    def get_records(self, limit: int = 0, after_id: int = 0) -> list[StoredMessage]:
        self.after_ids.append(after_id)
        recs = [r for r in self.recs if r.id > after_id]
        return recs[-limit:] if limit else recs

    def add_checkpoint(self, cp: Checkpoint) -> Checkpoint:
        self.checkpoints.append(cp)
        return cp

    def latest_checkpoint(self) -> Checkpoint | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def latest_checkpoint_key(self) -> tuple[int, int, float] | None:
        cp = self.latest_checkpoint()
        return None if cp is None else (cp.id, cp.last_message_id, cp.created_at)

    def list_checkpoints(self) -> list[Checkpoint]:
        return list(self.checkpoints)

    def pins(self) -> list[str]:
        return []

    def add_pin(self, text: str) -> int:
        raise NotImplementedError

    def remove_pin(self, number: int) -> str | None:
        raise NotImplementedError


def cp(last_id: int, summary: str = "", strategy: str = "summarize") -> Checkpoint:
    return Checkpoint(last_id, summary, strategy, 100, 10, 20, 5)


def test_view_without_checkpoint_is_system_plus_every_record():
    recs = records(user("a"), asst("b"))
    view = build_view(SYSTEM, recs, None)
    assert view == ModelView([SYSTEM, user("a"), asst("b")], [None, 1, 2])


def test_view_after_a_summary_checkpoint_starts_with_the_summary_message():
    recs = records(user("a"), asst("b"), user("c"), asst("d"))
    view = build_view(SYSTEM, recs, cp(2, "**Goal:** g."))
    assert view.messages == [
        SYSTEM,
        Message("user", SUMMARY_PREFIX + "**Goal:** g."),
        user("c"),
        asst("d"),
    ]
    assert view.ids == [None, None, 3, 4]


def test_view_after_a_truncating_checkpoint_has_no_summary_message():
    recs = records(user("a"), asst("b"), user("c"))
    view = build_view(SYSTEM, recs, cp(2, "", "budget"))
    assert view.messages == [SYSTEM, user("c")]
    assert view.ids == [None, 3]


def test_view_is_not_repaired():
    # The engine repairs what it sends; the view mirrors the log, orphans included.
    recs = records(call("x"), result("x"), result("orphan"))
    view = build_view(SYSTEM, recs, cp(1, "s"))
    assert view.messages[2:] == [result("x"), result("orphan")]


def test_load_view_asks_only_for_records_after_the_checkpoint():
    log = RecordLog(records(user("a"), asst("b"), user("c")))
    log.add_checkpoint(cp(2, "s"))
    assert isinstance(log, CheckpointedSession)
    view = load_view(log, SYSTEM)
    assert log.after_ids == [2]
    assert view.messages == [SYSTEM, Message("user", SUMMARY_PREFIX + "s"), user("c")]
    assert view.ids == [None, None, 3]


def test_checkpoint_covers_the_last_folded_stored_id():
    log = RecordLog(records(*users(20)))
    view = load_view(log, SYSTEM)
    res = SummarizationCompactor(ScriptedSummarizer("**Goal:** g."), 1000).compact(view.messages)
    checkpoint = checkpoint_for(view, res)
    assert checkpoint is not None
    assert checkpoint.last_message_id == 14  # ids 1..14 folded, 15..20 kept
    assert checkpoint.summary == "**Goal:** g."
    assert checkpoint.strategy == "summarize"
    assert (checkpoint.messages_before, checkpoint.messages_after) == (21, 8)
    assert checkpoint.tokens_before == estimate_tokens(view.messages)
    assert checkpoint.tokens_after == estimate_tokens(res.messages)


def test_rebuilt_view_after_the_checkpoint_is_what_the_compactor_produced():
    log = RecordLog(records(*users(20)))
    view = load_view(log, SYSTEM)
    res = SummarizationCompactor(ScriptedSummarizer("**Goal:** g."), 1000).compact(view.messages)
    log.add_checkpoint(checkpoint_for(view, res))
    assert load_view(log, SYSTEM).messages == res.messages


def test_second_compaction_merges_into_the_first_and_moves_the_checkpoint():
    log = RecordLog(records(*users(20)))
    fake = ScriptedSummarizer(lambda prompt, n: f"**Goal:** summary {n}.")
    compactor = SummarizationCompactor(fake, 1000)
    view = load_view(log, SYSTEM)
    log.add_checkpoint(checkpoint_for(view, compactor.compact(view.messages)))
    log.add_messages(users(10))
    view = load_view(log, SYSTEM)
    res = compactor.compact(view.messages)
    checkpoint = checkpoint_for(view, res, log.latest_checkpoint())
    assert "<previous-summary>\n**Goal:** summary 1.\n</previous-summary>" in fake.prompts[1]
    assert checkpoint.last_message_id == 24
    assert checkpoint.summary == "**Goal:** summary 2."


def test_truncating_fallback_records_an_empty_summary():
    log = RecordLog(records(*users(20)))
    view = load_view(log, SYSTEM)
    res = TokenBudgetCompactor(1000).compact(view.messages)
    checkpoint = checkpoint_for(view, res)
    assert checkpoint.summary == "" and checkpoint.strategy == "budget"
    assert checkpoint.last_message_id == 11  # ids 12..20 (9 messages) fit 1,000 tokens
    log.add_checkpoint(checkpoint)
    assert load_view(log, SYSTEM).messages == res.messages


def test_nothing_folded_means_no_checkpoint():
    log = RecordLog(records(user("a")))
    view = load_view(log, SYSTEM)
    res = TokenBudgetCompactor(1000).compact(view.messages)
    assert checkpoint_for(view, res) is None


def test_folding_only_the_old_summary_reuses_the_previous_checkpoint_id():
    previous = cp(7, "x" * 4000)
    view = build_view(SYSTEM, records(*users(6), first_id=8), previous)
    summarizer = ScriptedSummarizer("**Goal:** short.")
    # Nothing new to fold: the compactor calls no model for the old summary alone.
    plan = SummarizationCompactor(summarizer, 900).plan(view.messages)
    assert plan.would_compact is False and summarizer.calls == []
    # A result that folded only the old summary (re-summarised) keeps its checkpoint's id.
    folded = CompactionPlan(True, "summarize", 2, 2000, 100, 900)
    res = CompactionResult(
        [SYSTEM, Message("user", SUMMARY_PREFIX + "short"), *view.messages[2:]],
        folded,
        "short",
        "summarize",
    )
    assert checkpoint_for(view, res, previous).last_message_id == 7
    assert checkpoint_for(view, res) is None
