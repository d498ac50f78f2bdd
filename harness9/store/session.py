"""The Session protocol and the records it hands out.

A session is an append-only message log plus a todo list. Compaction never
rewrites the log: it stores a *checkpoint* (the summary of everything up to a
message id), and the view sent to the model is rebuilt from the latest one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeGuard, runtime_checkable

from harness9.errors import HarnessError
from harness9.schema import Message, TodoItem
from harness9.store.search import SearchHit


class SessionNotFoundError(HarnessError):
    """No stored session has this id (malformed ids included)."""

    def __init__(self, session_id: str, detail: str = "") -> None:
        self.session_id = session_id
        msg = f"no session with id {session_id!r}"
        super().__init__(msg + (f" ({detail})" if detail else ""))


# The one session-id rule: a canonical lower-case UUID, the only strings ever used in a path.
_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_session_id(value: object) -> TypeGuard[str]:
    """True for a canonical lower-case UUID: the only strings ever used in a path."""
    return isinstance(value, str) and _UUID_RE.fullmatch(value) is not None


def check_session_id(value: object) -> str:
    """``value`` if it is a session id; else SessionNotFoundError (nothing is looked up)."""
    if not is_session_id(value):
        raise SessionNotFoundError(str(value), "not a session id")
    return value


class StoreError(HarnessError):
    """The database could not be opened or written; the message names the file."""


# The latest time a store accepts: the last second of year 9999, the end of what a
# datetime (and so every renderer) can show. Anything later, earlier than the epoch,
# or not a finite number is a corrupt value, never a time.
MAX_TIMESTAMP = 253402300799.0


def valid_timestamp(value: object) -> bool:
    """True for Unix seconds a datetime can show: a real number from 0 to MAX_TIMESTAMP."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return 0 <= value <= MAX_TIMESTAMP  # NaN fails both comparisons


class StoreBusyError(StoreError):
    """Another process held the write lock for longer than this one would wait.

    Nothing was written; the same write can simply be tried again later.
    """


@dataclass(slots=True)
class SessionInfo:
    id: str
    created_at: float  # Unix seconds
    updated_at: float
    message_count: int
    title: str  # first user message, one line, at most 60 characters
    workdir: str = ""  # the directory chat last ran the session in; "" if never recorded
    parent_id: str = ""  # a sub-agent's session: the session whose `task` call ran it


@dataclass(slots=True, frozen=True)
class SessionSettings:
    """How chat last ran a session: ``--continue``/``--resume`` and ``compact`` reuse it."""

    model: str
    context_window: int  # 0: not recorded
    api_base: str = ""  # "" : the provider's own endpoint
    workdir: str = ""
    # How the server counted the last requests, (estimate, reported input tokens) oldest
    # first (harness9.tokens.ServerCount's samples), learnt from ``model`` at ``api_base``.
    count_samples: tuple[tuple[int, int], ...] = ()


@dataclass(slots=True, frozen=True)
class SubAgentLink:
    """A sub-agent's session and the parent session's `task` call that ran it."""

    session_id: str
    parent_id: str
    tool_call_id: str
    description: str = ""


@dataclass(slots=True)
class UsageTotals:
    """What a session's model calls consumed. ``cost_usd`` covers the priced calls only."""

    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    # Of the above, what compaction summaries consumed (they are billed like any call).
    summary_calls: int = 0
    summary_input_tokens: int = 0
    summary_output_tokens: int = 0
    summary_cost_usd: float = 0.0
    summary_unpriced_calls: int = 0
    # Input tokens written to a prompt cache (part of input_tokens, like cached_tokens).
    cache_write_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def plus(self, other: UsageTotals) -> UsageTotals:
        """Both totals summed, field by field (a session and its sub-agents' sessions)."""
        return UsageTotals(*(getattr(self, f) + getattr(other, f) for f in USAGE_FIELDS))

    @property
    def priced(self) -> bool:
        """True when at least one call had a known price."""
        return self.model_calls > self.unpriced_calls

    @property
    def summaries_priced(self) -> bool:
        """True when at least one summary call had a known price."""
        return self.summary_calls > self.summary_unpriced_calls


USAGE_FIELDS = tuple(UsageTotals.__dataclass_fields__)


# The first characters of the text that stands for an offloaded result in the log,
# ``📂 [offload:<id>] <N> tokens offloaded`` (harness9.context.stubs writes it).
OFFLOAD_MARKER = "📂 [offload:"


@dataclass(slots=True, frozen=True)
class OffloadLink:
    """Where a logged tool result's full output is: the offload its summary stands for."""

    offload_id: str  # ofl_<12 hex>
    tokens: int  # the full output's size


