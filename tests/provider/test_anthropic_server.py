"""The scripted Anthropic server validates and caches as the Messages API does."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.support.anthropic_server import (
    MIN_CACHEABLE_TOKENS,
    ScriptedAnthropicServer,
    block_tokens,
)

BIG = "lorem ipsum " * 800  # ~2.4K tokens at bytes / 4
MARK = {"type": "ephemeral"}


def post(server: ScriptedAnthropicServer, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        server.base_url + "/v1/messages",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 1000, "messages": messages, **extra}


def wire_user(text: str, mark: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if mark:
        block["cache_control"] = MARK
    return {"role": "user", "content": [block]}


@pytest.fixture
def server():
    with ScriptedAnthropicServer() as s:
        yield s


def rejected(server: ScriptedAnthropicServer, request: dict[str, Any]) -> str:
    status, answer = post(server, request)
    assert status == 400
    assert answer["type"] == "error" and answer["error"]["type"] == "invalid_request_error"
    return answer["error"]["message"]


def test_max_tokens_over_the_models_limit_is_rejected(server):
    request = body([wire_user("hi")], model="claude-sonnet-4-20250514", max_tokens=128_000)
    assert "128000 > 64000" in rejected(server, request)


def test_more_than_four_breakpoints_are_rejected(server):
    system = [{"type": "text", "text": f"part {i}", "cache_control": MARK} for i in range(4)]
    message = rejected(server, body([wire_user("hi", mark=True)], system=system))
    assert message == "A maximum of 4 blocks with cache_control may be provided. Found 5."


def test_empty_text_blocks_and_unalternating_roles_are_rejected(server):
    assert "non-empty" in rejected(server, body([wire_user("")]))
    assert "alternate" in rejected(server, body([wire_user("a"), wire_user("b")]))


def test_a_tool_use_needs_its_tool_result_in_the_next_message(server):
    call = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}],
    }
    assert "without `tool_result`" in rejected(server, body([wire_user("a"), call, wire_user("b")]))
    stray = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t9", "content": "x"}],
    }
    assert "unexpected `tool_use_id`" in rejected(server, body([stray]))
    assert server.pending == 0 and len(server.rejected) == 2


def test_a_prefix_ending_at_a_breakpoint_is_written_then_read(server):
    server.reply_text("one", usage=(0, 5))
    server.reply_text("two", usage=(0, 5))
    request = body([wire_user(BIG, mark=True)])
    assert post(server, request)[0] == 200
    status, answer = post(server, request)
    first, second = server.usage_log
    size = first.prompt_tokens
    assert size >= MIN_CACHEABLE_TOKENS
    assert (first.cache_read, first.cache_write, first.input_tokens) == (0, size, 0)
    assert (second.cache_read, second.cache_write, second.input_tokens) == (size, 0, 0)
    assert answer["usage"]["cache_read_input_tokens"] == size
    assert answer["usage"]["output_tokens"] == 5


def test_without_a_breakpoint_nothing_is_cached(server):
    server.reply_text("one")
    server.reply_text("two")
    post(server, body([wire_user(BIG)]))
    post(server, body([wire_user(BIG)]))
    assert [(u.cache_read, u.cache_write) for u in server.usage_log] == [(0, 0), (0, 0)]


def test_a_short_prefix_is_not_cached(server):
    server.reply_text("one")
    server.reply_text("two")
    request = body([wire_user("short", mark=True)])
    post(server, request)
    post(server, request)
    assert [(u.cache_read, u.cache_write) for u in server.usage_log] == [(0, 0), (0, 0)]


def test_a_longer_request_reads_the_cached_prefix_and_writes_only_the_rest(server):
    server.reply_text("one")
    server.reply_text("two")
    post(server, body([wire_user(BIG, mark=True)]))
    reply = {"role": "assistant", "content": "ok"}
    post(server, body([wire_user(BIG), reply, wire_user("more", mark=True)]))
    first, second = server.usage_log
    assert second.cache_read == first.cache_write
    tail = block_tokens({"role": "assistant", "type": "text", "text": "ok"}) + block_tokens(
        {"role": "user", "type": "text", "text": "more"}
    )
    assert second.cache_write == tail and second.input_tokens == 0


def test_one_hour_writes_are_reported_apart(server):
    server.reply_text("one")
    mark = {"type": "ephemeral", "ttl": "1h"}
    post(
        server,
        body([{"role": "user", "content": [{"type": "text", "text": BIG, "cache_control": mark}]}]),
    )
    (usage,) = server.usage_log
    assert usage.cache_write_1h == usage.cache_write > 0


def test_a_refused_request_caches_nothing(server):
    server.reply_error(429, "slow down")
    server.reply_text("ok")
    request = body([wire_user(BIG, mark=True)])
    assert post(server, request)[0] == 429
    assert post(server, request)[0] == 200
    (answered,) = server.usage_log
    assert answered.cache_read == 0 and answered.cache_write > 0
