"""Offloaded tool outputs at rest: their ids, paging, search, export and import, cleaning.

Persistence only: what was offloaded stays readable by ``offload_recall`` and
``history_search``, is copied by ``sessions export``/``import``, and is deleted with its
session. Writing one (and the summary the conversation keeps instead) is the context
layer's (harness9.tools.offload). The outputs live in a ``BlobStore``: files under
``$HARNESS9_HOME`` or the PostgreSQL store's own table.

Nothing user- or model-supplied becomes part of a path: ids are ``ofl_`` + 12 hex
digits, checked on every read, and session ids must be UUID-like (``[A-Za-z0-9_-]``).
"""

from __future__ import annotations

import io
import re
import secrets
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from harness9.errors import HarnessError
from harness9.store.blobs import BlobError, BlobStore, valid_blob_session_id

__all__ = [
    "RECALL_MAX_CHARS",
    "OffloadError",
    "OffloadFiles",
    "OffloadNotFoundError",
    "OffloadedResult",
    "matching_line",
    "new_offload_id",
    "page_text",
    "query_words",
    "valid_session_id",
]
RECALL_MAX_CHARS = 8000
SEARCH_MAX_BYTES = 4 << 20  # of one offloaded file, when history_search scans it
SNIPPET_CHARS = 240
_ID_RE = re.compile(r"^ofl_[0-9a-f]{12}$")
_READ_CHUNK_CHARS = 1 << 20


class OffloadError(HarnessError):
    """An offload could not be stored or read (bad session id, bad offset)."""


class OffloadNotFoundError(OffloadError):
    """No offloaded result has this id in this session (malformed ids included)."""

    def __init__(self, offload_id: str) -> None:
        self.offload_id = offload_id
        super().__init__(f"no offloaded result with id {offload_id!r}")


@dataclass(slots=True)
class OffloadedResult:
    id: str
    tool_name: str
    args: str
    file_path: Path | None  # None when the blob lives in a database
    token_size: int
    timestamp: datetime
    summary: str  # what replaces the result in the conversation


def valid_session_id(session_id: str) -> bool:
    return valid_blob_session_id(session_id)  # offloads are blobs: one rule for both


def new_offload_id() -> str:
    return "ofl_" + secrets.token_hex(6)


