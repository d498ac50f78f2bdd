"""Where harness9 places prompt-cache breakpoints, and for which providers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness9.config import ContextOptions
from harness9.engine.prompt import STATE_MARK, PromptBuilder
from harness9.provider.caching import needs_breakpoints, place_breakpoints, system_blocks
from harness9.provider.limits import ModelLimits, output_budget
from harness9.request import PART_PROMPT, PART_STATE, SystemPart
from tests.support.cli import chat

MARK = {"type": "ephemeral"}


@pytest.mark.parametrize(
    "model",
    [
        "anthropic/claude-sonnet-4-5",
        "claude-3-5-haiku-20241022",
        "bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0",
        "vertex_ai/claude-sonnet-4@20250514",
        "openrouter/anthropic/claude-sonnet-4",
    ],
)
def test_claude_on_every_route_gets_breakpoints(model):
    assert needs_breakpoints(model)


@pytest.mark.parametrize(
    "model",
    [
        "openai/gpt-4o",
        "gpt-4o-mini",
        "gemini/gemini-2.5-pro",
        "deepseek/deepseek-chat",
        "openrouter/openai/gpt-4o",
        "ollama/llama3.1",
    ],
)
def test_providers_that_cache_by_themselves_are_left_alone(model):
    assert not needs_breakpoints(model)


SYSTEM = (
    SystemPart(PART_PROMPT, "stable"),
    SystemPart(PART_STATE, "# Session state\nToday's date: 2026-12-01"),
)


def conversation() -> list[dict]:
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    call2 = {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    return [
        {"role": "system", "content": "stable" + STATE_MARK + "Today's date: 2026-12-01"},
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "a.py", "tool_call_id": "c1"},
        {"role": "assistant", "content": "", "tool_calls": [call2]},
        {"role": "tool", "content": "b.py", "tool_call_id": "c2"},
    ]


def test_marks_go_on_the_system_text_the_previous_prompts_end_and_the_last_message():
    original = conversation()
    before = json.dumps(original)
    marked = place_breakpoints(original, "5m", system_blocks(SYSTEM))
    assert json.dumps(original) == before  # the input is not changed
    system = marked[0]["content"]
    assert system == [
        {"type": "text", "text": "stable", "cache_control": MARK},
        {"type": "text", "text": "# Session state\nToday's date: 2026-12-01"},
    ]
    assert [i for i, m in enumerate(marked) if "cache_control" in m] == [3, 5]
    assert all("cache_control" not in c for m in marked[1:] for c in m.get("tool_calls", []))


def test_an_assistant_message_of_tool_calls_only_carries_its_mark_on_the_last_call():
    msgs = conversation()[:3]  # ends with the assistant's call (a summary request's view)
    marked = place_breakpoints(msgs, "1h")
    assert marked[2]["tool_calls"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert marked[1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_never_more_than_four_marks_and_an_unmarkable_message_passes_its_mark_back():
    msgs = conversation() + [{"role": "assistant", "content": ""}]
    marked = place_breakpoints(msgs)
    count = sum("cache_control" in m for m in marked) + 1  # + the system block
    assert count <= 4
    assert "cache_control" in marked[5] and "cache_control" not in marked[6]


def test_the_system_prompt_puts_the_date_after_the_stable_text(tmp_path: Path):
    (tmp_path / "AGENTS.md").write_text("Run the tests with make test.")
    text = PromptBuilder(tmp_path).build(None).content
    stable, state = text.split(STATE_MARK)
    assert "make test" in stable and "Working directory" in stable
    assert "Today's date" not in stable and state.startswith("Today's date: ")


def test_an_openai_request_carries_no_cache_control(llm_server, tmp_path):
    llm_server.reply_text("hi")
    assert chat(llm_server, "hello\n", workdir=tmp_path).exit_code == 0
    assert "cache_control" not in json.dumps(llm_server.requests[0])


def test_the_reply_budget_is_the_models_limit_capped_by_the_setting_and_the_window():
    assert output_budget(ModelLimits(200_000, 64_000), 32_000) == 32_000
    assert output_budget(ModelLimits(200_000, 8_192), 32_000) == 8_192
    assert output_budget(ModelLimits(16_384, 8_192), 32_000) == 3_276  # a fifth of the window


def test_the_compaction_threshold_leaves_room_for_the_reply():
    assert ContextOptions(threshold=0.8, output_reserve=30_000).threshold_tokens(200_000) == 160_000
    assert (
        ContextOptions(threshold=0.95, output_reserve=32_000).threshold_tokens(200_000) == 168_000
    )
