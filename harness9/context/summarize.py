"""The span summariser: the summary of a span of messages, merged into the summary it
opens with, in chunks when the span exceeds the summariser's own window (compaction must
work once the context has overflowed), merging the parts level by level if need be.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from itertools import count
from typing import Protocol

from harness9.context.facts import extract_fingerprint, facts_focus, keep_facts
from harness9.context.stubs import is_offloaded, is_summary, summary_of
from harness9.errors import HarnessError
from harness9.prompts import prompt
from harness9.schema import ROLE_SYSTEM, ROLE_TOOL, ROLE_USER, Message, ToolDefinition, Usage
from harness9.tokens import BYTES_PER_TOKEN, utf8_len

SUMMARY_TEMPLATE = prompt("summary_template")
SUMMARIZER_SYSTEM = prompt("summarizer_system")
STRUCTURED_COMPRESSION_PROMPT = prompt("structured_compression")
MARKER_TEMPLATE = prompt("marker_template")  # the per-call instruction
TOOL_CONTENT_CHARS = 200  # a tool result as the marker summariser sees it
# (call number, calls expected so far), reported through the chunks.
ProgressCallback = Callable[[int, int], None]
# The whole span, one part (.format(index=, count=)), merge the parts, update a summary.
_FULL, _PART, _MERGE, _UPDATE = (
    prompt(f"instruction_{name}") for name in ("full", "part", "merge", "update")
)
# What a plan (which never calls the model) assumes a summary takes: models answer the
# concise prompt in a few hundred tokens; the floor is the template's markers and
# "Progress:" paragraph (a span shorter than that costs more summarised than kept).
SUMMARY_ESTIMATE_CAP = 1500
SUMMARY_ESTIMATE_FLOOR = 150
SUMMARY_ESTIMATE_RATIO = 4  # a long span: a quarter of its tokens, up to the cap
# A summary's text takes at most half the room the threshold leaves beside the system
# message and tool definitions (``clipped``): a 1,750-token summary in a 4K window, beside
# 1,600 tokens of them, left no room for a turn's tool results, and every request failed.
SUMMARY_ROOM_DIVISOR = 2
CLIPPED_NOTE = "… (summary cut to fit the context window; history_search finds the rest)"
CHUNK_PERCENT = 60  # of the window a call's prompt may take: the rest for its answer
TOOL_RESULT_CHARS = 2000  # a tool result is shown to the summariser cut to this
TOOL_ARGS_CHARS = 200  # and a call's arguments to this
_MIN_CHUNK_BYTES = 1024  # progress even when a tiny window leaves no room


class SummaryError(HarnessError):
    """The summariser returned nothing usable."""


class Summarizer(Protocol):
    """Anything that answers a list of messages: every provider satisfies this."""

    def generate(
        self, messages: list[Message], tools: list[ToolDefinition]
    ) -> tuple[Message, Usage | None]: ...


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit} more characters]"


def render_for_summary(msgs: Sequence[Message], tool_result_chars: int) -> list[str]:
    """One block per message; offloads are not cut (summaries already, naming their id)."""
    names: dict[str, str] = {}
    blocks: list[str] = []
    for m in msgs:
        if m.role == ROLE_TOOL:
            content = m.content
            if not is_offloaded(m):
                content = _shorten(content, tool_result_chars)
            blocks.append(f"[{names.get(m.tool_call_id, 'tool')} result]: {content}")
            continue
        lines = [f"[{m.role}]: {m.content}" if m.content else f"[{m.role}]:"]
        for tc in m.tool_calls:
            names[tc.id] = tc.name
            lines.append(f"  -> {tc.name}({_shorten(tc.arguments, TOOL_ARGS_CHARS)})")
        blocks.append("\n".join(lines))
    return blocks


def _split_bytes(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` UTF-8 bytes, never inside a character."""
    data = text.encode("utf-8", "surrogatepass")
    pieces, start = [], 0
    while start < len(data):
        end = min(start + limit, len(data))
        while end < len(data) and (data[end] & 0xC0) == 0x80:  # a continuation byte
            end -= 1
        pieces.append(data[start:end].decode("utf-8", "surrogatepass"))
        start = end
    return pieces or [text]


def _pack(blocks: Sequence[str], limit: int) -> list[str]:
    """Blocks grouped in order into chunks of at most ``limit`` bytes (big ones split)."""
    chunks: list[list[str]] = [[]]
    size = 0
    for piece in (p for block in blocks for p in _split_bytes(block, limit)):
        n = utf8_len(piece) + 2  # the "\n\n" joining blocks
        if chunks[-1] and size + n > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(piece)
        size += n
    return ["\n\n".join(c) for c in chunks if c]


