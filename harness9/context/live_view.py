"""The view kept between model calls, so building a request reads only what changed.

The stored log is append-only: a new row's id is larger than every id before it
(ids are handed out in commit order and never reused), and the only removal is
``/undo`` popping the newest rows. A compaction stores a checkpoint, which replaces
the view. So a session's view (``view.load_view``) is kept here with its size, and
each model call asks the store three small questions instead of reading the log:

- the latest checkpoint's key (its id, last row and time; its summary and recall index,
  which grow with the session, are read only when the key changed): a different one (a
  compaction here or in another process, or one ``/undo`` removed with the rows it
  covered) means the view is rebuilt;
- whether the newest row the view holds is still stored: ``/undo`` removed it, so
  the view is rebuilt;
- the rows after it (appended by this process or another one): added to the view.

The result always equals ``load_view`` on the same store (tests/test_live_view.py
checks it after every kind of event). Messages a locked database holds in memory
(``HoldingSession``) carry provisional ids, so while any are held nothing is kept.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from harness9.context.instructions import with_notes
from harness9.context.tokens import BYTES_PER_TOKEN, message_bytes
from harness9.context.view import ModelView, build_view
from harness9.schema import Message
from harness9.store.holding import HoldingSession
from harness9.store.session import Checkpoint, CheckpointedSession

__all__ = ["LiveViews", "MeasuredView"]

_CheckpointKey = tuple[int, int, float] | None


@dataclass(slots=True)
class MeasuredView:
    """A view and its byte estimate (``estimate_tokens(view.messages) == tokens``)."""

    view: ModelView
    nbytes: int
    # What the system message carries after the prompt (``with_notes``), as read for it.
    pins: list[str] = field(default_factory=list)
    instructions: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.nbytes // BYTES_PER_TOKEN

    def noted(self, system: Message) -> Message:
        """``system`` with the same pins and kept instructions as the view's system message,
        without reading them again."""
        return with_notes(system, self.pins, self.instructions)


@dataclass(slots=True)
class _Kept:
    checkpoint: _CheckpointKey
    instructions: list[str]  # the checkpoint's kept instructions
    messages: list[Message]  # the view after its system message
    ids: list[int | None]
    nbytes: int  # of ``messages``
    # The newest stored row in the view; the checkpoint's own when none is after it.
    last_id: int
    anchored: bool  # last_id is a row of the view (so /undo of it shows)


def _key(cp: Checkpoint | None) -> _CheckpointKey:
    return None if cp is None else (cp.id, cp.last_message_id, cp.created_at)


def _latest_key(session: CheckpointedSession) -> tuple[_CheckpointKey, Checkpoint | None, bool]:
    """(the latest checkpoint's key, the checkpoint when it had to be read for it, whether
    it was). The stores answer the key alone (``latest_checkpoint_key``); a session that
    cannot (a test's double) has its checkpoint read."""
    inner = session.inner if isinstance(session, HoldingSession) else session
    probe = getattr(inner, "latest_checkpoint_key", None)
    if probe is not None:
        return probe(), None, False
    checkpoint = session.latest_checkpoint()
    return _key(checkpoint), checkpoint, True


class LiveViews:
    """Each session's view between calls; ``load`` is ``load_view`` reading only new rows."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, _Kept] = {}
        self.rebuilds = 0  # views built from the whole log after the checkpoint
        self.rows_read = 0  # rows read from the store, in all

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._kept.pop(session_id, None)

    def load(self, session: CheckpointedSession, system: Message) -> MeasuredView:
        """The view the next request starts from (``system`` first), and its size."""
        sid = session.session_id
        with self._lock:
            kept = self._kept.pop(sid, None)
        key, checkpoint, read = _latest_key(session)
        held = isinstance(session, HoldingSession) and bool(session.held)
        if held or kept is None or not self._still_valid(session, kept, key):
            if not read:
                checkpoint = session.latest_checkpoint()
            # Held messages carry provisional ids: build from scratch, keep nothing.
            fresh = self._build(session, checkpoint)
            kept = None if held else fresh
        else:
            fresh = kept
            self._extend(session, kept)
        if kept is not None:
            with self._lock:
                self._kept[sid] = kept
        # The session's pins and the checkpoint's kept instructions follow the prompt.
        pins = session.pins()
        system = with_notes(system, pins, fresh.instructions)
        nbytes = message_bytes(system) + fresh.nbytes
        view = ModelView([system, *fresh.messages], [None, *fresh.ids])
        return MeasuredView(view, nbytes, pins, fresh.instructions)

    # -- internals -------------------------------------------------------------------------

    def _still_valid(self, session: CheckpointedSession, kept: _Kept, key: _CheckpointKey) -> bool:
        if key != kept.checkpoint:
            return False
        return not kept.anchored or session.get_record(kept.last_id) is not None

    def _build(self, session: CheckpointedSession, checkpoint: Checkpoint | None) -> _Kept:
        after = checkpoint.last_message_id if checkpoint is not None else 0
        records = session.get_records(after_id=after)
        self.rebuilds += 1
        self.rows_read += len(records)
        # The system message is the caller's; a placeholder holds its place here.
        view = build_view(Message("system"), records, checkpoint)
        messages, ids = view.messages[1:], view.ids[1:]
        last_id = records[-1].id if records else after
        nbytes = sum(message_bytes(m) for m in messages)
        instructions = list(checkpoint.instructions) if checkpoint is not None else []
        return _Kept(_key(checkpoint), instructions, messages, ids, nbytes, last_id, bool(records))

    def _extend(self, session: CheckpointedSession, kept: _Kept) -> None:
        records = session.get_records(after_id=kept.last_id)
        if not records:
            return
        self.rows_read += len(records)
        # Rows newer than the checkpoint's own rows carry no stubs of it: plain messages.
        new = build_view(Message("system"), records, None)
        for msg, mid in zip(new.messages[1:], new.ids[1:], strict=True):
            kept.messages.append(msg)
            kept.ids.append(mid)
            kept.nbytes += message_bytes(msg)
        kept.last_id = records[-1].id
        kept.anchored = True
