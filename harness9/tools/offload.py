"""Offload: a big tool result goes to the blob store, a rule summary stays in context.

A result over ``max_result_tokens`` or ``max_result_bytes`` is written to the blob store
(files under ``store_dir``, or the PostgreSQL store's table); the conversation keeps a
summary starting with ``📂 [offload:<id>]``, which ``offload_recall`` pages back. Reading,
exporting and cleaning what was offloaded is persistence: harness9.store.offloads.

Here, among the tools, because they are its users: the shell tool streams its output into
an ``OffloadWriter``, ``offload_recall`` and ``history_search`` read through the store; the
engine owns the store: it opens one stream per tool call and offloads what is too big.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from harness9.config import ContextOptions, tool_results_dir
from harness9.store.blobs import BlobError, BlobStore, FileBlobStore
from harness9.store.offloads import (
    OffloadedResult,
    OffloadError,
    OffloadFiles,
    new_offload_id,
    valid_session_id,
)
from harness9.store.session import OFFLOAD_MARKER, OffloadLink
from harness9.tokens import BYTES_PER_TOKEN
from harness9.tool_output import OutputStats, summarize_output

# The last line of an offload's summary: an instruction for the model, which /last
# leaves out when it shows the summary to a person.
RECALL_HINT_START = "use offload_recall("
OFFLOAD_WINDOW_SHARE = 12  # a tool result kept inline is at most a twelfth of the window


@dataclass(slots=True)
class OffloadConfig:
    max_result_tokens: int = 2000
    max_result_bytes: int = 10240
    store_dir: Path | None = None  # None: $HARNESS9_HOME/offload_store
    cleanup_age_days: int = 7

    def exceeded_by(self, nbytes: int) -> bool:
        return nbytes > self.max_result_bytes or nbytes // BYTES_PER_TOKEN > self.max_result_tokens


class OffloadWriter:
    """Streams one tool output to a new blob, holding only the head and tail its rule
    summary quotes; ``finish`` returns the record with that summary."""

    def __init__(self, store: OffloadStore, session_id: str, tool_name: str, args: str) -> None:
        if not valid_session_id(session_id):
            raise OffloadError(f"invalid session id for offload: {session_id!r}")
        self._store = store
        self._session_id = session_id
        self.tool_name = tool_name
        self.args = args
        self.id = new_offload_id()
        self._stats = OutputStats(head_cap=max(8192, store.config.max_result_bytes))
        try:
            self._blob = store.blobs.open_writer(session_id, self.id)
        except BlobError as exc:
            raise OffloadError(str(exc)) from exc
        self.path = store.blobs.path_of(session_id, self.id)
        self._done = False

    @property
    def over_limits(self) -> bool:
        return self._store.config.exceeded_by(self._stats.total_bytes)

    def write(self, chunk: bytes | str) -> None:
        if self._done:
            raise OffloadError("offload writer is already finished")
        data = chunk.encode("utf-8", "surrogatepass") if isinstance(chunk, str) else chunk
        self._blob.write(data)
        self._stats.feed(data)

    def abort(self) -> None:
        """Drop the blob (the caller inlined the output instead)."""
        self._done = True
        self._blob.abort()

    def finish(self, *, metadata: dict | None = None) -> OffloadedResult:
        if self._done:
            raise OffloadError("offload writer is already finished")
        self._done = True
        try:
            self._blob.close()
        except BlobError as exc:
            raise OffloadError(str(exc)) from exc
        stats = self._stats.finish()
        body = summarize_output(self.tool_name, self.args, stats, metadata=metadata)
        summary = (
            f"{OFFLOAD_MARKER}{self.id}] {stats.tokens} tokens offloaded\n{body}\n"
            f'{RECALL_HINT_START}id="{self.id}") for the full content'
        )
        result = OffloadedResult(
            id=self.id,
            tool_name=self.tool_name,
            args=self.args,
            file_path=self.path,
            token_size=stats.tokens,
            timestamp=datetime.now(UTC),
            summary=summary,
        )
        self._store.remember(self._session_id, result)
        return result


class OffloadStore(OffloadFiles):
    """Where tool outputs are offloaded, and read back (``OffloadFiles``). ``blobs``: files
    under ``config.store_dir`` by default; a PostgreSQL session store passes its own."""

    def __init__(self, config: OffloadConfig | None = None, blobs: BlobStore | None = None) -> None:
        self.config = config or OffloadConfig()
        self.store_dir = Path(self.config.store_dir or tool_results_dir())
        super().__init__(blobs if blobs is not None else FileBlobStore(self.store_dir))

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
        if not self.config.exceeded_by(len(content.encode("utf-8", "surrogatepass"))):
            return None
        writer = self.open_stream(session_id, tool_name, args_json)
        writer.write(content)
        return writer.finish(metadata=metadata)

    def offload_result(
        self,
        session_id: str,
        tool_name: str,
        args_json: str,
        content: str,
        *,
        metadata: dict | None = None,
    ) -> tuple[str, OffloadLink | None]:
        """What the log keeps of a tool result: when too big, its offload's summary and link."""
        offloaded = self.maybe_offload(session_id, tool_name, args_json, content, metadata=metadata)
        if offloaded is None:
            return content, None
        return offloaded.summary, OffloadLink(offloaded.id, offloaded.token_size)

    def open_stream(self, session_id: str, tool_name: str, args: str) -> OffloadWriter:
        return OffloadWriter(self, session_id, tool_name, args)

    def clean_stale(self) -> list[str]:
        """Remove the results of sessions not written for ``cleanup_age_days``; their ids."""
        return self.clean_older_than(time.time() - self.config.cleanup_age_days * 86400)


def offload_limit(max_result_tokens: int, context_window: int) -> int:
    """The size in tokens over which a tool result is offloaded: the ``offload.max_result_tokens``
    option, at most ``1 / OFFLOAD_WINDOW_SHARE`` of the window, so that the newest tool
    groups a compaction keeps whole (three, each one such result) take a quarter of it and
    still fit under hybrid's 40 % target with the system prompt and the tools. The default
    2,000 binds from a 24K window up; on a 4K window a result of 1,900 tokens would
    otherwise leave no room for the next."""
    return max(1, min(max_result_tokens, context_window // OFFLOAD_WINDOW_SHARE))


def offload_store(
    opts: ContextOptions, context_window: int, blobs: BlobStore | None = None
) -> OffloadStore:
    """The store the ``offload`` options make for a ``context_window``-token model."""
    config = OffloadConfig(
        offload_limit(opts.offload_max_result_tokens, context_window),
        opts.offload_max_result_bytes,
        cleanup_age_days=opts.offload_cleanup_age_days,
    )
    return OffloadStore(config, blobs)


def remove_session_offloads(session_id: str) -> None:
    """Delete a deleted session's offloaded results (the store's ``on_session_deleted``)."""
    OffloadStore().clean_session(session_id)
