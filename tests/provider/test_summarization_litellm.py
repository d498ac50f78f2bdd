"""Summaries and token estimates through the real provider: litellm over HTTP to the scripted server."""

from __future__ import annotations

import copy
from pathlib import Path

from harness9.config import ContextOptions
from harness9.context import (
    SummarizationCompactor,
    estimate_tokens,
    estimate_tool_tokens,
    is_valid_tool_sequence,
)
from harness9.context.pipeline import summary_for_window
from harness9.context.policy import ContextPolicy
from harness9.engine import events as ev
from harness9.engine.engine import AgentEngine
from harness9.engine.prompt import PromptBuilder
from harness9.provider import LLMProvider, make_token_counter
from harness9.schema import Message, ToolCall
from harness9.store import MemorySession
from harness9.tools import default_registry
from tests.support.llm_server import ErrorReply, is_summary_request


def history(pairs: int, size: int = 400) -> list[Message]:
    msgs = [Message("system", "You are a test agent.")]
    for i in range(pairs):
        msgs += [
            Message("user", f"question {i} " + "q" * size),
            Message("assistant", "", [ToolCall(f"c{i}", "bash", '{"command": "ls"}')]),
            Message("tool", f"file{i}.py", tool_call_id=f"c{i}"),
            Message("assistant", f"answer {i} " + "a" * size),
        ]
    return msgs


def test_a_summary_comes_back_through_litellm_with_the_five_section_template(llm_server):
    llm_server.reply_text(
        "**Goal:** answer questions\n**Critical Context:** file3.py", usage=(900, 20)
    )
    provider = LLMProvider("openai/test-model", api_base=llm_server.base_url)
    compactor = SummarizationCompactor(provider, max_tokens=1500)

    result = compactor.compact(history(10))

    assert result.strategy == "summarize" and result.error is None
    assert (
        result.messages[1].content
        == "[Conversation Summary]\n**Goal:** answer questions\n**Critical Context:** file3.py"
    )
    prompt = llm_server.requests[0]["messages"][1]["content"]
    for section in (
        "**Goal:**",
        "**Progress:**",
        "**Key Decisions:**",
        "**Next Steps:**",
        "**Critical Context:**",
    ):
        assert section in prompt
    assert "question 0" in prompt and is_valid_tool_sequence(result.messages)


def test_a_streamed_reply_reports_its_usage_like_a_plain_one(llm_server):
    llm_server.reply_text("streamed summary", usage=(777, 11))
    provider = LLMProvider("openai/test-model", api_base=llm_server.base_url)

    reply, usage = provider.generate([Message("user", "summarise")], [], stream=True)

    assert reply.content == "streamed summary"
    assert (usage.input_tokens, usage.output_tokens) == (777, 11)
    assert llm_server.requests[0]["stream_options"] == {"include_usage": True}


def test_server_errors_that_outlast_the_retries_fall_back_to_the_token_budget(llm_server):
    llm_server.respond_with(lambda body: ErrorReply(500, "summariser is down"))
    provider = LLMProvider(
        "openai/test-model", api_base=llm_server.base_url, max_retries=1, backoff_base=0.01
    )
    compactor = SummarizationCompactor(provider, max_tokens=1500)

    result = compactor.compact(history(10))

    assert result.strategy == "budget" and "summariser is down" in (result.error or "")
    assert len(llm_server.requests) == 2  # one try, one retry, then the fallback
    assert estimate_tokens(result.messages) <= 1500
    assert is_valid_tool_sequence(result.messages)


def test_a_context_three_times_over_its_window_still_compacts_in_chunks(llm_server):
    llm_server.respond_with(
        lambda body: "**Goal:** part summary" if is_summary_request(body) else None
    )
    provider = LLMProvider("openai/test-model", api_base=llm_server.base_url)
    window = 4000
    msgs = history(60)  # over 3x the window
    assert estimate_tokens(msgs) > 3 * window
    compactor = summary_for_window(provider, window)

    result = compactor.compact(msgs)

    assert result.strategy == "summarize"
    assert estimate_tokens(result.messages) <= window * 80 // 100
    assert len(llm_server.requests) >= 4  # several parts and a merge
    for body in llm_server.requests:
        assert estimate_tokens([Message.from_dict(m) for m in body["messages"]]) <= window


def test_the_token_line_shows_the_tokenizer_until_the_server_reports_then_its_count(
    llm_server, tmp_path: Path
):
    session = MemorySession()
    provider = LLMProvider("openai/test-model", api_base=llm_server.base_url)
    counter = make_token_counter("openai/gpt-4o-mini")
    seen: list[ev.Event] = []
    registry = default_registry()
    policy = ContextPolicy(ContextOptions(), provider, 128_000, token_counter=counter)
    engine = AgentEngine(
        provider,
        registry,
        tmp_path,
        session=session,
        policy=policy,
        prompt_builder=PromptBuilder(tmp_path),
        on_event=seen.append,
    )
    llm_server.reply_text("first", usage=(0, 1))  # no input usage: nothing learnt yet
    engine.run_turn("hello")
    first_estimate = [e.tokens for e in seen if isinstance(e, ev.TokenUpdate) and not e.actual][0]
    first_request = [Message.from_dict(m) for m in llm_server.requests[0]["messages"]]
    tool_tokens = estimate_tool_tokens(registry.definitions())
    assert first_estimate == counter.count(first_request) + tool_tokens

    llm_server.reply_text("second", usage=(2 * (estimate_tokens(first_request) + tool_tokens), 1))
    engine.run_turn("again")
    learnt = copy.deepcopy(policy.count)  # what the third request is shown by
    llm_server.reply_text("third", usage=(500, 1))
    seen.clear()
    engine.run_turn("once more")
    shown = [e.tokens for e in seen if isinstance(e, ev.TokenUpdate) and not e.actual][0]
    third = [Message.from_dict(m) for m in llm_server.requests[2]["messages"]]
    # The server's count model, learnt from two reports: no longer the tokenizer's count.
    assert shown == learnt.count(estimate_tokens(third) + tool_tokens)
    assert shown != counter.count(third) + tool_tokens