@dataclass(slots=True)
class StoredMessage:
    """A message as stored: its row id orders the log and anchors checkpoints."""

    id: int
    message: Message
    created_at: float
    offload: OffloadLink | None = None  # a tool result stored as its offload's summary


def offload_links(
    msgs: Sequence[Message], offloads: Sequence[OffloadLink | None]
) -> list[OffloadLink | None]:
    """``add_messages``' ``offloads`` as one link (or None) per message."""
    if not offloads:
        return [None] * len(msgs)
    if len(offloads) != len(msgs):
        raise ValueError(f"{len(offloads)} offload links for {len(msgs)} messages")
    return list(offloads)


@dataclass(slots=True)
class CorruptRow:
    """A row that could not be decoded; reported, never fatal."""

    id: int
    reason: str


# A recall handle naming a stored message: ``msg_<row id>`` (``offload_recall`` pages it back).
MESSAGE_HANDLE_PREFIX = "msg_"


def message_handle(message_id: int) -> str:
    return f"{MESSAGE_HANDLE_PREFIX}{message_id}"


def handle_message_id(handle: str) -> int | None:
    """The row id a ``msg_<id>`` handle names, as ``message_handle`` writes it (blanks
    around it allowed: the model types it to ``offload_recall``); None for anything else."""
    text = handle.strip() if isinstance(handle, str) else ""
    digits = text[len(MESSAGE_HANDLE_PREFIX) :]
    if not (text.startswith(MESSAGE_HANDLE_PREFIX) and digits.isascii() and digits.isdigit()):
        return None
    return int(digits) if digits[0] != "0" and len(digits) <= 18 else None


@dataclass(slots=True, frozen=True)
class RecallEntry:
    """A tool result a compaction folded: where its full text is and what it was."""

    handle: str  # msg_<id> (the stored log) or ofl_<12 hex> (the offload store)
    tool: str
    key_argument: str  # the argument that says what the call did, on one line ("" if none)
    tokens: int  # the result's size


# How a kept tool result is shown in the view instead of its full text.
STUB_STUBBED = "stubbed"  # only its size and handle
STUB_EVICTED = "evicted"  # its rule summary and fact lines (``text``)
STUB_VERBATIM = "verbatim"  # ``text`` as it is: a stub stored before stubs were data
# An assistant message whose calls' long arguments are shown by size and handle; ``text``
# names them, one ``<call index>:<argument name>`` a line.
STUB_ARGUMENTS = "arguments"
STUB_KINDS = (STUB_STUBBED, STUB_EVICTED, STUB_VERBATIM, STUB_ARGUMENTS)


@dataclass(slots=True, frozen=True)
class Stub:
    """What the view needs to render a kept message as a stub (context.stubs renders): a tool
    result, or the long arguments of an assistant message's calls."""

    kind: str  # one of STUB_KINDS
    tokens: int = 0  # the full result's size
    offload_id: str = ""  # where the full text was offloaded; "" : the log holds it
    text: str = ""  # evicted: its summary and facts; verbatim: the whole stub


@dataclass(slots=True)
class Checkpoint:
    """One compaction: everything up to ``last_message_id`` is replaced by ``summary``.

    ``summary`` is empty for truncating strategies (budget, window): the folded
    messages are then simply not sent any more. ``last_message_id`` is 0 for a
    compaction that folded nothing and only stubbed old tool results (``stubs``).
    Everything but the summary is data; the view (harness9.context.view) renders it.
    """

    last_message_id: int
    summary: str  # the model's prose, without the sections the view adds
    strategy: str
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    created_at: float = 0.0
    id: int = 0
    # The folded tool results listed with their handles, oldest first, and how many
    # earlier ones no longer fit the index's budget (history_search finds them).
    recall: list[RecallEntry] = field(default_factory=list)
    recall_overflow: int = 0
    # Kept messages the view shows as stubs, by message id (the log is never rewritten).
    stubs: dict[int, Stub] = field(default_factory=dict)
    # The todo list as it was at the compaction, shown after the index.
    state: list[TodoItem] = field(default_factory=list)
    # The user's messages this and earlier compactions folded, verbatim, oldest first
    # (within a budget, newest kept): the view repeats them as earlier instructions.
    instructions: list[str] = field(default_factory=list)
    # The facts the summary keeps, as data ("file: src/a.py", "error: …"; kinds as the
    # fingerprint's, harness9.context.facts), ranked first to last: the next compaction
    # reads them here, never from the summary's text. None: stored before they were kept
    # (that summary's facts are read from its text); [] for a summary keeping none.
    facts: list[str] | None = None

    @property
    def has_details(self) -> bool:
        """True when anything beyond the summary row is set (recall, stubs, state)."""
        return bool(self.recall or self.recall_overflow or self.stubs or self.state)


