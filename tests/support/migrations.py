"""A store made as an older harness9 left it: migrations undone, for the upgrade tests."""

from __future__ import annotations

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
    """Undo the migration named ``since`` and every one after it: drop the ``tables`` and
    the ``columns`` they added (``"table.column"``; a bare name is the messages'), and
    forget that they ran (the next open migrates again)."""
    postgres = backend == "postgres"
    prefix = "harness9." if postgres else ""
    names = [n for n, _ in (pg_migrations if postgres else sqlite_migrations).MIGRATIONS]
    version = names.index(since) + 1
    statements = [f"DROP TABLE {prefix}{table}" for table in tables]
    for column in columns:
        table, _, name = column.rpartition(".")
        statements.append(f"ALTER TABLE {prefix}{table or 'messages'} DROP COLUMN {name}")
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
