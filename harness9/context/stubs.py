"""The one stub vocabulary: every text harness9 puts in place of a tool result.

``[context truncated]`` (a result cut, by repair), ``[interrupted: …]`` (a call that never
got one), ``[stubbed] N tokens stubbed`` (size and recall handle only), ``[evicted] <rule
summary> (N tokens evicted)``, and ``📂 [offload:<id>] …`` (the full text is in the offload
store). A stub of a kept message is data (store.session ``Stub``, kept in the checkpoint);
``render_stub`` is the one place its text is made, and a ``StubMessage`` carries the stub it
renders, so whoever meets it later reads the data, never the text; an ``OffloadedMessage``
carries its stored record's link to the offload its summary stands for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness9.context.tokens import BYTES_PER_TOKEN
from harness9.schema import TRUNCATED_STUB, UNFINISHED_STUB, Message
from harness9.store.session import (
    STUB_EVICTED,
    STUB_STUBBED,
    STUB_VERBATIM,
    OffloadLink,
    Stub,
    message_handle,
)

OFFLOAD_MARKER = "📂 [offload:"
STUBBED_PREFIX = "[stubbed] "
EVICTED_PREFIX = "[evicted] "
_STUB_STARTS = (STUBBED_PREFIX, EVICTED_PREFIX)
_RECALL_CALL = "offload_recall("
# What a handle adds to a stub, for size estimates made before ids are known.
HANDLE_ALLOWANCE_BYTES = len('; offload_recall(id="msg_0000000") for it')


def is_stub(content: str) -> bool:
    """True for any stand-in for a tool result (truncated, interrupted, stubbed, evicted)."""
    return content.startswith(_STUB_STARTS) or content in (TRUNCATED_STUB, UNFINISHED_STUB)


def is_offload_marker(content: str) -> bool:
    return content.startswith(OFFLOAD_MARKER)


def awaits_handle(content: str) -> bool:
    """A stub made in this compaction: the checkpoint adds its recall handle."""
    return content.startswith(_STUB_STARTS) and _RECALL_CALL not in content


def offload_header(offload_id: str, tokens: int) -> str:
    """The first line of an offloaded output (context.offload writes the rest)."""
    return f"{OFFLOAD_MARKER}{offload_id}] {tokens} tokens offloaded"


def _handle_suffix(handle: str) -> str:
    return f'; offload_recall(id="{handle}") for it'


def render_stub(stub: Stub, message_id: int | None = None) -> str:
    """The text the model sees for ``stub``; with ``message_id``, its recall handle too
    (a stub whose full text is offloaded names the offload id instead)."""
    if stub.kind == STUB_STUBBED:
        text = f"{STUBBED_PREFIX}{stub.tokens} tokens stubbed"
        handle = stub.offload_id or (message_handle(message_id) if message_id else "")
        return text + _handle_suffix(handle) if handle else text
    if stub.kind == STUB_EVICTED and stub.offload_id:
        oid = stub.offload_id
        # Starts with the marker: never evicted again, and summarisers keep it whole.
        return (
            f"{OFFLOAD_MARKER}{oid}] {EVICTED_PREFIX}{stub.tokens} tokens evicted\n"
            f'{stub.text}\nuse offload_recall(id="{oid}") for the full content'
        )
    if stub.kind == STUB_EVICTED:
        text = f"{EVICTED_PREFIX}{stub.text} ({stub.tokens} tokens evicted)"
        return with_handle(text, message_id) if message_id else text
    return stub.text


def with_handle(content: str, message_id: int) -> str:
    """A stub made recallable: its handle appended unless it already names one."""
    if _RECALL_CALL in content:
        return content
    return content + _handle_suffix(message_handle(message_id))


@dataclass(slots=True, eq=False)
class RenderedMessage(Message):
    """A message whose text harness9 rendered from data it carries along (subclasses).
    Equal to any Message with the same fields: the data is where the text came from, not
    part of what the model sees (and ``Message.__eq__`` compares classes)."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self.role, self.content, self.tool_calls, self.tool_call_id) == (
            other.role,
            other.content,
            other.tool_calls,
            other.tool_call_id,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, like Message


@dataclass(slots=True, eq=False)
class StubMessage(RenderedMessage):
    """A tool result shown as ``stub``: its content is ``render_stub(stub, message_id)``."""

    stub: Stub = field(default_factory=lambda: Stub(STUB_VERBATIM))


def stub_message(stub: Stub, original: Message, message_id: int | None = None) -> StubMessage:
    """``original`` shown as ``stub`` (its role and ids kept)."""
    text = render_stub(stub, message_id)
    return StubMessage(original.role, text, original.tool_calls, original.tool_call_id, stub)


@dataclass(slots=True, eq=False)
class OffloadedMessage(RenderedMessage):
    """A logged tool result stored as its offload's summary: ``offload`` (the stored
    record's link) says which offload holds the full text, and its size."""

    offload: OffloadLink = field(default_factory=lambda: OffloadLink("", 0))


def offloaded_message(msg: Message, link: OffloadLink) -> OffloadedMessage:
    return OffloadedMessage(msg.role, msg.content, msg.tool_calls, msg.tool_call_id, link)


def offload_source(msg: Message) -> tuple[str, int]:
    """(offload id or "", size in tokens) of a tool result: where its full text is.

    A stub or an offloaded result knows it from its data (an old verbatim stub only
    when it names its offload); anything else is its own size and lives in the log.
    """
    stub = msg.stub if isinstance(msg, StubMessage) else None
    if stub is not None and (stub.kind != STUB_VERBATIM or stub.offload_id):
        return stub.offload_id, stub.tokens
    if isinstance(msg, OffloadedMessage):
        return msg.offload.offload_id, msg.offload.tokens
    return "", len(msg.content.encode()) // BYTES_PER_TOKEN


def stubbed_stub(msg: Message) -> Stub:
    """The size-and-handle stub of a tool result (hybrid's stubbing)."""
    offload_id, tokens = offload_source(msg)
    return Stub(STUB_STUBBED, tokens, offload_id)


def evicted_stub(summary: str, tokens: int, offload_id: str = "") -> Stub:
    """The eviction stub of a result of ``tokens`` tokens: its rule summary and facts."""
    return Stub(STUB_EVICTED, tokens, offload_id, summary)
