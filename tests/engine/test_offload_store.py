"""The engine owns the offload store: its inline limit follows the window the policy uses."""

from __future__ import annotations

from pathlib import Path

from harness9.config import ContextOptions, Settings
from harness9.engine.engine import AgentEngine
from harness9.engine.setup import build_engine
from harness9.store import MemorySession


def engine_of(opts: ContextOptions, window: int, workdir: Path) -> AgentEngine:
    # No model is called: the address is never reached.
    settings = Settings("openai/test-model", "http://127.0.0.1:9")
    return build_engine(settings, opts, MemorySession(), workdir, window, assume_yes=True)


def test_the_inline_limit_follows_a_smaller_window_the_server_names(tmp_path: Path):
    engine = engine_of(ContextOptions(), 128_000, tmp_path)
    assert engine.offload is not None
    assert engine.offload.config.max_result_tokens == 2000

    assert engine.policy.adopt_window(8_000)

    assert engine.offload.config.max_result_tokens == 666  # a twelfth of 8,000


def test_with_offload_off_the_engine_has_no_store(tmp_path: Path):
    engine = engine_of(ContextOptions(offload=False), 128_000, tmp_path)
    assert engine.offload is None
