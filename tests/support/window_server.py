"""Scripted OpenAI-compatible servers that behave as the common local servers do when a
request is over their window, for tests and ``scripts/bench_window.py``.

``LocalServer(kind, n_ctx)`` is a responder for ``ScriptedLLMServer.respond_with``: it
counts each request as that kind of server would (a ratio of harness9's estimate, the tool
definitions or not, ``max_tokens`` or not), answers a request that fits with a text reply
and its real count as usage, and refuses one that does not in the server's own words:

- ``openai``: 400 ``This model's maximum context length is N tokens`` (context_length_exceeded)
- ``vllm``: the same words, and ``max_tokens`` counted against the window
- ``llama.cpp``: 400 ``exceed_context_size_error``, the window only as ``n_ctx`` in the body;
  ``max_tokens`` counted too (a slot's context holds the reply)
- ``llama-cpp-python``: a streamed request gets a 200 whose stream then ends empty (no
  window anywhere); an unstreamed one OpenAI's words (``names_window=False``: an empty
  200 too, as a server that names its window nowhere)
- ``lm-studio``: 400 ``... loaded with context length of only N tokens ...``

The window is only ever in the refusal: the discovery routes are not served.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.llm_server import DeadStreamReply, EmptyReply, ErrorReply, Reply, TextReply

KINDS = ("openai", "vllm", "llama.cpp", "llama-cpp-python", "lm-studio")


def is_summary_request(body: dict[str, Any]) -> bool:
    """A summariser's call: the agent's requests always carry the tool definitions."""
    return not body.get("tools")


def message_bytes(message: dict[str, Any]) -> int:
    n = len(str(message.get("content") or "").encode())
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        n += len(str(fn.get("name", "")).encode()) + len(str(fn.get("arguments", "")).encode())
    return n


@dataclass
class LocalServer:
    """One local server's behaviour (see the module docstring); ``over`` records the count
    of every request it received that was over its window."""

    kind: str
    n_ctx: int
    ratio: float = 1.0  # its tokenizer against bytes / 4
    counts_tools: bool = True  # False: its chat template has no place for tool definitions
    reply: Callable[[dict[str, Any]], str] = lambda body: "noted."
    # llama-cpp-python's failed stream: with a finish reason (else it just ends).
    dead_stream_finishes: bool = False
    names_window: bool = True  # False: an unstreamed request over the window gets an empty 200
    summary: str = "**Goal:** keep notes\n**Critical Context:** the notes so far"
    counts_max_tokens: bool | None = None  # None: as the kind does (vLLM, llama.cpp)
    over: list[int] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)
    refusals: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r}; one of {', '.join(KINDS)}")
        if self.counts_max_tokens is None:
            self.counts_max_tokens = self.kind in ("vllm", "llama.cpp")

    def count(self, body: dict[str, Any]) -> int:
        """The prompt's tokens as this server counts them (4 tokens of framing a message)."""
        messages = body.get("messages") or []
        text = sum(message_bytes(m) for m in messages) / 4 + 4 * len(messages)
        tools = body.get("tools") or []
        if tools and self.counts_tools:
            text += len(json.dumps(tools)) / 4
        return max(1, round(text * self.ratio))

    def __call__(self, body: dict[str, Any]) -> Reply:
        prompt = self.count(body)
        asked = int(body.get("max_tokens") or 0) if self.counts_max_tokens else 0
        if prompt + asked > self.n_ctx:
            self.over.append(prompt + asked)
            self.refusals += 1
            return self._refusal(body, prompt, asked)
        self.answered.append(prompt)
        text = self.summary if is_summary_request(body) else self.reply(body)
        return TextReply(text, usage=(prompt, max(1, len(text) // 4)), chunk_size=400)

    def _refusal(self, body: dict[str, Any], prompt: int, asked: int) -> Reply:
        n = self.n_ctx
        if self.kind == "llama.cpp":
            return ErrorReply(
                400,
                "the request exceeds the available context size, try increasing it",
                type="exceed_context_size_error",
                extra={"n_prompt_tokens": prompt, "n_ctx": n},
            )
        if self.kind == "llama-cpp-python" and body.get("stream"):
            return DeadStreamReply(finish=self.dead_stream_finishes)
        if self.kind == "llama-cpp-python" and not self.names_window:
            return EmptyReply()
        if self.kind == "lm-studio":
            return ErrorReply(
                400,
                f"Trying to keep the first {prompt} tokens when context the overflows. However, "
                f"the model is loaded with context length of only {n} tokens, which is not "
                "enough. Try to load the model with a larger context length, or provide a "
                "shorter input",
            )
        detail = f" ({prompt} in the messages, {asked} in the completion)" if asked else ""
        return ErrorReply(
            400,
            f"This model's maximum context length is {n} tokens. However, you requested "
            f"{prompt + asked} tokens{detail}. Please reduce the length of the messages.",
            type="invalid_request_error",
            code="context_length_exceeded",
        )