@dataclass(slots=True, eq=False)
class SpanSummarizer:
    """``window``: the summariser's context window in tokens (None: one call, however long)."""

    summarizer: Summarizer
    _: KW_ONLY
    window: int | None = None
    system_prompt: str = SUMMARIZER_SYSTEM
    template: str = SUMMARY_TEMPLATE
    tool_result_chars: int = TOOL_RESULT_CHARS

    def _prompt(self, instruction: str, body: str, previous: str | None, focus: str | None) -> str:
        parts = [instruction, "", self.template, ""]
        if focus:
            parts += [f"Focus especially on: {focus}", ""]
        if previous is not None:
            parts += ["<previous-summary>", previous, "</previous-summary>", ""]
            parts.append("New conversation to merge:")
        return "\n".join([*parts, body])

    def _budget(self) -> int:
        """Bytes one call may take, its system prompt included."""
        if self.window is None:
            return sys.maxsize
        return self.window * CHUNK_PERCENT // 100 * BYTES_PER_TOKEN

    def _room(self, instruction: str, previous: str | None, focus: str | None) -> int:
        """Bytes of body one call may carry beside its prompt."""
        fixed = utf8_len(self.system_prompt + self._prompt(instruction, "", previous, focus))
        return max(_MIN_CHUNK_BYTES, self._budget() - fixed)

    def summarize(
        self,
        head: Sequence[Message],
        *,
        focus: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> str:
        """The summary text of ``head`` (no prefix, may be ""); provider errors propagate."""
        previous = None
        if head and is_summary(head[0]):
            # The summary proper: the recall index and state note are the checkpoint's.
            previous, head = summary_of(head[0]), head[1:]
        blocks = render_for_summary(head, self.tool_result_chars)
        if previous is not None and utf8_len(previous) > self._budget() // 3:
            # One that would crowd out the span in every call is summarised as its oldest part.
            blocks.insert(0, f"[previous summary]: {previous}")
            previous = None
        calls = count(1)

        def call(instruction: str, body: str, previous: str | None, total: int) -> str:
            if on_progress is not None:
                on_progress(next(calls), total)
            messages = [Message(ROLE_SYSTEM, self.system_prompt)]
            messages.append(Message(ROLE_USER, self._prompt(instruction, body, previous, focus)))
            reply, _usage = self.summarizer.generate(messages, [])
            return (reply.content or "").strip()

        body = "\n\n".join(blocks)
        single = _FULL if previous is None else _UPDATE
        if utf8_len(body) <= self._room(single, previous, focus):
            return call(single, body, previous, 1)
        chunks = _pack(blocks, self._room(_PART.format(index=99, count=99), None, focus))
        total = len(chunks) + 1  # + the final merge; grows if the merge is hierarchical
        items = []
        for i, chunk in enumerate(chunks, 1):
            items.append(call(_PART.format(index=i, count=len(chunks)), chunk, None, total))
            if not items[-1]:
                raise ValueError(f"the summariser returned an empty summary for part {i}")
        # The part summaries merged in one call, or level by level while they do not fit.
        # Each is cut to half the room (64: the tags and separators), so every group holds
        # two or more and each level at least halves the count.
        merge = _MERGE if previous is None else _UPDATE
        cap = self._room(merge, previous, focus)
        half = max(1, cap // 2 - 64)
        while True:
            labelled = [
                f"<part-summary>\n{_split_bytes(p, half)[0]}\n</part-summary>" for p in items
            ]
            body = "\n\n".join(labelled)
            if utf8_len(body) <= cap or len(labelled) == 1:
                return call(merge, body, previous, total)
            groups = _pack(labelled, cap)
            total += len(groups)
            items = [m for m in (call(_MERGE, g, None, total) for g in groups) if m]
            if not items:
                raise ValueError("the summariser returned empty merged summaries")


def summary_estimate(span_tokens: int) -> int:
    """The tokens a summary of ``span_tokens`` is assumed to take before the model is asked."""
    share = span_tokens // SUMMARY_ESTIMATE_RATIO
    return min(SUMMARY_ESTIMATE_CAP, max(SUMMARY_ESTIMATE_FLOOR, share))


def clipped(text: str, budget_tokens: int | None) -> str:
    """``text`` cut at a line boundary to ``budget_tokens``, with a note saying so. Unchanged
    when it fits, or the budget cannot hold the note twice (then no summary fits, and
    cutting it to nothing would only lose it)."""
    room = sys.maxsize if budget_tokens is None else budget_tokens * BYTES_PER_TOKEN
    if utf8_len(text) <= room or room < 2 * utf8_len(CLIPPED_NOTE):
        return text
    room -= utf8_len(CLIPPED_NOTE) + 1
    kept: list[str] = []
    for line in text.splitlines():
        if utf8_len(line) + 1 > room:
            break
        kept.append(line)
        room -= utf8_len(line) + 1
    if not kept:  # a first line longer than the budget: its start
        kept = [text.encode()[: max(0, room)].decode(errors="ignore")]
    return "\n".join([*kept, CLIPPED_NOTE])


def marker_summarizer(summarizer: Summarizer, *, window: int | None = None) -> SpanSummarizer:
    """A SpanSummarizer that asks for the marker format (tool results cut to 200)."""
    return SpanSummarizer(
        summarizer,
        window=window,
        system_prompt=STRUCTURED_COMPRESSION_PROMPT,
        template=MARKER_TEMPLATE,
        tool_result_chars=TOOL_CONTENT_CHARS,
    )


def structured_summary(
    span: SpanSummarizer,
    msgs: Sequence[Message],
    *,
    fingerprint_from: Sequence[Message] | None = None,
    on_progress: ProgressCallback | None = None,
    preserved_budget: int | None = None,
    instructions: str | None = None,
    text_budget: int | None = None,
) -> tuple[str, list[str]]:
    """``span.summarize``, ``clipped`` to ``text_budget``, then the fingerprint repair within
    ``preserved_budget``; and the facts it keeps (``keep_facts``). ``fingerprint_from``:
    the original messages of an evicted rendering. Raises SummaryError on an empty reply."""
    fp = extract_fingerprint(fingerprint_from if fingerprint_from is not None else msgs)
    focus = facts_focus(fp, preserved_budget)
    if instructions:  # the user's own focus (/compact <instructions>) comes first
        focus = instructions + (f"\n{focus}" if focus else "")
    text = span.summarize(msgs, focus=focus, on_progress=on_progress).strip()
    if not text:
        raise SummaryError("the summariser returned an empty summary")
    text = clipped(text, text_budget)
    return keep_facts(text, fp, preserved_budget, reply=text)
