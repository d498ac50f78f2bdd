"""config.toml is validated once, as it is read: every command refuses the same mistake with
the same line, and a value out of range says what the range is."""

from __future__ import annotations

import pytest

from harness9.config import config_path, context_options
from harness9.errors import ConfigError
from tests.support.cli import chat, cli, write_config


@pytest.mark.parametrize(
    ("toml", "line"),
    [
        (
            "[compaction]\nthreshhold = 0.7\n",
            "unknown key compaction.threshhold in {path} (known: strategy, auto, threshold, "
            "target, recall, model, smart_triggers, cooldown_iterations, lookahead_iterations, "
            "max_messages, prepare_ahead, prepare_lookahead, prepare_at)",
        ),
        (
            "[compaction]\nthreshold = 1.5\n",
            "compaction.threshold in {path} must be from 0.1 to 0.95, got 1.5",
        ),
        (
            "[offload]\nmax_result_tokens = 10\n",
            "offload.max_result_tokens in {path} must be at least 100, got 10",
        ),
        (
            "[topics]\ntopic_similarity_threshold = 1.0\n",
            "topics.topic_similarity_threshold in {path} must be between 0 and 1, got 1.0",
        ),
        (
            "[compaction]\ntarget = 0.95\n",
            "compaction.target in {path} must be below the compaction threshold (0.95 is not "
            "below 0.8): compaction compacts down to the target",
        ),
    ],
)
def test_every_command_refuses_a_bad_config_with_the_same_line(llm_server, toml, line):
    write_config(toml)
    expected = "harness9: " + line.format(path=config_path()) + "\n"

    for argv in (["sessions", "list"], ["sessions", "search", "x"], ["compact", "--dry-run"]):
        result = cli(*argv)
        assert (result.exit_code, result.stderr) == (1, expected), argv
    result = chat(llm_server, "hi\n")
    assert (result.exit_code, result.stderr) == (1, expected)
    assert llm_server.requests == []


def test_a_strategy_that_does_not_exist_lists_the_ones_that_do():
    write_config('[compaction]\nstrategy = "fold"\n')
    result = cli("sessions", "list")
    assert result.exit_code == 1
    assert "compaction.strategy in" in result.stderr
    assert "must be one of hybrid, summarize, budget, window, evict" in result.stderr


def test_a_target_from_the_environment_above_the_threshold_is_refused(monkeypatch):
    monkeypatch.setenv("HARNESS9_COMPACTION_THRESHOLD", "0.6")
    monkeypatch.setenv("HARNESS9_COMPACTION_TARGET", "0.7")
    with pytest.raises(ConfigError, match="must be below the compaction threshold"):
        context_options({})
