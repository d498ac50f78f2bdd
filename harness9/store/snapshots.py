"""A session read whole, and stored back: what export, import and migrate move.

``snapshot`` reads everything stored about one session in one transaction (a chat
writing meanwhile cannot tear it); ``restore`` stores a snapshot in one transaction
(the SQLite store overrides it with a staged import in bounded steps,
harness9.store.staged_import, which shares ``restore_rest``). A snapshot gathers what
every other part keeps, so ``SnapshotStore`` stands on them all (harness9.store.sql_base).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from harness9.store.lineage import LineageStore
from harness9.store.session import UsageTotals, move_checkpoint_ids
from harness9.store.sessions import SessionCatalog
from harness9.store.sql_base import S
from harness9.store.usage import UsageLedger, usage_insert_sql, usage_row

if TYPE_CHECKING:
    from harness9.store.export import SessionSnapshot


class SnapshotStore(SessionCatalog[S], UsageLedger[S], LineageStore[S]):
    """Snapshots and restores of an SQL store's sessions."""

    def snapshot(self, session_id: str) -> SessionSnapshot:
        """Everything stored about one session, read in one transaction.

        A chat writing meanwhile cannot tear the snapshot.
        """
        from harness9.store.export import SessionSnapshot

        session = self.open_session(session_id)
        with self._snapshot_read():
            info = self.session_info(session_id)
            records = session.get_records()
            todos = session.get_todos() or []
            checkpoints = session.list_checkpoints()
            usage = self.usage_totals(session_id)
            pins = session.pins()
            origin = self.fork_origin(session_id)
            link = self.subagent_link(session_id)
        return SessionSnapshot(
            info,
            records,
            todos,
            checkpoints,
            list(session.corrupt_rows),
            usage=usage,
            pins=pins,
            forked_from=origin,
            link=link,
        )

    def restore(self, snap: SessionSnapshot, *, new_id: bool = False) -> str:
        """Store ``snap`` in one transaction; return the session id it was stored under.

        Message and checkpoint ids are kept when the store may reuse them all
        (``ids_reusable``: a re-import is then exact); otherwise, and always with
        ``new_id``, fresh ids are assigned and each checkpoint moves to its message's
        new id.
        """
        import uuid

        from harness9.store.export import ImportFormatError, SessionExistsError

        sid = str(uuid.uuid4()) if new_id else snap.info.id
        p = self.PARAM
        try:
            with self.transaction() as conn:
                if self._exists(conn, sid):
                    raise SessionExistsError(sid)
                keep = (
                    not new_id
                    and self.ids_reusable(conn, "messages", [r.id for r in snap.records])
                    and self.ids_reusable(conn, "compactions", [c.id for c in snap.checkpoints])
                )
                info = snap.info
                conn.execute(
                    "INSERT INTO sessions (id, created_at, updated_at, title, message_count, "
                    f"imported_at) VALUES ({p}, {p}, {p}, {p}, {p}, {p})",
                    (
                        sid,
                        info.created_at,
                        info.updated_at,
                        self._stored_text(info.title),
                        len(snap.records),
                        time.time(),
                    ),
                )
                new_ids = self.restore_messages(conn, sid, snap.records, keep)
                self.restore_rest(conn, sid, snap, new_ids, keep)
        except UnicodeEncodeError:
            raise ImportFormatError("the file holds text that is not valid Unicode") from None
        return sid

    def restore_rest(
        self, conn: Any, sid: str, snap: SessionSnapshot, new_ids: dict[int, int], keep: bool
    ) -> None:
        """Everything of ``snap`` but its session row and messages: todos, checkpoints
        (moved to ``new_ids``, their own ids kept if ``keep``) and usage totals."""
        p = self.PARAM
        if snap.todos:
            conn.cursor().executemany(
                f"INSERT INTO todos (session_id, position, content, status) VALUES ({p}, {p}, {p}, {p})",
                [
                    (sid, i, self._stored_text(t.content), t.status)
                    for i, t in enumerate(snap.todos)
                ],
            )
        for cp in snap.checkpoints:
            # The anchor, stubs and recall handles follow their messages to new ids.
            # (Handles written in the summary's prose keep the file's ids: kept when free.)
            moved = move_checkpoint_ids(replace(cp, id=cp.id if keep else 0), new_ids.get)
            self._store_checkpoint(conn, sid, moved)
        if snap.usage != UsageTotals():
            conn.execute(usage_insert_sql(p), usage_row(sid, snap.usage))
        now = time.time()
        for text in snap.pins:
            conn.execute(
                f"INSERT INTO session_pins (session_id, text, created_at) VALUES ({p}, {p}, {p})",
                (sid, self._stored_text(text), now),
            )
        if snap.forked_from is not None:
            conn.execute(
                "INSERT INTO session_forks (session_id, origin_id, origin_message) "
                f"VALUES ({p}, {p}, {p})",
                (sid, snap.forked_from.session_id, snap.forked_from.message),
            )
