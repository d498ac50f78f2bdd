"""Each session's view kept between model calls, so a call reads only the rows added since.

The policy's ``Views`` (harness9.context.view) in the running process: what a view is, and
``measure_view`` that reads one whole, are the context's; keeping them between calls, under
a lock, is an optimisation of this process, as the summaries prepared ahead
(harness9.engine.prepared) are (docs/architecture.md, 'Code layout').
"""

from __future__ import annotations

import threading

from harness9.context.view import (
    MeasuredView,
    ModelView,
    build_view,
    shown_message,
    system_parts,
)
from harness9.request import SystemPrompt, system_message
from harness9.schema import Message
from harness9.store.holding import HoldingSession
from harness9.store.session import CheckpointedSession
from harness9.tokens import message_bytes


class LiveViews:
    """Each session's view between model calls, so a call reads only the rows added since;
    ``load`` equals ``measure_view`` on the same store. The log only grows, but for ``/undo``
    popping the newest rows and a new checkpoint replacing the view: a load checks both.
    Messages a locked database holds in memory carry provisional ids: nothing is kept then.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Each session's view; its system message, a placeholder, is not counted in nbytes.
        self._kept: dict[str, MeasuredView] = {}
        self.rebuilds = 0  # views built from the whole log after the checkpoint
        self.rows_read = 0  # rows read from the store, in all

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._kept.pop(session_id, None)

    def load(
        self, session: CheckpointedSession, system: SystemPrompt, fixed: int = 0
    ) -> MeasuredView:
        """The view the next request starts from (``system`` first), counting ``fixed``."""
        with self._lock:
            kept = self._kept.pop(session.session_id, None)
        held = isinstance(session, HoldingSession) and bool(session.held)
        if held or kept is None or self._stale(session, kept):
            checkpoint = session.latest_checkpoint()
            view = build_view(Message("system"), [], checkpoint)  # its summary message only
            kept = MeasuredView(view, sum(message_bytes(m) for m in view.messages[1:]), checkpoint)
            self.rebuilds += 1
        cp = kept.checkpoint
        after = kept.view.ids[-1] or (cp.last_message_id if cp is not None else 0)
        records = session.get_records(after_id=after)
        self.rows_read += len(records)
        for rec in records:
            msg = shown_message(rec, cp.stubs.get(rec.id) if cp is not None else None)
            kept.view.messages.append(msg)
            kept.view.ids.append(rec.id)
            kept.nbytes += message_bytes(msg)
        if not held:
            with self._lock:
                self._kept[session.session_id] = kept
        parts = system_parts(system, session.pins(), cp.instructions if cp is not None else [])
        head = system_message(parts)
        view = ModelView([head, *kept.view.messages[1:]], [None, *kept.view.ids[1:]])
        return MeasuredView(view, message_bytes(head) + kept.nbytes, cp, parts, fixed)

    @staticmethod
    def _stale(session: CheckpointedSession, kept: MeasuredView) -> bool:
        """Another checkpoint since ``kept`` was made, or ``/undo`` removed its newest row."""
        cp, newest = kept.checkpoint, kept.view.ids[-1]
        key = (cp.id, cp.last_message_id, cp.created_at) if cp is not None else None
        if key != session.latest_checkpoint_key():
            return True
        return newest is not None and session.get_record(newest) is None
