"""Summarising a span of messages (``SpanSummarizer``), and the compactor built on it.

``SpanSummarizer`` renders a span compactly and summarises it with a template
(the five-section one by default). When the span begins with an earlier
summary, the prompt asks to merge the new span into it (``<previous-summary>``),
so repeated compactions do not lose what earlier ones kept. When even the
compact rendering is too large for the summariser's own window, it is
summarised in chunks and the partial summaries are merged, hierarchically if
need be: compaction must still work once the context has already overflowed.
Every configuration of the pipeline (pipeline.py) that summarises composes one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from harness9.context.compaction import (
    ProgressCallback,
)
from harness9.context.patterns import is_offload_marker
from harness9.context.prompts import prompt
from harness9.context.recall import summary_of
from harness9.context.tokens import BYTES_PER_TOKEN
from harness9.schema import (
    ROLE_SYSTEM,
    ROLE_TOOL,
    ROLE_USER,
    Message,
    ToolDefinition,
    Usage,
)

__all__ = [
    "CHUNK_PERCENT",
    "SUMMARY_ESTIMATE_CAP",
    "SUMMARY_TEMPLATE",
    "SpanSummarizer",
    "Summarizer",
    "render_for_summary",
]

SUMMARY_TEMPLATE = prompt("summary_template")
SUMMARIZER_SYSTEM = prompt("summarizer_system")
_FULL_INSTRUCTION = prompt("instruction_full")
_PART_INSTRUCTION = prompt("instruction_part")  # .format(index=, count=)
_MERGE_INSTRUCTION = prompt("instruction_merge")
_UPDATE_INSTRUCTION = prompt("instruction_update")

# A summary is assumed to take at most this many tokens when planning (the
# plan never calls the model); a head smaller than that is assumed to be kept
# in full. The prompt asks for a concise summary, and models typically answer
# in a few hundred tokens.
SUMMARY_ESTIMATE_CAP = 1500
# Each summariser call (prompt + chunk) stays within this share of its window,
# leaving the rest for its answer and for the estimate's error.
CHUNK_PERCENT = 60
TOOL_RESULT_CHARS = 2000  # a tool result is shown to the summariser cut to this
TOOL_ARGS_CHARS = 200  # and a call's arguments to this
_MIN_CHUNK_BYTES = 1024  # progress even when a tiny window leaves no room


@runtime_checkable
class Summarizer(Protocol):
    """Anything that answers a list of messages: every provider satisfies this."""

    def generate(
        self, messages: list[Message], tools: list[ToolDefinition]
    ) -> tuple[Message, Usage | None]: ...


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters]"


def render_for_summary(
    msgs: Sequence[Message], *, tool_result_chars: int = TOOL_RESULT_CHARS
) -> list[str]:
    """One compact text block per message, as the summariser sees the head.

    Tool results are cut to ``tool_result_chars``, except offload markers: they
    are already summaries, and the id they carry is what ``offload_recall`` needs.
    """
    names: dict[str, str] = {}
    blocks: list[str] = []
    for m in msgs:
        if m.role == ROLE_TOOL:
            name = names.get(m.tool_call_id, "tool")
            content = m.content
            if not is_offload_marker(content):
                content = _shorten(content, tool_result_chars)
            blocks.append(f"[{name} result]: {content}")
            continue
        lines = [f"[{m.role}]: {m.content}"] if m.content else [f"[{m.role}]:"]
        for tc in m.tool_calls:
            names[tc.id] = tc.name
            lines.append(f"  -> {tc.name}({_shorten(tc.arguments, TOOL_ARGS_CHARS)})")
        blocks.append("\n".join(lines))
    return blocks


def _split_bytes(text: str, limit: int) -> list[str]:
    """Split ``text`` into pieces of at most ``limit`` UTF-8 bytes (never inside a character)."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return [text]
    pieces, start = [], 0
    while start < len(data):
        end = min(start + limit, len(data))
        while end < len(data) and (data[end] & 0xC0) == 0x80:  # continuation byte
            end -= 1
        pieces.append(data[start:end].decode("utf-8", "surrogatepass"))
        start = end
    return pieces


