"""One request: ``ContextPolicy.prepare`` builds it whole, the provider sends exactly it.

Through litellm to the scripted servers: what the server got is the system parts, the
messages, the tools and the reply budget the builder returned, and nothing stands in for
the tool definitions' tokens (no padding).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness9.config import ContextOptions
from harness9.context.policy import ContextPolicy
from harness9.engine.prompt import PromptBuilder
from harness9.provider import LLMProvider
from harness9.request import Request
from harness9.schema import Message, ToolCall, ToolDefinition
from harness9.store import MemorySession
from harness9.tokens import estimate_tokens, estimate_tool_tokens
from tests.support.anthropic_server import ScriptedAnthropicServer
from tests.support.history import ScriptedSummarizer
from tests.support.llm_server import ScriptedLLMServer

WINDOW = 200_000
SCHEMA = {"type": "object", "properties": {"path": {"type": "string", "description": "x" * 800}}}
TOOLS = [ToolDefinition("read_file", "Read a file " + "in detail " * 60, SCHEMA)]


def built(workdir: Path, *, reply_budget: int = 0) -> Request:
    """A session with a pin and a tool round, and the request the policy builds for it."""
    session = MemorySession("one-request")
    session.add_pin("answer in French")
    call = ToolCall("call_1", "read_file", '{"path": "a.py"}')
    session.add_messages(
        [
            Message("user", "read a.py"),
            Message("assistant", "", tool_calls=[call]),
            Message("tool", "print('hi')", tool_call_id="call_1"),
        ]
    )
    opts = ContextOptions(output_reserve=reply_budget)
    policy = ContextPolicy(opts, ScriptedSummarizer(), WINDOW)
    parts = PromptBuilder(workdir).parts(session)
    return policy.prepare(session, parts, TOOLS, [])


def test_the_openai_server_gets_exactly_the_built_request(
    llm_server: ScriptedLLMServer, tmp_path: Path
) -> None:
    request = built(tmp_path, reply_budget=1234)
    llm_server.reply_text("voilà")
    LLMProvider("openai/test-model", api_base=llm_server.base_url).send(request)
    body = llm_server.requests[0]
    texts = [p.text for p in request.system]
    assert [p.kind for p in request.system] == ["prompt", "state", "pins"]
    assert body["messages"][0] == {"role": "system", "content": "\n\n".join(texts)}
    # litellm leaves out a key whose value is null (an assistant's content beside its calls).
    sent = [{k: v for k, v in m.to_dict().items() if v is not None} for m in request.history]
    assert body["messages"][1:] == sent
    assert len(body["messages"]) == 4
    assert body["tools"] == [t.to_dict() for t in TOOLS]
    assert body["max_tokens"] == 1234


def test_the_anthropic_server_gets_the_system_parts_as_two_cache_blocks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    request = built(tmp_path, reply_budget=2000)
    prompt, state, pins = (p.text for p in request.system)
    with ScriptedAnthropicServer() as server:
        server.reply_text("voilà")
        provider = LLMProvider("anthropic/claude-sonnet-4-5", api_base=server.base_url)
        provider.send(request)
        body = server.requests[0]
    assert server.rejected == []
    assert body["system"] == [
        {"type": "text", "text": prompt, "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": f"{state}\n\n{pins}"},
    ]
    assert state.startswith("# Session state\nToday's date: ")
    assert pins.endswith("1. answer in French")
    assert [t["name"] for t in body["tools"]] == ["read_file"]
    assert body["max_tokens"] == 2000


def test_no_padding_is_sent_and_the_count_adds_the_tools_as_a_number(
    llm_server: ScriptedLLMServer, tmp_path: Path
) -> None:
    request = built(tmp_path)
    llm_server.reply_text("ok")
    LLMProvider("openai/test-model", api_base=llm_server.base_url).send(request)
    sent = llm_server.requests[0]["messages"][0]["content"]
    tool_tokens = estimate_tool_tokens(TOOLS)
    assert tool_tokens > 300  # a pad of that many tokens would be 1,200 spaces
    assert sent == PromptBuilder(tmp_path).build(None).content + "\n\n" + request.system[2].text
    assert "    " not in sent and not sent.endswith(" ")
    assert request.estimated == estimate_tokens(request.messages) + tool_tokens
    assert "max_tokens" not in llm_server.requests[0]  # no budget set: the server's default


def test_a_summary_call_is_a_request_of_its_messages_alone(
    llm_server: ScriptedLLMServer,
) -> None:
    llm_server.reply_text("summary")
    provider = LLMProvider("openai/test-model", api_base=llm_server.base_url, max_tokens=500)
    messages = [Message("system", "summarise"), Message("user", "the log")]
    provider.generate(messages, [])
    body = llm_server.requests[0]
    assert body["messages"] == [m.to_dict() for m in messages]
    assert body["max_tokens"] == 500 and "tools" not in body
    assert json.dumps(body).count("summarise") == 1
