"""No request over 90 % of the window by the server's count (issue 19), although the
compaction threshold is measured in bytes / 4 of the messages' text: every message also
carries framing (roles, block types, tool-call ids and their JSON) that the server counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.anthropic_server import ScriptedAnthropicServer, openai_view, prompt_tokens
from tests.support.cli import cli
from tests.support.llm_server import TextReply, ToolCallsReply

MODEL = "anthropic/claude-sonnet-4-5"
WINDOW = 5000
PER_TURN = 30  # tool calls a turn (a turn allows 50 model calls)
TURNS = 3


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with ScriptedAnthropicServer() as s:
        yield s


class ManySmallCalls:
    """Plays a model that reads ``PER_TURN`` small files a turn, one a request, then answers; a
    summary request (no tools but litellm's dummy one) gets a one-line summary."""

    def __init__(self) -> None:
        self.chat: list[int] = []  # each chat request's size by the server's count
        self.calls = 0
        self.answered_turn = True  # the first request starts a turn: call a tool

    def __call__(self, wire: dict[str, Any]) -> Any:
        names = {t["function"]["name"] for t in openai_view(wire)["tools"]}
        if not names - {"dummy_tool", "dummy-tool"}:
            return TextReply("**Goal:** read the small files.")
        self.chat.append(prompt_tokens(wire))
        if self.calls % PER_TURN == 0 and not self.answered_turn:
            self.answered_turn = True
            return TextReply("Those files are read.")
        self.answered_turn = False
        self.calls += 1
        args = json.dumps({"path": f"f{self.calls % 10}.txt"})
        return ToolCallsReply(((f"toolu_{self.calls:03d}", "read_file", args),))


def test_many_small_tool_results_never_take_a_request_over_90_percent(server, tmp_path: Path):
    for i in range(10):
        (tmp_path / f"f{i}.txt").write_text(f"ok {i}\n")
    model = ManySmallCalls()
    server.respond_with(model)
    argv = ["chat", "--model", MODEL, "--api-base", server.base_url, "--workdir", str(tmp_path)]
    result = cli(*argv, "--context-window", str(WINDOW), input="read the files\n" * TURNS)
    assert result.exit_code == 0, result.output
    assert server.rejected == []
    assert model.calls == PER_TURN * TURNS
    shares = [round(n / WINDOW, 2) for n in model.chat]
    # Uncompacted, the session would outgrow the window (each call adds its framing)...
    assert model.chat[0] + (model.chat[1] - model.chat[0]) * PER_TURN * TURNS > WINDOW
    # ...so it compacted, not before the context was well filled (the cache stays warm)...
    shrunk = [b for a, b in zip(model.chat, model.chat[1:], strict=False) if b < a]
    assert shrunk, str(shares)
    assert max(model.chat) > 0.6 * WINDOW, str(shares)
    # ...and no request ever went over 90 % of the window as the server counts it.
    assert max(model.chat) <= 0.9 * WINDOW, str(shares)
