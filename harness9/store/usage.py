"""What a session's model calls consumed: the ``session_usage`` rows and their roll-ups.

Each model call's usage is added to its session's one row (``add_usage``); a session's
totals, its sub-agents' (rolled up into the parent's, as their cost is the parent's),
and every session's for listings are read back as ``UsageTotals``. The columns and
statements are written once for both drivers; ``UsageLedger`` is the part of an SQL
store's manager that uses them (harness9.store.sql_base).
"""

from __future__ import annotations

from typing import Any

from harness9.store.lineage import family
from harness9.store.session import UsageTotals
from harness9.store.sql_base import S, SqlStoreBase

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


class UsageLedger(SqlStoreBase[S]):
    """Usage rows of an SQL store: added to per call, read as totals."""

    def add_usage(
        self,
        session_id: str,
        *,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
        cost_usd: float | None = None,
        summary: bool = False,
        cache_write_tokens: int = 0,
    ) -> None:
        """Add one model call's usage to the session's totals (``cost_usd`` None: unpriced;
        ``summary``: a compaction summary's call, also counted apart)."""
        values = usage_values(
            session_id,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_tokens=cached_tokens,
            cost_usd=cost_usd,
            summary=summary,
            cache_write_tokens=cache_write_tokens,
        )
        # Qualified by the alias: PostgreSQL finds a bare column name ambiguous there.
        with self.statement() as conn:
            conn.execute(usage_upsert_sql(self.PARAM, "session_usage AS u", "u."), values)

    def usage_totals(self, session_id: str) -> UsageTotals:
        """The session's summed usage; all zero for a session that made no model call."""
        with self.read() as conn:
            row = conn.execute(
                f"SELECT {', '.join(USAGE_COLUMNS)} FROM session_usage "
                f"WHERE session_id = {self.PARAM}",
                (session_id,),
            ).fetchone()
        return UsageTotals(*row) if row is not None else UsageTotals()

    def subagent_usage(self, session_id: str) -> UsageTotals:
        """What the sub-agents below ``session_id`` consumed, summed (all zero: none ran)."""
        with self.read() as conn:
            kids = family(conn, self.PARAM, [session_id])[1:]
            if not kids:
                return UsageTotals()
            marks = ", ".join([self.PARAM] * len(kids))
            row = conn.execute(
                f"SELECT {', '.join(f'coalesce(sum({c}), 0)' for c in USAGE_COLUMNS)} "
                f"FROM session_usage WHERE session_id IN ({marks})",
                tuple(kids),
            ).fetchone()
        if row is None:
            return UsageTotals()
        # Sums come back as the driver's wide types (PostgreSQL: numeric, a Decimal).
        values: dict[str, Any] = {
            c: float(v) if c.endswith("cost_usd") else int(v)
            for c, v in zip(USAGE_COLUMNS, row, strict=True)
        }
        return UsageTotals(**values)

    def usage_by_session(self) -> dict[str, UsageTotals]:
        """Every session's summed usage that has any (for listings)."""
        with self.read() as conn:
            rows = conn.execute(
                f"SELECT session_id, {', '.join(USAGE_COLUMNS)} FROM session_usage"
            ).fetchall()
        return {row[0]: UsageTotals(*row[1:]) for row in rows}
