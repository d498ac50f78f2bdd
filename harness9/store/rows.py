"""Message rows as both stores read them: one decoder that sets damaged rows aside."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from harness9.store.codec import CorruptValueError, message_from_values
from harness9.store.session import CorruptRow, StoredMessage, valid_timestamp


def records_from_rows(
    rows: Iterable[Sequence[Any]],
) -> tuple[list[StoredMessage], list[CorruptRow]]:
    """``(id, role, content, tool_calls, tool_call_id, created_at)`` rows as records.

    A row that cannot be decoded is reported as a CorruptRow, never fatal; a CorruptRow
    in the role column stands for a row the driver could not read as text at all.
    """
    out: list[StoredMessage] = []
    corrupt: list[CorruptRow] = []
    for rid, role, content, calls_json, call_id, created in rows:
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
        out.append(StoredMessage(rid, message, float(created)))
    return out, corrupt
