"""Blobs (offloaded tool outputs) in the PostgreSQL store: table ``harness9.blobs``.

A blob is a run of chunk rows: chunk 0 marks its existence (and holds nothing),
the writer sends its buffer as the next chunk each time it holds 1 MiB, so
appending never rewrites what is stored. Every write is one transaction on the
manager's connection; rows go with their session (ON DELETE CASCADE).
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol

from harness9.store.blobs import BlobError, bytes_reader, check_ids, valid_blob_session_id
from harness9.store.session import StoreError

if TYPE_CHECKING:
    import psycopg


class Connections(Protocol):
    """What the blob store needs of its manager: its connection for a read or a write."""

    def read(self) -> AbstractContextManager[psycopg.Connection]: ...

    def transaction(self) -> AbstractContextManager[psycopg.Connection]: ...


BLOB_CHUNK_BYTES = 1 << 20  # a blob writer sends its buffer once it holds this much


class _PgBlobWriter:
    """Buffers a blob's bytes and stores them a chunk row at a time (one transaction each)."""

    def __init__(self, store: PostgresBlobStore, session_id: str, blob_id: str) -> None:
        self._store = store
        self._sid = session_id
        self._bid = blob_id
        self._buf = bytearray()
        self._next = 1
        self._done = False
        store._create(session_id, blob_id)

    def write(self, data: bytes) -> None:
        self._buf += data
        if len(self._buf) >= BLOB_CHUNK_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._buf:
            self._store._insert_chunk(self._sid, self._bid, self._next, bytes(self._buf))
            self._next += 1
            self._buf.clear()

    def close(self) -> None:
        if not self._done:
            self._flush()
            self._done = True

    def abort(self) -> None:
        self._done = True
        self._buf.clear()
        self._store.delete(self._sid, self._bid)


class PostgresBlobStore:
    """The BlobStore seam on the store's own connection: table ``harness9.blobs``."""

    def __init__(self, manager: Connections) -> None:
        self._m = manager

    def _create(self, session_id: str, blob_id: str) -> None:
        check_ids(session_id, blob_id)
        try:
            with self._m.transaction() as conn:
                if (
                    conn.execute(
                        "SELECT 1 FROM sessions WHERE id = %s FOR SHARE", (session_id,)
                    ).fetchone()
                    is None
                ):
                    raise BlobError(f"no session {session_id!r} to hold blob {blob_id!r}")
                cur = conn.execute(
                    "INSERT INTO blobs (session_id, blob_id, chunk, data, written_at) "
                    "VALUES (%s, %s, 0, '', %s) ON CONFLICT DO NOTHING",
                    (session_id, blob_id, time.time()),
                )
                if cur.rowcount == 0:
                    raise BlobError(f"blob {blob_id!r} already exists")
        except StoreError as exc:
            raise BlobError(str(exc)) from exc

    def _insert_chunk(self, session_id: str, blob_id: str, chunk: int, data: bytes) -> None:
        try:
            with self._m.transaction() as conn:
                conn.execute(
                    "INSERT INTO blobs (session_id, blob_id, chunk, data, written_at) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    (session_id, blob_id, chunk, data, time.time()),
                )
        except StoreError as exc:
            raise BlobError(str(exc)) from exc

    def open_writer(self, session_id: str, blob_id: str) -> _PgBlobWriter:
        return _PgBlobWriter(self, session_id, blob_id)

    def put(self, session_id: str, blob_id: str, data: bytes) -> None:
        writer = self.open_writer(session_id, blob_id)
        writer.write(data)
        writer.close()

    def append(self, session_id: str, blob_id: str, data: bytes) -> None:
        check_ids(session_id, blob_id)
        try:
            with self._m.transaction() as conn:
                # Locks the blob's marker row: two appenders queue and number in turn.
                row = conn.execute(
                    "SELECT 1 FROM blobs WHERE session_id = %s AND blob_id = %s AND chunk = 0 "
                    "FOR UPDATE",
                    (session_id, blob_id),
                ).fetchone()
                if row is None:
                    raise BlobError(f"no blob {blob_id!r} in session {session_id!r}")
                conn.execute(
                    "INSERT INTO blobs (session_id, blob_id, chunk, data, written_at) "
                    "SELECT %s, %s, max(chunk) + 1, %s, %s FROM blobs "
                    "WHERE session_id = %s AND blob_id = %s",
                    (session_id, blob_id, data, time.time(), session_id, blob_id),
                )
        except StoreError as exc:
            raise BlobError(str(exc)) from exc

    def read(self, session_id: str, blob_id: str) -> BinaryIO | None:
        try:
            check_ids(session_id, blob_id)
        except BlobError:
            return None
        with self._m.read() as conn:
            rows = conn.execute(
                "SELECT data FROM blobs WHERE session_id = %s AND blob_id = %s ORDER BY chunk",
                (session_id, blob_id),
            ).fetchall()
        if not rows:
            return None
        return bytes_reader(b"".join(bytes(r[0]) for r in rows))

    def path_of(self, session_id: str, blob_id: str) -> Path | None:
        return None

    def names(self, session_id: str) -> list[str]:
        with self._m.read() as conn:
            rows = conn.execute(
                "SELECT blob_id FROM blobs WHERE session_id = %s AND chunk = 0 ORDER BY blob_id",
                (session_id,),
            ).fetchall()
        return [r[0] for r in rows]

    def delete(self, session_id: str, blob_id: str) -> None:
        with self._m.transaction() as conn:
            conn.execute(
                "DELETE FROM blobs WHERE session_id = %s AND blob_id = %s", (session_id, blob_id)
            )

    def delete_session(self, session_id: str) -> None:
        if not valid_blob_session_id(session_id):
            raise BlobError(f"invalid session id for a blob: {session_id!r}")
        with self._m.transaction() as conn:
            conn.execute("DELETE FROM blobs WHERE session_id = %s", (session_id,))

    def delete_older_than(self, cutoff_unix: float) -> list[str]:
        with self._m.transaction() as conn:
            rows = conn.execute(
                "WITH stale AS (SELECT session_id FROM blobs GROUP BY session_id "
                "HAVING max(written_at) < %s), "
                "gone AS (DELETE FROM blobs WHERE session_id IN (SELECT session_id FROM stale) "
                "RETURNING session_id) SELECT DISTINCT session_id FROM gone ORDER BY session_id",
                (cutoff_unix,),
            ).fetchall()
        return [r[0] for r in rows]
