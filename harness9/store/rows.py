"""Rows as both stores read and write them: one message decoder that sets damaged rows
aside, and the session_usage columns with the statement that adds to them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from harness9.store.codec import CorruptValueError, message_from_values, offload_from_values
from harness9.store.session import CorruptRow, StoredMessage, UsageTotals, valid_timestamp


def records_from_rows(
    rows: Iterable[Sequence[Any]],
) -> tuple[list[StoredMessage], list[CorruptRow]]:
    """``(id, role, content, tool_calls, tool_call_id, created_at, offload_id,
    offload_tokens)`` rows (``SELECT_RECORDS``) as records.

    A row that cannot be decoded is reported as a CorruptRow, never fatal; a CorruptRow
    in the role column stands for a row the driver could not read as text at all.
    """
    out: list[StoredMessage] = []
    corrupt: list[CorruptRow] = []
    for rid, role, content, calls_json, call_id, created, offload_id, tokens in rows:
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
        out.append(StoredMessage(rid, message, float(created), link))
    return out, corrupt


# The session_usage columns both stores add to and read back, in UsageTotals' order.
USAGE_COLUMNS = (
    "model_calls",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cost_usd",
    "unpriced_calls",
    "summary_calls",
    "summary_input_tokens",
    "summary_output_tokens",
    "summary_cost_usd",
    "summary_unpriced_calls",
    "cache_write_tokens",
)


def usage_upsert_sql(param: str, table: str = "session_usage", old: str = "") -> str:
    """The statement adding one call's usage (``usage_values``) to its session's row.

    ``param`` is the driver's placeholder; ``table`` may carry an alias that ``old``
    (``"u."``) then uses to name the row's current values.
    """
    names = ", ".join(USAGE_COLUMNS)
    params = ", ".join([param] * (len(USAGE_COLUMNS) + 1))
    sums = ", ".join(f"{c} = {old}{c} + excluded.{c}" for c in USAGE_COLUMNS)
    return (
        f"INSERT INTO {table} (session_id, {names}) VALUES ({params}) "
        f"ON CONFLICT (session_id) DO UPDATE SET {sums}"
    )


def usage_values(
    session_id: str,
    *,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int,
    cost_usd: float | None,
    summary: bool,
    cache_write_tokens: int = 0,
) -> tuple[str | int | float, ...]:
    """One call's row for ``usage_upsert_sql``: counted in the totals, and apart when a summary."""
    unpriced = 1 if cost_usd is None else 0
    totals = (1, input_tokens, output_tokens, cached_tokens, cost_usd or 0.0, unpriced)
    if summary:
        part = (1, input_tokens, output_tokens, cost_usd or 0.0, unpriced)
    else:
        part = (0, 0, 0, 0.0, 0)
    return (session_id, *totals, *part, cache_write_tokens)


def usage_insert_sql(param: str) -> str:
    """The statement storing a whole UsageTotals (``usage_row``) for a session (import)."""
    params = ", ".join([param] * (len(USAGE_COLUMNS) + 1))
    return f"INSERT INTO session_usage (session_id, {', '.join(USAGE_COLUMNS)}) VALUES ({params})"


def usage_row(session_id: str, usage: UsageTotals) -> tuple[str | int | float, ...]:
    """``usage`` as the values of ``usage_insert_sql`` (its fields are named as the columns)."""
    return (session_id, *(getattr(usage, c) for c in USAGE_COLUMNS))
