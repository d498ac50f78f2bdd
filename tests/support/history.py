"""Builders for test histories and a deterministic in-process summariser.

``ScriptedSummarizer`` is a plain implementation of the Summarizer protocol (the
same shape every provider has), not a mock of litellm: it records what it was
asked and answers from a rule, and it refuses prompts larger than its window,
as a real model would.
"""

from __future__ import annotations

from collections.abc import Callable

from harness9.context import estimate_tokens
from harness9.context.stubs import HANDLE_ALLOWANCE_BYTES, awaits_handle
from harness9.schema import Message, ToolCall, ToolDefinition, Usage
from harness9.tokens import BYTES_PER_TOKEN, message_bytes

SYSTEM = Message("system", "You are harness9.")


def seen_tokens(msgs: list[Message]) -> int:
    """A compaction's messages as the model will see them, in estimated tokens: each new
    stub counted with the recall handle the checkpoint adds to it."""
    stubs = sum(1 for m in msgs if m.role == "tool" and awaits_handle(m))
    size = sum(message_bytes(m) for m in msgs) + stubs * HANDLE_ALLOWANCE_BYTES
    return size // BYTES_PER_TOKEN


def exchanges(n: int, size: int = 400, start: int = 0) -> list[Message]:
    """``n`` question/answer pairs of ``size`` filler bytes each, numbered from ``start``."""
    msgs: list[Message] = []
    for i in range(start, start + n):
        msgs += [
            Message("user", f"question {i} " + "q" * size),
            Message("assistant", f"answer {i} " + "a" * size),
        ]
    return msgs


def user(text: str) -> Message:
    return Message("user", text)


def asst(text: str) -> Message:
    return Message("assistant", text)


def users(n: int, size: int = 400) -> list[Message]:
    """``n`` user messages of ``size`` bytes each, numbered 000, 001, ..."""
    return [user(f"{i:03d}".ljust(size, "x")) for i in range(n)]


def call(*ids: str, name: str = "bash", args: str = '{"command":"ls"}') -> Message:
    """An assistant message calling one tool per id."""
    return Message("assistant", "", [ToolCall(i, name, args) for i in ids])


def result(call_id: str, text: str = "ok") -> Message:
    return Message("tool", text, tool_call_id=call_id)


class ContextWindowExceeded(Exception):
    pass


class ScriptedSummarizer:
    """The one scripted summariser of the tests: answers ``reply`` (a string, or
    ``reply(prompt_text, call_number)``), raises ``error`` when given one, and records
    every call."""

    def __init__(
        self,
        reply: str | Callable[[str, int], str] = "**Goal:** fix the build.",
        *,
        window: int | None = None,
        error: Exception | None = None,
    ) -> None:
        self.reply = reply
        self.window = window
        self.error = error
        self.calls: list[list[Message]] = []  # every request, as sent
        self.prompts: list[str] = []
        self.tools_seen: list[list[ToolDefinition]] = []
        self.sizes: list[int] = []

    def generate(
        self, messages: list[Message], tools: list[ToolDefinition]
    ) -> tuple[Message, Usage | None]:
        self.calls.append(list(messages))
        size = estimate_tokens(messages)
        self.sizes.append(size)
        self.tools_seen.append(tools)
        prompt = messages[-1].content
        self.prompts.append(prompt)
        if self.window is not None and size > self.window:
            raise ContextWindowExceeded(f"{size} tokens > window {self.window}")
        if self.error is not None:
            raise self.error
        text = self.reply(prompt, len(self.prompts)) if callable(self.reply) else self.reply
        return Message("assistant", text), Usage(size, len(text) // 4)
