"""The engine stores how the server counted its requests with the session's settings
after each reply that changed it (one write, none when nothing changed), and starts from
the stored count only when it was learnt from the same model at the same API base."""

from __future__ import annotations

from pathlib import Path

from harness9.config import ContextOptions, Settings
from harness9.engine.setup import build_engine
from harness9.store import MemorySession
from harness9.store.session import SessionSettings

LEARNT = ((1000, 1500), (1400, 2100), (1800, 2700))


class RecordedSettings(MemorySession):
    """A session in memory that keeps every settings write, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[SessionSettings] = []

    def remember_model(self, settings: SessionSettings) -> None:
        self.writes.append(settings)
        super().remember_model(settings)


def engine_on(base: str, session: MemorySession, tmp_path: Path):
    settings = Settings("openai/test-model", base)
    return build_engine(settings, ContextOptions(), session, tmp_path, 128_000, stream=False)


def test_settings_are_written_again_only_when_a_reply_changed_the_count(llm_server, tmp_path):
    llm_server.reply_text("first", usage=(900, 5))
    llm_server.reply_text("second", usage=(0, 5))  # a server that reported no input count
    session = RecordedSettings()
    engine = engine_on(llm_server.base_url, session, tmp_path)

    engine.run_turn("hello")
    engine.run_turn("again")

    [before, after] = session.writes  # the turn's start, then the first reply's count
    assert before.count_samples == ()
    [(estimated, reported)] = after.count_samples
    assert reported == 900 and estimated > 0
    assert engine.policy.count.samples() == after.count_samples


def test_the_count_is_seeded_from_samples_learnt_on_the_same_model_and_api_base(tmp_path):
    engine = engine_on("http://127.0.0.1:9/v1", MemorySession(), tmp_path)
    stored = SessionSettings(
        "openai/test-model", 0, api_base="http://127.0.0.1:9/v1", count_samples=LEARNT
    )

    assert engine.seed_count(stored)

    assert engine.policy.count.samples() == LEARNT
    assert engine.policy.count.count(2000) == 3000  # 1.5x, as the server counted


def test_samples_learnt_at_another_api_base_are_not_taken_up(tmp_path):
    engine = engine_on("http://127.0.0.1:9/v1", MemorySession(), tmp_path)
    stored = SessionSettings(
        "openai/test-model", 0, api_base="http://127.0.0.1:8/v1", count_samples=LEARNT
    )

    assert not engine.seed_count(stored)

    assert engine.policy.count.count(2000) == 2000  # the estimate: nothing learnt yet


def test_samples_learnt_on_another_model_are_not_taken_up(tmp_path):
    engine = engine_on("http://127.0.0.1:9/v1", MemorySession(), tmp_path)
    stored = SessionSettings(
        "openai/other", 0, api_base="http://127.0.0.1:9/v1", count_samples=LEARNT
    )

    assert not engine.seed_count(stored)

    assert not engine.policy.count.known
