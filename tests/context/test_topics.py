import pytest

from harness9.config import ContextOptions
from harness9.context.pipeline import topic_compactor
from harness9.context.topics import (
    TopicDetector,
    cosine,
    terms,
)
from harness9.schema import SUMMARY_PREFIX, Message
from tests.support.history import ScriptedSummarizer

SYS = Message("system", "You are harness9.")

DB = [
    Message("user", "The Python database migration fails: the users table has no email column."),
    Message(
        "assistant",
        "I will write an alembic migration that adds the email column to the users table.",
    ),
    Message(
        "user", "Make the migration reversible; the database downgrade must drop the email column."
    ),
    Message(
        "assistant",
        "The migration now has upgrade and downgrade; downgrade drops the users email column.",
    ),
    Message(
        "user", "Run the migration against the test database and check the users table schema."
    ),
    Message(
        "assistant",
        "Migration applied: the users table schema in the test database has the email column.",
    ),
]
CSS = [
    Message("user", "Now the CSS layout: the sidebar overlaps the main content on narrow screens."),
    Message(
        "assistant", "Switch the layout to CSS grid: sidebar column 240px, main content column 1fr."
    ),
    Message(
        "user", "On narrow screens the sidebar should stack above the main content in the layout."
    ),
    Message(
        "assistant",
        "Added a media query: below 600px the grid layout stacks the sidebar above main content.",
    ),
]


def test_terms_lowercase_words_cjk_characters_and_drop_stopwords():
    assert terms("The Database MIGRATION is done") == ["database", "migration", "done"]
    assert terms("数据库的迁移") == ["数", "据", "库", "迁", "移"]


def test_cosine_of_identical_and_disjoint_vectors():
    from collections import Counter

    assert cosine(Counter(a=2, b=1), Counter(a=2, b=1)) == pytest.approx(1.0)
    assert cosine(Counter(a=1), Counter(b=1)) == 0.0


def test_two_topic_conversation_splits_at_first_css_message():
    segments = TopicDetector().detect([SYS, *DB, *CSS])
    assert [(s.start_idx, s.end_idx, s.message_count) for s in segments] == [(1, 7, 6), (7, 11, 4)]
    assert segments[0].keywords[:3] == ["migration", "column", "email"]
    assert "layout" in segments[1].keywords and "sidebar" in segments[1].keywords
    assert [s.id for s in segments] == ["topic-1", "topic-2"]


def test_single_topic_conversation_is_one_segment():
    segments = TopicDetector().detect([SYS, *DB])
    assert [(s.start_idx, s.end_idx) for s in segments] == [(1, 7)]


def test_new_topic_of_one_message_is_detected_at_the_end():
    segments = TopicDetector().detect([SYS, *DB, *CSS[:1]])
    assert [(s.start_idx, s.message_count) for s in segments] == [(1, 6), (7, 1)]


def test_contentless_messages_do_not_start_a_topic():
    msgs = [SYS, *DB[:3], Message("user", "ok"), *DB[3:]]
    assert len(TopicDetector().detect(msgs)) == 1


def test_defaults_follow_the_seed_and_isolation_is_off():
    d = TopicDetector()
    assert (d.cosine_threshold, d.min_segment_size) == (0.3, 3)
    opts = ContextOptions()
    assert opts.enable_topic_isolation is False
    assert (opts.topic_similarity_threshold, opts.topic_min_segment_size) == (0.3, 3)


def long_db_then_css(n_css: int) -> list[Message]:
    return [SYS, *DB, *DB, *CSS[:n_css]]  # 12 DB messages, then the new topic


def test_selective_compressor_folds_finished_topic_when_new_topic_starts():
    s = ScriptedSummarizer("Progress: users.email migration done")
    msgs = long_db_then_css(2)
    result = topic_compactor(TopicDetector(), s).compact(msgs)
    assert result.strategy == "topic" and result.plan.cut == 13
    assert result.messages[0] == SYS
    assert result.messages[1].content.startswith(
        SUMMARY_PREFIX + "Finished topics: topic-1 (migration, column, email, users, database)\n"
        "Progress: users.email migration done"
    )
    assert result.messages[2:] == CSS[:2]
    assert len(s.calls) == 1


def test_selective_compressor_waits_while_the_new_topic_is_longer_than_two():
    s = ScriptedSummarizer()
    result = topic_compactor(TopicDetector(), s).compact(long_db_then_css(3))
    assert not result.plan.would_compact and s.calls == []


def test_selective_compressor_needs_more_than_ten_messages():
    s = ScriptedSummarizer()
    msgs = [SYS, *DB, *CSS[:2]]  # 8 messages of history
    assert not topic_compactor(TopicDetector(), s).plan(msgs).would_compact


def test_selective_compressor_force_folds_a_short_history():
    s = ScriptedSummarizer()
    result = topic_compactor(TopicDetector(), s).compact([SYS, *DB, *CSS], force=True)
    assert result.plan.would_compact and result.messages[2:] == CSS


def test_selective_compressor_failure_keeps_history():
    class Failing:
        def generate(self, messages, tools):
            raise TimeoutError("slow model")

    msgs = long_db_then_css(1)
    result = topic_compactor(TopicDetector(), Failing()).compact(msgs)
    assert result.messages == msgs and result.error == "TimeoutError: slow model"
    # Nothing folded: a checkpoint stored from this result would drop the topics unsummarised.
    assert not result.plan.would_compact and result.plan.cut == 1


def test_selective_compressor_returns_input_without_system_unchanged():
    msgs = long_db_then_css(1)[1:]
    assert topic_compactor(TopicDetector(), ScriptedSummarizer()).compact(msgs).messages == msgs
