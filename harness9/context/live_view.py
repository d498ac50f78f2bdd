"""The view kept between model calls, so building a request reads only what changed.

The stored log is append-only (a new row's id is larger than every earlier one), the only
removal is ``/undo`` popping the newest rows, and a compaction stores a checkpoint, which
replaces the view. So each session's view is kept here, and each model call asks the
store three small questions instead of reading the log: the latest checkpoint's key (the
checkpoint itself, whose summary and recall index grow with the session, is read only when
the key changed: a compaction here or in another process, or one ``/undo`` removed);
whether the newest row the view holds is still stored (``/undo`` removed it); and the rows
after it, which are added. Either of the first two means a rebuild. The result always
equals ``load_view`` on the same store (tests/test_live_view.py). Messages a locked
database holds in memory (``HoldingSession``) carry provisional ids: while any are held,
nothing is kept.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from harness9.context.instructions import with_notes
from harness9.context.tokens import BYTES_PER_TOKEN, message_bytes
from harness9.context.view import ModelView, build_view, shown_message
from harness9.schema import Message
from harness9.store.holding import HoldingSession
from harness9.store.session import CheckpointedSession


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
        """``system`` with the view's pins and kept instructions, without reading them again."""
        return with_notes(system, self.pins, self.instructions)


@dataclass(slots=True)
class _Kept:
    key: tuple[int, int, float] | None  # the checkpoint's (``latest_checkpoint_key``)
    after: int  # the checkpoint's last message id (0 without one)
    instructions: list[str]  # the checkpoint's kept instructions
    view: ModelView  # with a placeholder for the caller's system message
    nbytes: int  # of the view after its system message

    @property
    def last_id(self) -> int:
        """The newest stored row in the view; the checkpoint's own when none is after it."""
        return self.view.ids[-1] or self.after


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
        with self._lock:
            kept = self._kept.pop(session.session_id, None)
        held = isinstance(session, HoldingSession) and bool(session.held)
        if held or kept is None or kept.key != session.latest_checkpoint_key():
            kept = self._build(session)
        elif kept.view.ids[-1] is not None and session.get_record(kept.last_id) is None:
            kept = self._build(session)  # /undo removed the newest row the view holds
        else:
            self._extend(session, kept)
        if not held:  # held messages carry provisional ids
            with self._lock:
                self._kept[session.session_id] = kept
        pins = session.pins()
        system = with_notes(system, pins, kept.instructions)
        view = ModelView([system, *kept.view.messages[1:]], [None, *kept.view.ids[1:]])
        return MeasuredView(view, message_bytes(system) + kept.nbytes, pins, kept.instructions)

    def _build(self, session: CheckpointedSession) -> _Kept:
        checkpoint = session.latest_checkpoint()
        after = checkpoint.last_message_id if checkpoint is not None else 0
        records = session.get_records(after_id=after)
        self.rebuilds += 1
        self.rows_read += len(records)
        view = build_view(Message("system"), records, checkpoint)
        nbytes = sum(message_bytes(m) for m in view.messages[1:])
        if checkpoint is None:
            return _Kept(None, 0, [], view, nbytes)
        key = (checkpoint.id, checkpoint.last_message_id, checkpoint.created_at)
        return _Kept(key, after, list(checkpoint.instructions), view, nbytes)

    def _extend(self, session: CheckpointedSession, kept: _Kept) -> None:
        # Rows newer than the view's carry no stubs of its checkpoint; an offloaded one
        # carries its link, as build_view shows it.
        records = session.get_records(after_id=kept.last_id)
        self.rows_read += len(records)
        for rec in records:
            msg = shown_message(rec)
            kept.view.messages.append(msg)
            kept.view.ids.append(rec.id)
            kept.nbytes += message_bytes(msg)
