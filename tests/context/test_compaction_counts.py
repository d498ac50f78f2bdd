"""One count decides and shows a compaction: messages plus tool definitions (issue 24: 1, 4).

The trigger, the notice, ``/context`` and ``compact --dry-run`` all measure a request as
the model is billed for it; a compaction lands under the threshold; the dry run is exactly
what ``compact`` then does; no compaction makes the context larger.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from harness9.cli import app
from tests.support.cli import stored_session
from tests.support.history import exchanges

runner = CliRunner()
WINDOW = ["--context-window", "4000"]


def make_session(pairs: int = 12, size: int = 400) -> str:
    return stored_session(*exchanges(pairs, size))


def compact_json(*args: str) -> dict:
    result = runner.invoke(app, ["compact", "--json", *WINDOW, *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("strategy", ["budget", "evict", "window", "hybrid", "summarize"])
def test_messages_under_the_threshold_but_tools_over_it_would_compact(strategy):
    # 12 exchanges are ~2.6K tokens of messages; the tool definitions bring the request
    # to ~3.5K, over the 3.2K threshold of a 4K window.
    make_session()

    plan = compact_json("--dry-run", "--strategy", strategy)

    assert plan["threshold"] == 3200
    assert plan["tokens_before"] > 3200
    # evict too: eviction has nothing to replace in plain text, so the old messages fold.
    assert plan["would_compact"] is True, plan
    assert plan["tokens_after"] < plan["tokens_before"]


@pytest.mark.parametrize("strategy", ["budget", "window", "evict"])
def test_compact_lands_under_the_threshold_and_matches_its_dry_run(strategy):
    make_session()
    plan = compact_json("--dry-run", "--strategy", strategy)

    done = compact_json("--strategy", strategy)

    assert done["compacted"] is True
    assert done["tokens_before"] == plan["tokens_before"]
    assert done["tokens_after"] == plan["tokens_after"]
    assert done["tokens_after"] <= 3200


def test_a_dry_run_never_promises_a_larger_context():
    # Two short exchanges forced: a summary estimate would be larger than what it replaces.
    make_session(pairs=4, size=10)

    plan = compact_json("--dry-run", "--force", "--strategy", "hybrid")

    assert plan["tokens_after"] <= plan["tokens_before"]
    if not plan["would_compact"]:
        assert plan["tokens_after"] == plan["tokens_before"]


@pytest.mark.parametrize("strategy", ["budget", "window", "evict"])
def test_model_free_dry_run_and_compact_agree_when_forced(strategy):
    make_session(pairs=8)
    plan = compact_json("--dry-run", "--force", "--strategy", strategy)

    done = compact_json("--force", "--strategy", strategy)

    assert done["compacted"] is plan["would_compact"]
    if plan["would_compact"]:
        assert done["tokens_after"] == plan["tokens_after"]
        assert done["tokens_after"] < done["tokens_before"]
