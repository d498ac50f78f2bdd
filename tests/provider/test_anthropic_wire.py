"""harness9 chat on Claude, through litellm, against the scripted Anthropic Messages server:
cache breakpoints, the simulated cache read back, exact cost, max_tokens, cut-off streams."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.anthropic_server import ScriptedAnthropicServer, request_blocks
from tests.support.cli import cli

# litellm's price map for claude-sonnet-4-5, per token.
INPUT, WRITE_5M, WRITE_1H, READ, OUTPUT = 3e-6, 3.75e-6, 6e-6, 3e-7, 1.5e-5
MODEL = "anthropic/claude-sonnet-4-5"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with ScriptedAnthropicServer() as s:
        yield s


def run(server: ScriptedAnthropicServer, workdir: Path, *args: str, model: str = MODEL):
    argv = ["chat", "--model", model, "--api-base", server.base_url, "--workdir", str(workdir)]
    return cli(*argv, *args)


def tool_heavy(server: ScriptedAnthropicServer, workdir: Path, calls: int = 8) -> None:
    """``calls`` read_file calls, one a request, then an answer."""
    for i in range(calls):
        (workdir / f"log{i}.txt").write_text(f"line {i}: " + "details " * 300)
        args = json.dumps({"path": f"log{i}.txt"})
        server.reply_tool_calls([(f"toolu_{i:02d}", "read_file", args)], usage=(0, 40))
    server.reply_text("All logs read.", usage=(0, 12))


def usage_json() -> dict[str, Any]:
    listed = json.loads(cli("sessions", "list", "--json").stdout)
    assert len(listed) == 1
    return listed[0]["usage"]


def marks(body: dict[str, Any]) -> list[int]:
    return [i for i, (_, ttl) in enumerate(request_blocks(body)) if ttl is not None]


def test_every_claude_request_carries_breakpoints_within_the_limit(server, tmp_path):
    tool_heavy(server, tmp_path)
    result = run(server, tmp_path, "-p", "read the logs")
    assert result.exit_code == 0, result.output
    assert server.rejected == []
    assert len(server.requests) == 9
    for body in server.requests:
        blocks = request_blocks(body)
        at = marks(body)
        assert 2 <= len(at) <= 4
        # The system prompt's stable text is marked; the date after it is not.
        system = body["system"]
        assert "cache_control" in system[0] and "Today's date" not in system[0]["text"]
        assert "Today's date" in system[1]["text"] and "cache_control" not in system[1]
        assert at[-1] == len(blocks) - 1  # the rolling mark on the newest block


def test_a_tool_heavy_session_reads_the_cache_after_its_first_request(server, tmp_path):
    tool_heavy(server, tmp_path)
    assert run(server, tmp_path, "-p", "read the logs").exit_code == 0
    first, *rest = server.usage_log
    assert first.cache_read == 0 and first.cache_write > 1024
    for before, after in zip(server.usage_log, rest, strict=False):
        # Everything the previous request sent is read back; only the new part is written.
        assert after.cache_read == before.prompt_tokens
        assert after.input_tokens < 100
    read = sum(u.cache_read for u in server.usage_log)
    total = sum(u.prompt_tokens for u in server.usage_log)
    assert read / total > 0.7


def test_the_stored_cost_is_the_exact_price_of_the_reported_usage(server, tmp_path):
    tool_heavy(server, tmp_path)
    result = run(server, tmp_path, "-p", "read the logs")
    assert result.exit_code == 0, result.output
    log = server.usage_log
    exact = (
        sum(u.input_tokens * INPUT + u.cache_write * WRITE_5M + u.cache_read * READ for u in log)
        + sum(u.output_tokens for u in log) * OUTPUT
    )
    usage = usage_json()
    assert usage["model_calls"] == 9
    assert usage["input_tokens"] == sum(u.prompt_tokens for u in log)
    assert usage["cached_tokens"] == sum(u.cache_read for u in log)
    assert usage["cache_write_tokens"] == sum(u.cache_write for u in log)
    assert usage["cost_usd"] == pytest.approx(exact, abs=5e-7)  # the listing rounds to 6 places
    # Priced as plain input the same session would have cost noticeably more.
    assert exact < sum(u.prompt_tokens for u in log) * INPUT


def test_one_hour_lifetime_is_asked_for_and_priced_at_twice_the_input(server, tmp_path):
    tool_heavy(server, tmp_path, calls=2)
    result = run(server, tmp_path, "-p", "read the logs", "--cache-ttl", "1h")
    assert result.exit_code == 0, result.output
    for body in server.requests:
        controls = [b for b in body["system"] if "cache_control" in b]
        assert controls[0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    log = server.usage_log
    assert all(u.cache_write_1h == u.cache_write for u in log)
    exact = sum(
        u.input_tokens * INPUT
        + u.cache_write * WRITE_1H
        + u.cache_read * READ
        + u.output_tokens * OUTPUT
        for u in log
    )
    assert usage_json()["cost_usd"] == pytest.approx(
        exact, abs=5e-7
    )  # the listing rounds to 6 places


def test_the_token_line_shows_the_cached_and_written_parts(server, tmp_path):
    tool_heavy(server, tmp_path, calls=1)
    result = run(server, tmp_path, "-p", "read the logs")
    assert result.exit_code == 0, result.output
    last = server.usage_log[-1]
    assert last.cache_read > 0
    assert f"in {fmt(last.prompt_tokens)}: {fmt(last.cache_read)} cached" in result.stderr


def fmt(n: int) -> str:
    from harness9.tokens import format_token_count

    return format_token_count(n)


def test_the_readme_model_is_accepted_and_left_unpriced(server, tmp_path):
    server.reply_text("Hello!", usage=(0, 3))
    result = run(server, tmp_path, "-p", "hi", model="anthropic/claude-sonnet-4-20250514")
    assert result.exit_code == 0, result.output
    assert server.rejected == []
    assert server.requests[0]["max_tokens"] == 32_000  # the default cap, within 64,000
    assert "$" not in result.stderr  # litellm has no price for it: not "$0.0000"
    usage = usage_json()
    assert usage["cost_usd"] is None and usage["unpriced_calls"] == 1


def test_max_output_tokens_is_a_flag_and_a_setting(server, tmp_path, harness9_home):
    server.reply_text("one")
    server.reply_text("two")
    assert run(server, tmp_path, "-p", "hi", "--max-output-tokens", "1500").exit_code == 0
    harness9_home.mkdir(parents=True, exist_ok=True)
    (harness9_home / "config.toml").write_text("[provider]\nmax_output_tokens = 70000\n")
    assert run(server, tmp_path, "-p", "hi").exit_code == 0
    # The setting is a cap: the model's 64,000 and a fifth of its 200K window still bind.
    assert [b["max_tokens"] for b in server.requests] == [1500, 40_000]


def test_a_bad_cache_ttl_is_one_line_and_nothing_is_sent(server, tmp_path):
    result = run(server, tmp_path, "-p", "hi", "--cache-ttl", "2h")
    assert result.exit_code == 2
    assert "--cache-ttl must be one of 5m, 1h, got '2h'" in result.stderr
    assert server.requests == []


def test_a_cut_off_stream_still_counts_the_usage_the_server_reported(server, tmp_path):
    (tmp_path / "big.txt").write_text("x" * 8000)
    server.reply_stream_break("I was about to say")
    result = run(server, tmp_path, "-p", "hi")
    assert result.exit_code == 1
    (reported,) = server.usage_log
    usage = usage_json()
    assert usage["model_calls"] == 1
    assert usage["input_tokens"] == reported.prompt_tokens > 0
    assert usage["cache_write_tokens"] == reported.cache_write


def test_the_cache_lifetime_comes_from_the_environment_or_the_config_file(
    server, tmp_path, harness9_home, monkeypatch
):
    tool_heavy(server, tmp_path, calls=0)
    monkeypatch.setenv("HARNESS9_CACHE_TTL", "1h")
    assert run(server, tmp_path, "-p", "hi").exit_code == 0
    assert server.requests[0]["system"][0]["cache_control"]["ttl"] == "1h"
    monkeypatch.delenv("HARNESS9_CACHE_TTL")
    harness9_home.mkdir(parents=True, exist_ok=True)
    (harness9_home / "config.toml").write_text('[provider]\ncache_ttl = "1d"\n')
    result = run(server, tmp_path, "-p", "hi")
    assert result.exit_code == 1
    assert result.stderr.strip().endswith("must be one of 5m, 1h, got '1d'")
    assert len(result.stderr.strip().splitlines()) == 1
    assert len(server.requests) == 1