def _pack(blocks: Sequence[str], limit: int) -> list[str]:
    """Group blocks, in order, into chunks of at most ``limit`` bytes (oversized blocks split)."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for block in blocks:
        for piece in _split_bytes(block, limit):
            n = len(piece.encode("utf-8", "surrogatepass")) + 2  # the "\n\n" joining blocks
            if current and size + n > limit:
                chunks.append("\n\n".join(current))
                current, size = [], 0
            current.append(piece)
            size += n
    if current:
        chunks.append("\n\n".join(current))
    return chunks


class SpanSummarizer:
    """The summary text of a span of messages: one model call, or chunks and merges.

    ``window`` is the summariser's context window in tokens (None: unlimited, one
    call). ``system_prompt``, ``template`` and ``tool_result_chars`` change what
    the summariser is asked for (the marker prompt asks for ``@file:``/``@error:``);
    chunking and the ``<previous-summary>`` merge stay the same.
    """

    def __init__(
        self,
        summarizer: Summarizer,
        *,
        window: int | None = None,
        system_prompt: str = SUMMARIZER_SYSTEM,
        template: str = SUMMARY_TEMPLATE,
        tool_result_chars: int = TOOL_RESULT_CHARS,
    ) -> None:
        self.summarizer = summarizer
        self.window = window
        self.system_prompt = system_prompt
        self.template = template
        self.tool_result_chars = tool_result_chars

    def _call(self, prompt: str) -> str:
        reply, _usage = self.summarizer.generate(
            [Message(ROLE_SYSTEM, self.system_prompt), Message(ROLE_USER, prompt)], []
        )
        return (reply.content or "").strip()

    def _prompt(self, instruction: str, body: str, previous: str | None, focus: str | None) -> str:
        parts = [instruction, "", self.template, ""]
        if focus:
            parts += [f"Focus especially on: {focus}", ""]
        if previous is not None:
            parts += [
                "<previous-summary>",
                previous,
                "</previous-summary>",
                "",
                "New conversation to merge:",
            ]
        parts.append(body)
        return "\n".join(parts)

    def _capacity_bytes(self, overhead: str) -> int | None:
        """Bytes of body a call may carry next to ``overhead``; None = unlimited."""
        if self.window is None:
            return None
        budget = self.window * CHUNK_PERCENT // 100 * BYTES_PER_TOKEN
        fixed = len((self.system_prompt + overhead).encode("utf-8", "surrogatepass"))
        return max(_MIN_CHUNK_BYTES, budget - fixed)

    def _too_big_to_carry(self, text: str) -> bool:
        if self.window is None:
            return False
        budget = self.window * CHUNK_PERCENT // 100 * BYTES_PER_TOKEN
        return len(text.encode("utf-8", "surrogatepass")) > budget // 3

    def summarize(
        self,
        head: Sequence[Message],
        *,
        focus: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> str:
        """The summary text of ``head`` (no prefix); chunked when it overflows the window.

        A head opening with an earlier summary is merged into it. May return ""
        (the caller decides what an empty reply means); provider errors propagate.
        """
        previous: str | None = None
        if head and head[0].is_summary:
            # The recall index and state note are the checkpoint's, carried by code: the
            # summariser gets the summary proper.
            previous = summary_of(head[0])
            head = head[1:]
        blocks = render_for_summary(head, tool_result_chars=self.tool_result_chars)
        if previous is not None and self._too_big_to_carry(previous):
            # A previous summary that would crowd out the new span in every call
            # is summarised like the rest of the history, as its oldest part.
            blocks.insert(0, f"[previous summary]: {previous}")
            previous = None
        body = "\n\n".join(blocks)
        single_instruction = _FULL_INSTRUCTION if previous is None else _UPDATE_INSTRUCTION
        cap = self._capacity_bytes(self._prompt(single_instruction, "", previous, focus))
        calls = 0

        def call(prompt: str, total: int) -> str:
            nonlocal calls
            calls += 1
            if on_progress is not None:
                on_progress(calls, total)
            return self._call(prompt)

        if cap is None or len(body.encode("utf-8", "surrogatepass")) <= cap:
            return call(self._prompt(single_instruction, body, previous, focus), 1)

        part_overhead = self._prompt(_PART_INSTRUCTION.format(index=99, count=99), "", None, focus)
        chunks = _pack(blocks, self._capacity_bytes(part_overhead) or cap)
        total = len(chunks) + 1  # + the final merge; grows if the merge is hierarchical
        partials = []
        for i, chunk in enumerate(chunks, 1):
            instruction = _PART_INSTRUCTION.format(index=i, count=len(chunks))
            partials.append(call(self._prompt(instruction, chunk, None, focus), total))
            if not partials[-1]:
                raise ValueError(f"the summariser returned an empty summary for part {i}")
        return self._merge(partials, previous, focus, call, total)

    def _merge(
        self,
        partials: list[str],
        previous: str | None,
        focus: str | None,
        call: Callable[[str, int], str],
        total: int,
    ) -> str:
        """Merge partial summaries in one call, or level by level while they do not fit."""
        instruction = _MERGE_INSTRUCTION if previous is None else _UPDATE_INSTRUCTION
        overhead = self._prompt(instruction, "", previous, focus)
        cap = self._capacity_bytes(overhead) or 0
        # Each item at most half the room, so every group holds two or more and
        # each level at least halves the count: the loop ends.
        half = max(1, cap // 2 - 64)  # 64: room for the part tags and separators
        items = [_split_bytes(p, half)[0] for p in partials]
        while True:
            labelled = [f"<part-summary>\n{p}\n</part-summary>" for p in items]
            body = "\n\n".join(labelled)
            if len(body.encode("utf-8", "surrogatepass")) <= cap or len(items) == 1:
                return call(self._prompt(instruction, body, previous, focus), total)
            groups = _pack(labelled, cap)
            if len(groups) >= len(items):  # cannot happen with half-size items; never loop
                raise ValueError("partial summaries do not fit the summariser's window")
            total += len(groups)
            merged = [call(self._prompt(_MERGE_INSTRUCTION, g, None, focus), total) for g in groups]
            items = [_split_bytes(m, half)[0] for m in merged if m]
            if not items:
                raise ValueError("the summariser returned empty merged summaries")
