"""The stand-ins for a missing or large tool result or call argument, and the repair.

A kept stub is data (``Stub``, in the checkpoint) rendered only by ``render_stub``; a
``RenderedMessage`` carries that data, so later readers read the data, not the text.
Why and when the repair runs: docs/architecture.md, 'Stand-ins, the repair and the
preserved facts'.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from harness9.schema import (
    ROLE_ASSISTANT,
    ROLE_TOOL,
    ROLE_USER,
    SUMMARY_PREFIX,
    TRUNCATED_STUB,
    Message,
    ToolCall,
)
from harness9.store.session import (
    STUB_ARGUMENTS,
    STUB_EVICTED,
    STUB_STUBBED,
    STUB_VERBATIM,
    OffloadLink,
    Stub,
    message_handle,
)
from harness9.tokens import BYTES_PER_TOKEN, utf8_len
from harness9.tool_output import (
    STUBBED_PREFIX,
    argument_stub,
    arguments_of,
    long_arguments,
    recallable,
)

# -- stand-ins for tool results ------------------------------------------------------------

EVICTED_PREFIX = "[evicted] "
# What a handle adds to a stub, for size estimates made before ids are known.
HANDLE_ALLOWANCE_BYTES = len(recallable("", message_handle(1_000_000)))
_message_fields = attrgetter("role", "content", "tool_calls", "tool_call_id")


def is_stub(msg: Message) -> bool:
    """Any stand-in for a tool result; an offloaded result is a result, not a stand-in."""
    stub = stub_of(msg)
    return stub is not None and not (stub.kind == STUB_VERBATIM and stub.offload_id)


def is_offloaded(msg: Message) -> bool:
    """A tool result shown as its offload's summary."""
    stub = stub_of(msg)
    return stub is not None and stub.kind == STUB_VERBATIM and bool(stub.offload_id)


def awaits_handle(msg: Message) -> bool:
    """A stub made in this compaction: the checkpoint adds its recall handle."""
    stub = stub_of(msg)
    if stub is None or stub.kind not in (STUB_STUBBED, STUB_EVICTED) or stub.offload_id:
        return False
    return isinstance(msg, RenderedMessage) and msg.message_id is None


def with_handle(content: str, message_id: int) -> str:
    """``content`` made recallable by its message's handle."""
    return recallable(content, message_handle(message_id))


def render_stub(stub: Stub, message_id: int | None = None) -> str:
    """The text the model sees for ``stub``, named by its offload's id, else its message's."""
    if stub.kind == STUB_STUBBED:
        text = f"{STUBBED_PREFIX}{stub.tokens} tokens stubbed"
    elif stub.kind == STUB_EVICTED:
        text = f"{EVICTED_PREFIX}{stub.text} ({stub.tokens} tokens evicted)"
    else:
        return stub.text
    handle = stub.offload_id or (message_handle(message_id) if message_id else "")
    return recallable(text, handle) if handle else text


@dataclass(slots=True, eq=False)
class RenderedMessage(Message):
    """A message whose text harness9 rendered from its ``stub`` or its ``summary`` prose
    (without the sections the view adds) and the ``facts`` that summary keeps (None: its
    checkpoint predates kept facts). Equal to any Message with the same fields: the data
    is where the text came from, not what the model sees."""

    stub: Stub | None = None
    summary: str | None = None
    message_id: int | None = None  # the stored message whose handle the stub names, if any
    facts: list[str] | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return _message_fields(self) == _message_fields(other)


def stub_message(stub: Stub, original: Message, message_id: int | None = None) -> RenderedMessage:
    """``original`` shown as ``stub`` (its role and ids kept)."""
    text, calls = render_stub(stub, message_id), original.tool_calls
    if stub.kind == STUB_ARGUMENTS:
        handle = message_handle(message_id) if message_id else ""
        text, calls = original.content, _stubbed_calls(calls, stub.text, handle)
    return RenderedMessage(
        original.role, text, calls, original.tool_call_id, stub, message_id=message_id
    )


def offloaded_message(msg: Message, link: OffloadLink) -> RenderedMessage:
    """A logged tool result that is its offload's summary, as a verbatim stub naming it."""
    return stub_message(Stub(STUB_VERBATIM, link.tokens, link.offload_id, msg.content), msg)


def stub_of(msg: Message) -> Stub | None:
    return msg.stub if isinstance(msg, RenderedMessage) else None


def offload_source(msg: Message) -> tuple[str, int]:
    """(offload id or "", size in tokens): where a tool result's full text is."""
    stub = stub_of(msg)
    if stub is not None and (stub.kind != STUB_VERBATIM or stub.offload_id):
        return stub.offload_id, stub.tokens
    return "", len(msg.content.encode()) // BYTES_PER_TOKEN


def stub_for(msg: Message) -> RenderedMessage:
    """A tool result shown by size and handle only (the view adds a ``msg_`` handle)."""
    offload_id, tokens = offload_source(msg)
    return stub_message(Stub(STUB_STUBBED, tokens, offload_id), msg)


def evicted_stub(summary: str, tokens: int) -> Stub:
    """The eviction stub of a result of ``tokens`` tokens: its rule summary and facts."""
    return Stub(STUB_EVICTED, tokens, text=summary)


def summary_message(
    summary: str, text: str | None = None, facts: list[str] | None = None
) -> RenderedMessage:
    """The message in place of a folded head: ``summary``, or the ``text`` the view renders,
    carrying the ``facts`` the summary keeps."""
    shown = SUMMARY_PREFIX + (summary if text is None else text)
    return RenderedMessage(ROLE_USER, shown, summary=summary, facts=facts)


