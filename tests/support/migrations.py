"""A store made as an older harness9 left it: migrations undone, for the upgrade tests."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence

import psycopg

from harness9.store import migrations as sqlite_migrations
from harness9.store import pg_migrations


def undo_migrations(
    backend: str,
    url: str,
    since: str,
    *,
    columns: Sequence[str] = (),
    tables: Sequence[str] = (),
) -> None:
    """Undo the migration named ``since`` and every one after it: drop the tables and
    columns they added (``tables``, ``columns`` as ``"table.column"``, a bare name the
    messages'; those their SQL adds with CREATE TABLE / ADD COLUMN are found too, so a
    migration added later is undone without its tests' knowing), and forget that they ran
    (the next open migrates again)."""
    postgres = backend == "postgres"
    prefix = "harness9." if postgres else ""
    steps = (pg_migrations if postgres else sqlite_migrations).MIGRATIONS
    version = [n for n, _ in steps].index(since) + 1
    found_tables, found_columns = added_by(sql for _, sql in steps[version - 1 :])
    wanted = [c if "." in c else f"messages.{c}" for c in columns]
    tables = list(dict.fromkeys([*tables, *found_tables]))
    statements = [f"DROP TABLE {prefix}{table}" for table in reversed(tables)]
    for column in dict.fromkeys([*wanted, *found_columns]):
        table, _, name = column.rpartition(".")
        if table not in tables:
            statements.append(f"ALTER TABLE {prefix}{table} DROP COLUMN {name}")
    if postgres:
        with psycopg.connect(url, autocommit=True) as pg:
            for sql in statements:
                pg.execute(sql)
            pg.execute("DELETE FROM harness9.schema_migrations WHERE version >= %s", (version,))
        return
    conn = sqlite3.connect(url, isolation_level=None)
    try:
        for sql in statements:
            conn.execute(sql)
        conn.execute("DELETE FROM schema_migrations WHERE version >= ?", (version,))
        conn.execute(f"PRAGMA user_version = {version - 1}")
    finally:
        conn.close()


def added_by(scripts) -> tuple[list[str], list[str]]:
    """The tables (CREATE TABLE) and ``table.column``s (ADD COLUMN) migration SQL adds."""
    tables: list[str] = []
    columns: list[str] = []
    for sql in scripts:
        tables += [
            t.split(".")[-1]
            for t in re.findall(r"CREATE TABLE\s+(?:IF NOT EXISTS\s+)?([\w.]+)", sql)
        ]
        pairs = re.findall(r"ALTER TABLE\s+([\w.]+)\s+ADD COLUMN\s+(?:IF NOT EXISTS\s+)?(\w+)", sql)
        columns += [f"{t.split('.')[-1]}.{c}" for t, c in pairs]
    return tables, columns