def checkpoint_message_ids(cp: Checkpoint) -> set[int]:
    """The message ids ``cp`` names as data: its anchor, its stubs, its ``msg_`` handles."""
    ids = {cp.last_message_id, *cp.stubs}
    ids.update(i for e in cp.recall if (i := handle_message_id(e.handle)) is not None)
    ids.discard(0)
    return ids


def move_checkpoint_ids(cp: Checkpoint, new_id: Callable[[int], int | None]) -> Checkpoint:
    """``cp`` with every message id its data names moved by ``new_id`` (a fork, an import).

    ``new_id`` returns None for a message not copied: its stub goes, a recall handle to
    it is left as written, an anchor on it becomes 0. The summary (prose) is not touched.
    """

    def handle(entry: RecallEntry) -> RecallEntry:
        old = handle_message_id(entry.handle)
        moved = new_id(old) if old is not None else None
        return entry if moved is None else replace(entry, handle=message_handle(moved))

    stubs = {m: s for k, s in cp.stubs.items() if (m := new_id(k)) is not None}
    last = (new_id(cp.last_message_id) or 0) if cp.last_message_id else 0
    return replace(cp, last_message_id=last, stubs=stubs, recall=[handle(e) for e in cp.recall])


@dataclass(slots=True, frozen=True)
class ForkOrigin:
    """Where a fork came from: the origin's id and the message number it was forked at
    (as ``sessions show`` numbers the origin's messages). The origin may since be gone."""

    session_id: str
    message: int


@dataclass(slots=True)
class Lineage:
    """A session's place in its tree, and its pins (``sessions show``)."""

    origin: ForkOrigin | None
    forks: list[tuple[str, int]]  # (fork id, the message number it was forked at)
    pins: list[str]
    origin_deleted: bool = False  # the origin no longer exists (its fork keeps the messages)


@runtime_checkable
class Session(Protocol):
    @property
    def session_id(self) -> str: ...

    def get_messages(self, limit: int = 0) -> list[Message]:
        """All messages oldest first (limit=0), or the newest ``limit`` oldest first."""
        ...

    def add_messages(
        self, msgs: list[Message], offloads: Sequence[OffloadLink | None] = ()
    ) -> list[int]:
        """Append in one transaction (all or nothing); return the new ids, in order.

        ``offloads``: each message's offload link, in order (``()``: none is offloaded).
        """
        ...

    def pop_message(self) -> Message | None:
        """Delete and return the newest message; None when there is none."""
        ...

    def clear(self) -> None: ...

    def get_todos(self) -> list[TodoItem] | None:
        """The saved todo list, or None when none was ever saved (or it is empty)."""
        ...

    def save_todos(self, items: list[TodoItem]) -> None:
        """Replace the todo list atomically."""
        ...


@runtime_checkable
class CheckpointedSession(Session, Protocol):
    """A session that also stores message ids and compaction checkpoints: what the
    context (view, policy) and the tools read and write."""

    def get_records(self, limit: int = 0, after_id: int = 0) -> list[StoredMessage]:
        """Messages with their ids, oldest first; only ids > after_id."""
        ...

    def get_record(self, message_id: int) -> StoredMessage | None:
        """The stored message with this id if it belongs to this session, else None."""
        ...

    def add_checkpoint(self, cp: Checkpoint) -> Checkpoint: ...

    def latest_checkpoint(self) -> Checkpoint | None: ...

    def latest_checkpoint_key(self) -> tuple[int, int, float] | None:
        """The latest checkpoint's (id, last_message_id, created_at), read without the rest."""
        ...

    def pins(self) -> list[str]:
        """The session's pinned notes, in the order pinned (every request shows them)."""
        ...

    def search(self, query: str, *, limit: int = 10) -> list[SearchHit]:
        """This session's messages matching ``query`` (words ANDed), best match first."""
        ...


class PinBoard(Protocol):
    """Pinning and unpinning notes (the chat's /pin and /unpin); ``pins`` reads them."""

    def add_pin(self, text: str) -> int:
        """Pin ``text``; return how many pins there are now (its number)."""
        ...

    def remove_pin(self, number: int) -> str | None:
        """Unpin the ``number``-th pin (1-based, as ``pins`` orders them); its text, or
        None when there is no such pin."""
        ...


class RememberedSettings(Protocol):
    """How chat last ran a session: the engine records it, ``--continue``/``--resume``
    and ``compact`` read it back."""

    def remember_model(self, settings: SessionSettings) -> None:
        """Record the model, window, API base and workdir the session is used with."""
        ...

    def model_settings(self) -> SessionSettings | None:
        """What ``remember_model`` last recorded; None when never."""
        ...


@runtime_checkable
class ChatSession(CheckpointedSession, PinBoard, RememberedSettings, Protocol):
    """What a chat runs on: the engine holds one (harness9.store.holding wraps it)."""