def is_summary(msg: Message) -> bool:
    """Made by ``summary_message``, carrying its summary: text that only looks like one is not."""
    return isinstance(msg, RenderedMessage) and msg.summary is not None


def facts_of(msg: Message) -> list[str] | None:
    """The facts a summary message's checkpoint keeps (None: kept before facts were)."""
    return msg.facts if isinstance(msg, RenderedMessage) and msg.summary is not None else None


def summary_of(msg: Message) -> str:
    """The summary proper of a summary message (``is_summary``), for a summariser to merge."""
    if isinstance(msg, RenderedMessage) and msg.summary is not None:
        return msg.summary
    return msg.content


# -- calls' long arguments ------------------------------------------------------------------


def _stubbed_calls(calls: list[ToolCall], names: str, handle: str) -> list[ToolCall]:
    """``calls`` with the arguments ``names`` lists (``<index>:<name>`` lines) stubbed."""
    wanted: dict[int, list[str]] = {}
    for line in names.splitlines():
        index, _, name = line.partition(":")
        if index.isdigit() and name:
            wanted.setdefault(int(index), []).append(name)
    out = list(calls)
    for i, keys in wanted.items():
        args = arguments_of(calls[i].arguments) if i < len(calls) else None
        if args is None:
            continue
        for key in keys:
            if isinstance(args.get(key), str):
                args[key] = argument_stub(key, args[key], handle)
        out[i] = ToolCall(calls[i].id, calls[i].name, json.dumps(args, ensure_ascii=False))
    return out


def stub_arguments(msg: Message) -> Message:
    """``msg`` with its calls' long arguments stubbed, or ``msg`` when there are none."""
    if not msg.tool_calls or stub_of(msg) is not None:
        return msg
    names: list[str] = []
    tokens = 0
    for i, call in enumerate(msg.tool_calls):
        for key, value in long_arguments(call.arguments).items():
            names.append(f"{i}:{key}")
            tokens += utf8_len(value) // BYTES_PER_TOKEN
    if not names:
        return msg
    return stub_message(Stub(STUB_ARGUMENTS, tokens, text="\n".join(names)), msg)


# -- the repair ----------------------------------------------------------------------------


def match_tool_results(msgs: Sequence[Message]) -> list[int]:
    """One slot per tool call, in history order: the index of the result answering it, or -1.
    A result answers the newest unanswered call with its id (local models reuse ``call_0``)."""
    # Plain ints, no per-message containers: on long histories the garbage collector's
    # full passes over them would make the run time grow faster than linearly.
    result: list[int] = []
    open_calls: dict[str | None, int] = {}  # id -> slot of the newest unanswered call
    repeats: dict[int, int] = {}  # slot -> the next call of its message with the same id
    for i, msg in enumerate(msgs):
        role = msg.role
        if role == ROLE_TOOL:
            slot = open_calls.pop(msg.tool_call_id, -1)
            if slot >= 0:
                result[slot] = i
                if slot in repeats:
                    open_calls[msg.tool_call_id] = repeats[slot]
        elif role == ROLE_ASSISTANT and msg.tool_calls:
            calls = msg.tool_calls
            base = len(result)
            if len(calls) == 1:  # the common case, without a temporary list
                open_calls[calls[0].id] = base
                result.append(-1)
                continue
            result += [-1] * len(calls)
            # Backwards, so a repeated id is answered first by its first call; this
            # message's calls replace older unanswered ones with their ids.
            for pos in range(len(calls) - 1, -1, -1):
                call_id = calls[pos].id
                if open_calls.get(call_id, -1) >= base:
                    repeats[base + pos] = open_calls[call_id]
                open_calls[call_id] = base + pos
    return result


def repair_orphaned_tool_pairs(
    msgs: Sequence[Message], *, stub: str = TRUNCATED_STUB
) -> list[Message]:
    """A new list in which every call is answered in its block, in call order: a result
    without an open call is dropped, a late one moved up, a missing one stubbed with
    ``stub``. Idempotent; the input and its messages are not modified."""
    # The stand-in's text is its data: a stub, as every reader of the view can tell.
    data = Stub(STUB_VERBATIM, text=stub)
    result = match_tool_results(msgs)
    s = 0  # the slot of the next call, in the order match_tool_results numbers them
    out: list[Message] = []
    append = out.append
    for msg in msgs:
        role = msg.role
        if role == ROLE_TOOL:
            continue  # every kept result is emitted inside its call's block
        append(msg)
        if role == ROLE_ASSISTANT and msg.tool_calls:
            for tc in msg.tool_calls:
                r = result[s]
                append(msgs[r] if r >= 0 else RenderedMessage(ROLE_TOOL, stub, [], tc.id, data))
                s += 1
    return out


def is_valid_tool_sequence(msgs: Sequence[Message]) -> bool:
    """Every call answered exactly once, immediately (in any order within its block, as the
    APIs accept), and no tool message elsewhere."""
    result = match_tool_results(msgs)
    s = results = 0
    for i, msg in enumerate(msgs):
        if msg.role == ROLE_TOOL:
            results += 1
        elif msg.role == ROLE_ASSISTANT and msg.tool_calls:
            # Distinct results (the matching binds each once) all within the block.
            block = result[s : s + len(msg.tool_calls)]
            if min(block) <= i or max(block) > i + len(block):
                return False
            s += len(block)
    return s == results