class OffloadFiles:
    """The offloaded outputs of every session in ``blobs``; safe to share between threads."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self._lock = threading.Lock()
        self._index: dict[str, dict[str, OffloadedResult]] = {}

    def remember(self, session_id: str, result: OffloadedResult) -> None:
        """Notes a result this process offloaded (``entries``)."""
        with self._lock:
            self._index.setdefault(session_id, {})[result.id] = result

    def entries(self, session_id: str) -> list[OffloadedResult]:
        """Results offloaded by this process for the session, oldest first."""
        with self._lock:
            return list(self._index.get(session_id, {}).values())

    # ---- reading -------------------------------------------------------

    def recall(
        self, session_id: str, offload_id: str, *, offset: int = 0, limit: int = RECALL_MAX_CHARS
    ) -> str:
        """Characters ``offset``..``offset+limit`` of an offloaded result (limit capped at 8,000).

        When more remains, a note says which characters were shown and the offset
        to continue from. Raises OffloadNotFoundError for unknown or malformed ids.
        """
        if not isinstance(offload_id, str) or not _ID_RE.match(offload_id):
            raise OffloadNotFoundError(str(offload_id))
        if not valid_session_id(session_id):
            raise OffloadNotFoundError(offload_id)
        if offset < 0:
            raise OffloadError(f"offset must be 0 or more, got {offset}")
        try:
            stream = self.blobs.read(session_id, offload_id)
        except BlobError as exc:
            raise OffloadError(str(exc)) from exc
        if stream is None:
            raise OffloadNotFoundError(offload_id)
        limit = max(1, min(limit, RECALL_MAX_CHARS))
        with stream:
            text, total = _read_range(stream, offset, limit)
        return _paged(text, offset, total)

    def search(self, session_id: str, query: str, *, limit: int = 5) -> list[tuple[str, str]]:
        """(offload id, matching line) for this session's offloaded outputs holding every
        word of ``query`` (whole words, case-insensitive), by id. Reads at
        most ``SEARCH_MAX_BYTES`` of each file."""
        words = query_words(query)
        if not words or not valid_session_id(session_id):
            return []
        hits: list[tuple[str, str]] = []
        for oid, stream in self._streams(session_id, sorted(self.blobs.names(session_id))[::-1]):
            with stream:
                text = stream.read(SEARCH_MAX_BYTES).decode("utf-8", "replace")
            line = matching_line(text, words)
            if line is None:
                continue
            hits.append((oid, line))
            if len(hits) >= limit:
                break
        return hits

    # ---- export and import ---------------------------------------------

    def session_files(self, session_id: str) -> list[tuple[str, str]]:
        """(id, full text) of every result offloaded for the session, by id.

        For ``sessions export``: what ``offload_recall`` could page back, so a copy
        of the session elsewhere can too.
        """
        if not valid_session_id(session_id):
            return []
        out: list[tuple[str, str]] = []
        for oid, stream in self._streams(session_id, self.blobs.names(session_id)):
            with stream:
                out.append((oid, stream.read().decode("utf-8", "replace")))
        return out

    def _streams(self, session_id: str, names: Iterable[str]) -> Iterator[tuple[str, BinaryIO]]:
        """(id, open stream) of each offloaded output among ``names``, in their order."""
        for oid in names:
            if not _ID_RE.match(oid):
                continue
            stream = self.blobs.read(session_id, oid)
            if stream is not None:
                yield oid, stream

    def restore_session(self, session_id: str, items: list[tuple[str, str]]) -> None:
        """Write exported results back under ``session_id`` (``sessions import``).

        Every id is checked before anything is written: an id names a blob.
        """
        for oid, _ in items:
            if not isinstance(oid, str) or not _ID_RE.match(oid):
                raise OffloadError(f"offload id {str(oid)[:40]!r} is not ofl_ and 12 hex digits")
        for oid, text in items:
            try:
                self.blobs.put(session_id, oid, text.encode("utf-8", "surrogatepass"))
            except BlobError as exc:
                raise OffloadError(str(exc)) from exc

    @staticmethod
    def valid_id(offload_id: object) -> bool:
        return isinstance(offload_id, str) and _ID_RE.match(offload_id) is not None

    # ---- cleaning ------------------------------------------------------

    def clean_older_than(self, cutoff: float) -> list[str]:
        """Remove the results of sessions not written since ``cutoff`` (a POSIX time);
        return their ids."""
        removed = self.blobs.delete_older_than(cutoff)
        with self._lock:
            for sid in removed:
                self._index.pop(sid, None)
        return removed

    def clean_session(self, session_id: str) -> None:
        """Forget and delete everything offloaded for a session (``/new``, session delete).

        The one deleter of a session's offloads. In files, a symlink in place of the
        directory is unlinked, never followed; an id this store would never have made a
        directory for has nothing to delete. What cannot be removed is an OffloadError.
        """
        with self._lock:
            self._index.pop(session_id, None)
        if not valid_session_id(session_id):
            return
        try:
            self.blobs.delete_session(session_id)
        except BlobError as exc:
            raise OffloadError(str(exc)) from exc


def query_words(query: str) -> set[str]:
    """The words of a search, lower-cased, as whole-word matching sees them."""
    return {w for w in re.findall(r"[^\W_]+", query.lower()) if w}


def matching_line(text: str, words: set[str]) -> str | None:
    """The first line holding every word (whole words, any case), trimmed; else a window
    around the first word when the text as a whole holds them all; else None."""
    if not words:
        return None
    if not words <= set(re.findall(r"[^\W_]+", text.lower())):
        return None
    for line in text.splitlines():
        if words <= set(re.findall(r"[^\W_]+", line.lower())):
            return " ".join(line.split())[:SNIPPET_CHARS]
    first = min(words, key=len)
    at = text.lower().find(first)
    return " ".join(text[max(0, at - 100) : at + 140].split())


def page_text(text: str, offset: int = 0, limit: int = RECALL_MAX_CHARS) -> str:
    """Characters ``offset``..``offset+limit`` of ``text``, with recall's paging note."""
    if offset < 0:
        raise OffloadError(f"offset must be 0 or more, got {offset}")
    limit = max(1, min(limit, RECALL_MAX_CHARS))
    return _paged(text[offset : offset + limit], offset, len(text))


def _paged(part: str, offset: int, total: int) -> str:
    """``part`` (from ``offset`` of ``total`` characters) with recall's paging note."""
    if offset > total or (offset == total and total > 0):
        raise OffloadError(f"offset {offset} is past the end ({total} characters)")
    end = offset + len(part)
    if offset == 0 and end == total:
        return part
    note = f"[truncated: showing characters {offset}–{end} of {total}"
    note += f"; call offload_recall with offset={end} to continue]" if end < total else "]"
    return f"{part}\n\n{note}"


def _read_range(stream: BinaryIO, offset: int, limit: int) -> tuple[str, int]:
    """(characters offset..offset+limit, total characters), reading in bounded chunks."""
    total = 0
    parts: list[str] = []
    want_end = offset + limit
    with io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="") as f:
        while chunk := f.read(_READ_CHUNK_CHARS):
            start, stop = total, total + len(chunk)
            if stop > offset and start < want_end:
                parts.append(chunk[max(0, offset - start) : want_end - start])
            total = stop
    return "".join(parts), total
