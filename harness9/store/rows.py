"""Rows as both stores read them: one message decoder that sets damaged rows aside, and
the sessions row as a listing shows it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from harness9.store.codec import (
    CorruptValueError,
    message_from_values,
    metadata_from_value,
    offload_from_values,
)
from harness9.store.session import CorruptRow, SessionInfo, StoredMessage, valid_timestamp


def records_from_rows(
    rows: Iterable[Sequence[Any]],
) -> tuple[list[StoredMessage], list[CorruptRow]]:
    """``(id, role, content, tool_calls, tool_call_id, created_at, offload_id,
    offload_tokens, metadata)`` rows (``SELECT_RECORDS``) as records.

    A row that cannot be decoded is reported as a CorruptRow, never fatal; a CorruptRow
    in the role column stands for a row the driver could not read as text at all.
    """
    out: list[StoredMessage] = []
    corrupt: list[CorruptRow] = []
    for rid, role, content, calls_json, call_id, created, offload_id, tokens, meta in rows:
        if isinstance(role, CorruptRow):
            corrupt.append(role)
            continue
        try:
            message = message_from_values(role, content, calls_json, call_id)
        except CorruptValueError as exc:
            corrupt.append(CorruptRow(rid, str(exc)))
            continue
        if not valid_timestamp(created):
            corrupt.append(CorruptRow(rid, f"created_at {created!r:.40} is not a time"))
            continue
        link = offload_from_values(message, offload_id, tokens)
        message.metadata = metadata_from_value(meta)
        out.append(StoredMessage(rid, message, float(created), link))
    return out, corrupt


def info_from_row(row: Sequence[Any]) -> SessionInfo:
    """A sessions row (``harness9.store.sessions.INFO_SQL``) for display: a damaged title
    or count never breaks a listing.

    Times are passed on as stored (renderers show an impossible one as unknown), so
    what is shown never differs from what an export writes.
    """
    sid, created, updated, count, title, workdir, parent = row
    title = shown_text(title)
    if isinstance(count, bool) or not isinstance(count, int):
        count = 0
    if isinstance(workdir, bytes):
        workdir = workdir.decode("utf-8", "replace")
    return SessionInfo(sid, created, updated, count, title, str(workdir or ""), parent or "")


def shown_text(value: Any) -> str:
    """A text column as a reader shows it: bytes that are not UTF-8 (SQLite keeps what a
    hand edit wrote; its store reads such columns as bytes) with replacement characters,
    a number as its digits, NULL as ""."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    return "" if value is None else str(value)
