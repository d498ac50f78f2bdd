"""An HTTP MCP server that starts refusing harness9 mid-chat (a token that expired, a
gateway gone wrong): the call that meets the refusal says the HTTP status, which the SDK's
own error leaves out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import chat
from tests.support.llm_server import TextReply, ToolCallsReply
from tests.tools.test_mcp import configure, demo_over_http, tool_messages


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """demo.py over Streamable HTTP, refusing with 401 once the flag file exists: its URL
    and the flag."""
    flag = tmp_path / "expired"
    with demo_over_http("--refuse-when", str(flag)) as url:
        yield url, flag


def test_a_call_refused_with_401_mid_chat_names_the_status(
    llm_server, harness9_home, workdir, gateway
):
    url, flag = gateway
    configure(harness9_home, {"web": {"url": url, "timeout": 10}})

    def expire_then_call(_body: dict) -> None:
        flag.write_text("now", encoding="utf-8")

    llm_server.reply(ToolCallsReply((("c1", "mcp__web__add", '{"a": 2, "b": 3}'),)))
    llm_server.reply(ToolCallsReply((("c2", "mcp__web__reverse", '{"text": "abc"}'),)))
    llm_server.reply(TextReply("done"))
    llm_server.respond_with(
        lambda body: expire_then_call(body) if len(llm_server.requests) == 2 else None
    )

    result = chat(llm_server, "go\n", "--yes", workdir=workdir)

    assert result.exit_code == 0, result.output
    first, second = tool_messages(llm_server.requests[-1])
    assert first == "sum=5"
    assert "HTTP 401 Unauthorized" in second, second
