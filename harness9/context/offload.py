"""Offload: big tool results go to the blob store, a rule summary stays in context.

A result over ``max_result_tokens`` (2,000) or ``max_result_bytes`` (10,240) is
written to the blob store (``<store>/<session>/<id>.txt`` files by default, the
database with a PostgreSQL store) and the conversation gets a summary
starting with ``📂 [offload:<id>]``. The model can page the full text back with
the ``offload_recall`` tool (at most 8,000 characters a call). Reading, searching,
exporting and cleaning what was offloaded is persistence: harness9.store.offloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from harness9.config import tool_results_dir
from harness9.context.rule_summary import OutputStats, summarize_output
from harness9.context.stubs import OFFLOAD_MARKER, is_offload_marker, offload_header
from harness9.context.tokens import BYTES_PER_TOKEN
from harness9.store.blobs import BlobError, BlobStore, BlobWriter, FileBlobStore
from harness9.store.offloads import (
    RECALL_MAX_CHARS,
    OffloadedResult,
    OffloadError,
    OffloadFiles,
    OffloadNotFoundError,
    matching_line,
    new_offload_id,
    page_text,
    query_words,
    valid_session_id,
)

__all__ = [
    "OFFLOAD_MARKER",
    "RECALL_MAX_CHARS",
    "OffloadConfig",
    "OffloadError",
    "OffloadNotFoundError",
    "OffloadStore",
    "OffloadWriter",
    "OffloadedResult",
    "is_offload_marker",
    "matching_line",
    "page_text",
    "query_words",
    "remove_session_offloads",
    "valid_session_id",
]


@dataclass(slots=True)
class OffloadConfig:
    max_result_tokens: int = 2000
    max_result_bytes: int = 10240
    store_dir: Path | None = None  # None: $HARNESS9_HOME/offload_store, resolved per store
    cleanup_age_days: int = 7


class OffloadWriter:
    """Streams one tool output to its blob, keeping only head and tail in memory.

    ``write`` takes ``bytes`` or ``str`` chunks; ``finish`` closes the blob and
    returns the record with its rule summary. The blob is created on open.
    """

    def __init__(
        self, store: OffloadStore, session_id: str, tool_name: str, args: str, oid: str
    ) -> None:
        self._store = store
        self._session_id = session_id
        self.tool_name = tool_name
        self.args = args
        self.id = oid
        cfg = store.config
        # A head at least as big as the byte limit means a result under the limits
        # is held whole, so the caller can still inline it (content_if_complete).
        self._stats = OutputStats(head_cap=max(8192, cfg.max_result_bytes))
        try:
            self._blob: BlobWriter = store.blobs.open_writer(session_id, oid)
        except BlobError as exc:
            raise OffloadError(str(exc)) from exc
        self.path = store.blobs.path_of(session_id, oid)
        self._closed = False
        self._result: OffloadedResult | None = None

    @property
    def bytes_written(self) -> int:
        return self._stats.total_bytes

    @property
    def head_size(self) -> int:
        return len(self._stats.head)

    @property
    def tail_size(self) -> int:
        return len(self._stats.tail)

    @property
    def over_limits(self) -> bool:
        cfg = self._store.config
        n = self.bytes_written
        return n > cfg.max_result_bytes or n // BYTES_PER_TOKEN > cfg.max_result_tokens

    def write(self, chunk: bytes | str) -> None:
        if self._result is not None or self._closed:
            raise OffloadError("offload writer is already finished")
        data = chunk.encode("utf-8", "surrogatepass") if isinstance(chunk, str) else chunk
        self._blob.write(data)
        self._stats.feed(data)

    def content_if_complete(self) -> str | None:
        """The whole output when it fitted in the head buffer, else None."""
        if self._stats.total_bytes > len(self._stats.head):
            return None
        return self._stats.head.decode("utf-8", "replace")

    def abort(self) -> None:
        """Drop the blob (the caller inlined the output instead)."""
        self._closed = True
        self._blob.abort()

    def finish(self, *, metadata: dict | None = None) -> OffloadedResult:
        if self._result is not None:
            return self._result
        self._closed = True
        try:
            self._blob.close()
        except BlobError as exc:
            raise OffloadError(str(exc)) from exc
        stats = self._stats.finish()
        body = summarize_output(self.tool_name, self.args, stats, metadata=metadata)
        summary = (
            f"{offload_header(self.id, stats.tokens)}\n{body}\n"
            f'use offload_recall(id="{self.id}") for the full content'
        )
        self._result = OffloadedResult(
            id=self.id,
            tool_name=self.tool_name,
            args=self.args,
            file_path=self.path,
            token_size=stats.tokens,
            timestamp=datetime.now(UTC),
            summary=summary,
        )
        self._store.remember(self._session_id, self._result)
        return self._result


class OffloadStore(OffloadFiles):
    """Where tool outputs are offloaded, and read back (``OffloadFiles``).

    ``blobs`` defaults to files under ``config.store_dir``; a PostgreSQL session
    store passes its own, so the results live in the database with the sessions.
    """

    def __init__(self, config: OffloadConfig | None = None, blobs: BlobStore | None = None) -> None:
        self.config = config or OffloadConfig()
        self.store_dir = Path(self.config.store_dir or tool_results_dir())
        super().__init__(blobs if blobs is not None else FileBlobStore(self.store_dir))

    def exceeds_limits(self, content: str) -> bool:
        n = len(content.encode("utf-8", "surrogatepass"))
        cfg = self.config
        return n > cfg.max_result_bytes or n // BYTES_PER_TOKEN > cfg.max_result_tokens

    def maybe_offload(
        self,
        session_id: str,
        tool_name: str,
        args_json: str,
        content: str,
        *,
        metadata: dict | None = None,
    ) -> OffloadedResult | None:
        """Offload ``content`` when it is over either limit; None when it stays inline."""
        if not self.exceeds_limits(content):
            return None
        writer = self.open_stream(session_id, tool_name, args_json)
        writer.write(content)
        return writer.finish(metadata=metadata)

    def open_stream(self, session_id: str, tool_name: str, args: str) -> OffloadWriter:
        if not valid_session_id(session_id):
            raise OffloadError(f"invalid session id for offload: {session_id!r}")
        return OffloadWriter(self, session_id, tool_name, args, new_offload_id())

    def clean_stale(self, now: datetime | None = None) -> list[str]:
        """Remove the results of sessions not written for ``cleanup_age_days``; return their ids."""
        now = now or datetime.now(UTC)
        return self.clean_older_than(now.timestamp() - self.config.cleanup_age_days * 86400)


def remove_session_offloads(session_id: str) -> None:
    """Delete a deleted session's offloaded results (the store's ``on_session_deleted``)."""
    OffloadStore().clean_session(session_id)
