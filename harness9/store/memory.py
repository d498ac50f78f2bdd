"""MemorySession: the Session protocol over plain lists, for tests and throwaway runs.

It behaves like SQLiteSession in everything observable (increasing ids that are
never reused, copies in and out, checkpoints dropped by pop/clear), so tests
can run the same specification against both.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace

from harness9.schema import Message, TodoItem, ToolCall, result_metadata
from harness9.store.search import SearchHit, SearchQueryError
from harness9.store.session import (
    Checkpoint,
    CorruptRow,
    OffloadLink,
    SessionSettings,
    StoredMessage,
    offload_links,
)


def _copy(m: Message) -> Message:
    return Message(
        m.role,
        m.content,
        [ToolCall(c.id, c.name, c.arguments) for c in m.tool_calls],
        m.tool_call_id,
        metadata=None if m.metadata is None else result_metadata(m.metadata),
    )


def _copy_record(r: StoredMessage) -> StoredMessage:
    return StoredMessage(r.id, _copy(r.message), r.created_at, r.offload)


class MemorySession:
    def __init__(self, session_id: str | None = None) -> None:
        self._id = session_id or str(uuid.uuid4())
        self._lock = threading.RLock()
        self._records: list[StoredMessage] = []
        self._todos: list[TodoItem] = []
        self._checkpoints: list[Checkpoint] = []
        self._next_id = 1
        self._next_checkpoint_id = 1
        self.corrupt_rows: list[CorruptRow] = []  # always empty: nothing here can be corrupt
        self._model: SessionSettings | None = None
        self._pins: list[str] = []

    @property
    def session_id(self) -> str:
        return self._id

    def __repr__(self) -> str:
        return f"MemorySession({self._id!r})"

    def get_messages(self, limit: int = 0) -> list[Message]:
        return [r.message for r in self.get_records(limit)]

    def get_records(self, limit: int = 0, after_id: int = 0) -> list[StoredMessage]:
        with self._lock:
            recs = [r for r in self._records if r.id > after_id]
            if limit > 0:
                recs = recs[-limit:]
            return [_copy_record(r) for r in recs]

    def add_messages(
        self, msgs: list[Message], offloads: Sequence[OffloadLink | None] = ()
    ) -> list[int]:
        now = time.time()
        copies = [_copy(m) for m in msgs]  # before any mutation: a bad message changes nothing
        links = offload_links(msgs, offloads)
        with self._lock:
            ids = list(range(self._next_id, self._next_id + len(copies)))
            self._records.extend(
                StoredMessage(i, m, now, o) for i, m, o in zip(ids, copies, links, strict=True)
            )
            self._next_id += len(copies)
            return ids

    def pop_message(self) -> Message | None:
        with self._lock:
            if not self._records:
                return None
            rec = self._records.pop()
            self._checkpoints = [c for c in self._checkpoints if c.last_message_id < rec.id]
            return rec.message

    def clear(self) -> None:
        """Delete every message and checkpoint; the todo list stays (it is not history)."""
        with self._lock:
            self._records = []
            self._checkpoints = []

    def get_todos(self) -> list[TodoItem] | None:
        with self._lock:
            return [TodoItem(t.content, t.status) for t in self._todos] or None

    def save_todos(self, items: list[TodoItem]) -> None:
        copies = [TodoItem(t.content, t.status) for t in items]
        with self._lock:
            self._todos = copies

    def add_checkpoint(self, cp: Checkpoint) -> Checkpoint:
        with self._lock:
            if cp.last_message_id != 0 and not any(
                r.id == cp.last_message_id for r in self._records
            ):
                raise ValueError(
                    f"checkpoint names message {cp.last_message_id}, not a message of this session"
                )
            stored = replace(
                cp, id=self._next_checkpoint_id, created_at=cp.created_at or time.time()
            )
            self._next_checkpoint_id += 1
            self._checkpoints.append(stored)
            return replace(stored)

    def latest_checkpoint(self) -> Checkpoint | None:
        with self._lock:
            return replace(self._checkpoints[-1]) if self._checkpoints else None

    def latest_checkpoint_key(self) -> tuple[int, int, float] | None:
        """(id, last_message_id, created_at) of the latest checkpoint (see SqlSessionBase)."""
        with self._lock:
            cp = self._checkpoints[-1] if self._checkpoints else None
        return None if cp is None else (cp.id, cp.last_message_id, cp.created_at)

    def get_record(self, message_id: int) -> StoredMessage | None:
        with self._lock:
            for r in self._records:
                if r.id == message_id:
                    return _copy_record(r)
        return None

    def search(self, query: str, *, limit: int = 10) -> list[SearchHit]:
        """Messages holding every word of ``query`` (case-insensitive), newest first."""
        words = [w for w in re.findall(r"\w+", query.lower()) if w]
        if not words:
            raise SearchQueryError(f"search query has no words to search for: {query.strip()!r}")
        hits: list[SearchHit] = []
        with self._lock:
            for r in reversed(self._records):
                text = r.message.content
                low = text.lower()
                if all(w in low for w in words):
                    at = low.find(words[0])
                    snippet = " ".join(text[max(0, at - 80) : at + 120].split())
                    hits.append(
                        SearchHit(self._id, r.id, r.message.role, r.created_at, "", snippet, 0.0)
                    )
                    if 0 < limit <= len(hits):
                        break
        return hits

    def remember_model(self, settings: SessionSettings) -> None:
        self._model = settings

    def model_settings(self) -> SessionSettings | None:
        return self._model

    def list_checkpoints(self) -> list[Checkpoint]:
        with self._lock:
            return [replace(c) for c in self._checkpoints]

    def pins(self) -> list[str]:
        with self._lock:
            return list(self._pins)

    def add_pin(self, text: str) -> int:
        with self._lock:
            self._pins.append(text)
            return len(self._pins)

    def remove_pin(self, number: int) -> str | None:
        with self._lock:
            if not 1 <= number <= len(self._pins):
                return None
            return self._pins.pop(number - 1)
