"""A session whose saves survive a locked database: what a chat writes its replies through.

A chat saves after every reply and tool result. When another process holds the
write lock (a long clean-up, a hand-run ``sqlite3``, a backup), ``add_messages``
first retries with back-off for SAVE_RETRY_S, far longer than any bounded step of
the store's own long writes. If the lock is still held it gives up *without
losing anything*: the messages are held in memory, ``on_held`` is told once (one
line for the user), reads include them (so the model still sees the reply), and
the next write that gets the lock saves them first, in order.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence

from harness9.schema import Message, TodoItem
from harness9.store.search import SearchHit
from harness9.store.session import (
    ChatSession,
    Checkpoint,
    OffloadLink,
    SessionNotFoundError,
    SessionSettings,
    StoreBusyError,
    StoredMessage,
    StoreError,
    move_checkpoint_ids,
    offload_links,
)

SAVE_RETRY_S = 15.0  # retries after the first attempt's own wait for the lock
_BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0)


def held_notice(count: int) -> str:
    what = "1 message" if count == 1 else f"{count} messages"
    return (
        f"the session database is locked by another process: {what} kept in memory, "
        "saved with the next write"
    )


class HoldingSession:
    """``inner`` (a ChatSession) with lock-tolerant ``add_messages``.

    ``on_held(text)`` is called with one line when messages start being held, and
    ``on_saved(text)`` when held messages have finally been saved.
    """

    def __init__(
        self,
        inner: ChatSession,
        *,
        on_held: Callable[[str], None] | None = None,
        on_saved: Callable[[str], None] | None = None,
        retry_s: float = SAVE_RETRY_S,
    ) -> None:
        self.inner = inner
        self._on_held = on_held
        self._on_saved = on_saved
        self._retry_s = retry_s
        self._held: list[StoredMessage] = []
        self._told = False  # whether on_held was called for what is held now

    @property
    def session_id(self) -> str:
        return self.inner.session_id

    @property
    def held(self) -> list[Message]:
        """Messages not saved yet, oldest first."""
        return [r.message for r in self._held]

    def __repr__(self) -> str:
        return f"HoldingSession({self.inner!r}, held={len(self._held)})"

    # -- writes ------------------------------------------------------------------------

    def add_messages(
        self, msgs: list[Message], offloads: Sequence[OffloadLink | None] = ()
    ) -> list[int]:
        """The new messages' row ids, or [] while they are held in memory."""
        if not msgs:
            return []
        earlier = len(self._held)
        now = time.time()
        links = offload_links(msgs, offloads)
        self._held.extend(StoredMessage(0, m, now, o) for m, o in zip(msgs, links, strict=True))
        # Once the user knows the database is stuck, one attempt per save (itself a wait of
        # the Manager's lock_wait_s) is enough: a turn must not stall for the whole back-off
        # at every message.
        ids = self._flush(patient=not self._told, earlier=earlier)
        return ids[-len(msgs) :] if ids else []

    def flush(self, *, patient: bool = True) -> bool:
        """Save the held messages now; True when nothing is held any more."""
        if self._held:
            self._flush(patient=patient, earlier=len(self._held))
        return not self._held

    def _flush(self, *, patient: bool, earlier: int) -> list[int]:
        """Save everything held; ``earlier`` of them were held before this write.

        Returns the saved rows' ids, or [] when the messages stay held.
        """
        deadline = time.monotonic() + (self._retry_s if patient else 0.0)
        attempt = 0
        while True:
            try:
                held = self._held
                ids = self.inner.add_messages([r.message for r in held], [r.offload for r in held])
                break
            except StoreBusyError:
                if time.monotonic() >= deadline:
                    if not self._told and self._on_held is not None:
                        self._on_held(held_notice(len(self._held)))
                    self._told = True  # once per episode: the count may grow silently
                    return []
                pause = _BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)]
                time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
                attempt += 1
            except SessionNotFoundError:
                # Another process deleted the session (`sessions delete`): nothing held for
                # it can ever be saved. Holding it would fail every later write of the chat,
                # and its exit, with this same error.
                self._held = []
                self._told = False
                raise
            except StoreError:
                # Not a lock that passes by itself (a full disk, a damaged file): this
                # write fails here, with the store's one-line error, exactly as it would
                # without holding. Keeping it would only fail again at every later write
                # and once more at exit, repeating an error the user has already seen.
                # What a lock held back before this write stays held.
                del self._held[earlier:]
                raise
        self._held = []
        if self._told and self._on_saved is not None:
            what = "1 held message" if earlier == 1 else f"{earlier} held messages"
            self._on_saved(f"saved the {what} to the session database")
        self._told = False
        return ids

    def _write(self) -> None:
        """Before any other write: the held messages come first, or the write fails."""
        if self._held:
            self._flush(patient=True, earlier=len(self._held))
            if self._held:
                raise StoreBusyError(held_notice(len(self._held)))

    def pop_message(self) -> Message | None:
        if self._held:
            return self._held.pop().message
        return self.inner.pop_message()

    def clear(self) -> None:
        self._held = []
        self._told = False
        self.inner.clear()

    def save_todos(self, items: list[TodoItem]) -> None:
        self._write()
        self.inner.save_todos(items)

    def add_checkpoint(self, cp: Checkpoint) -> Checkpoint:
        """Save the held messages first; a checkpoint naming one gets its real id."""
        if self._held:
            base = self._last_stored_id()
            held = [r.message for r in self._held]
            self._write()
            real = [r.id for r in self.inner.get_records(after_id=base) if r.message in held]

            def moved(mid: int) -> int:
                k = mid - base - 1
                return real[k] if 0 <= k < len(real) else mid

            # The anchor, stubs and recall handles naming held messages follow them.
            cp = move_checkpoint_ids(cp, lambda mid: moved(mid) if mid > base else mid)
        return self.inner.add_checkpoint(cp)

    def _last_stored_id(self) -> int:
        last = self.inner.get_records(limit=1)
        return last[0].id if last else 0

    # -- reads: the stored log, then what is held ------------------------------------------------

    def get_records(self, limit: int = 0, after_id: int = 0) -> list[StoredMessage]:
        stored = self.inner.get_records(limit, after_id)
        if not self._held:
            return stored
        # Provisional ids just above this session's newest stored message: never written;
        # a checkpoint naming one is mapped to the real id when it is saved.
        base = max(stored[-1].id if stored else self._last_stored_id(), after_id)
        extra = [
            StoredMessage(base + k, r.message, r.created_at, r.offload)
            for k, r in enumerate(self._held, start=1)
        ]
        out = stored + extra
        return out[-limit:] if limit > 0 else out

    def get_messages(self, limit: int = 0) -> list[Message]:
        return [r.message for r in self.get_records(limit)]

    def get_todos(self) -> list[TodoItem] | None:
        return self.inner.get_todos()

    def latest_checkpoint(self) -> Checkpoint | None:
        return self.inner.latest_checkpoint()

    def latest_checkpoint_key(self) -> tuple[int, int, float] | None:
        return self.inner.latest_checkpoint_key()

    def get_record(self, message_id: int) -> StoredMessage | None:
        found = self.inner.get_record(message_id)
        if found is not None or not self._held:
            return found
        return next((r for r in self.get_records() if r.id == message_id), None)

    def search(self, query: str, *, limit: int = 10) -> list[SearchHit]:
        return self.inner.search(query, limit=limit)  # held messages are found once saved

    def remember_model(self, settings: SessionSettings) -> None:
        # A locked database: the next chat records it; compact then uses its flags.
        with contextlib.suppress(StoreBusyError):
            self.inner.remember_model(settings)

    def model_settings(self) -> SessionSettings | None:
        return self.inner.model_settings()

    def pins(self) -> list[str]:
        return self.inner.pins()

    def add_pin(self, text: str) -> int:
        return self.inner.add_pin(text)

    def remove_pin(self, number: int) -> str | None:
        return self.inner.remove_pin(number)
