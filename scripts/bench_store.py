"""Benchmark the session store against plain sqlite3 doing the same work, in one run.

    .venv/bin/python scripts/bench_store.py [--repeats 5] [--runs 11]

The baseline is hand-written sqlite3 with the same schema and pragmas (WAL,
synchronous=NORMAL, foreign_keys=ON): it inserts the same rows in the same
transactions (one INSERT per message plus the sessions-row update the seed's
AddMessages does) and reads them back into the same Message objects. So the
ratio is the cost of the store's own layer: locking, validation, counters,
titles, corrupt-row checks. Machines are shared and noisy, hence medians of
several repeats and ratios rather than absolute targets (except for the
``sessions list`` wall time, whose target is absolute).

Messages are indexed for search lazily, by the first search after they are
written, so the write rows carry no indexing. That deferred cost has its own
row, "first search after 10,000 adds": the store's search (catch-up indexing
of all 10,000 messages, then the query) against plain sqlite3 running the same
FTS5 insert of the same text and then the same query. "search (index up to
date)" is a search with nothing to catch up on, the same query on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness9.schema import Message, ToolCall  # noqa: E402
from harness9.store.migrations import FTS_BODY  # noqa: E402
from harness9.store.search import (  # noqa: E402
    ELLIPSIS,
    HIGHLIGHT_CLOSE,
    HIGHLIGHT_OPEN,
    SNIPPET_TOKENS,
    to_fts_query,
)
from harness9.store.sqlite import BUSY_TIMEOUT_MS, Manager  # noqa: E402

N_MESSAGES = 10_000
N_SINGLE = 200
QUERY = "parser compile"


def make_messages(n: int, seed: int = 0) -> list[Message]:
    """~400 bytes each; every fourth an assistant message with tool calls."""
    rnd = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "parser", "file", "test", "compile", "error", "x"]

    def text(size: int) -> str:
        out = []
        while sum(len(w) + 1 for w in out) < size:
            out.append(rnd.choice(words))
        return " ".join(out)[:size]

    msgs = []
    for i in range(n):
        if i % 4 == 3:
            calls = [
                ToolCall(f"call_{i}_{k}", "read_file", json.dumps({"path": text(60)}))
                for k in range(2)
            ]
            msgs.append(Message("assistant", text(200), calls))
        elif i % 4 == 0:
            msgs.append(Message("user", text(400)))
        elif i % 4 == 1:
            msgs.append(Message("assistant", text(400)))
        else:
            msgs.append(Message("tool", text(390), tool_call_id=f"call_{i}"))
    return msgs


# -- the plain sqlite3 baseline ---------------------------------------------------------

# The title column and FTS5 table (no trigger: indexing is deferred) let the baseline run
# the store's own search query.
BASE_SCHEMA = """
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, created_at REAL NOT NULL, updated_at REAL NOT NULL,
    title TEXT NOT NULL DEFAULT ''
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    role TEXT NOT NULL, content TEXT NOT NULL, tool_calls TEXT, tool_call_id TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX idx_messages_session ON messages(session_id, id);
CREATE VIRTUAL TABLE messages_fts USING fts5(body, tokenize = 'unicode61');
"""
SEARCH_SQL = Manager._SEARCH_SQL + " ORDER BY bm25(messages_fts), m.id DESC LIMIT 20"
SEARCH_ARGS = (HIGHLIGHT_OPEN, HIGHLIGHT_CLOSE, ELLIPSIS, SNIPPET_TOKENS, to_fts_query(QUERY))


class Plain:
    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA busy_timeout = 5000")
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute("PRAGMA foreign_keys = ON")
        self.conn.executescript(BASE_SCHEMA)
        self.sid = str(uuid.uuid4())
        now = time.time()
        self.conn.execute(
            "INSERT INTO sessions (id, created_at, updated_at) VALUES (?, ?, ?)",
            (self.sid, now, now),
        )

    def add(self, msgs: list[Message]) -> None:
        now = time.time()
        rows = [
            (
                self.sid,
                m.role,
                m.content,
                json.dumps([c.to_flat() for c in m.tool_calls]) if m.tool_calls else None,
                m.tool_call_id or None,
                now,
            )
            for m in msgs
        ]
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        c.executemany(
            "INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        c.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, self.sid))
        c.execute("COMMIT")

    def get(self, limit: int) -> list[Message]:
        sql = "SELECT role, content, tool_calls, tool_call_id FROM messages WHERE session_id = ?"
        if limit:
            rows = self.conn.execute(
                sql + " ORDER BY id DESC LIMIT ?", (self.sid, limit)
            ).fetchall()
            rows.reverse()
        else:
            rows = self.conn.execute(sql + " ORDER BY id", (self.sid,)).fetchall()
        return [
            Message(
                r,
                c,
                [ToolCall(d["id"], d["name"], d["arguments"]) for d in json.loads(t)] if t else [],
                i or "",
            )
            for r, c, t, i in rows
        ]

    def search(self) -> list[tuple]:
        return self.conn.execute(SEARCH_SQL, SEARCH_ARGS).fetchall()

    def index_and_search(self) -> list[tuple]:
        """The store's catch-up indexing done by hand (same text expression), then search."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        c.execute(
            f"INSERT INTO messages_fts (rowid, body) SELECT new.id, {FTS_BODY} FROM messages AS new"
        )
        c.execute("COMMIT")
        return self.search()

    def close(self) -> None:
        self.conn.close()


# -- measuring ----------------------------------------------------------------------------


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


FIRST_SEARCH = "first search after 10,000 adds (catch-up indexing)"
STEADY_SEARCH = "search (index up to date)"


def bench_pair(
    tmp: Path, msgs: list[Message], singles: list[Message], repeats: int
) -> dict[str, tuple[float, float]]:
    """Medians for (plain, store). Both sides run each step back to back, alternating
    who goes first, so a burst of load on a shared machine hits them alike."""
    names = (
        "batch add 10,000",
        FIRST_SEARCH,
        STEADY_SEARCH,
        "get_messages(50)",
        "get_messages(0)",
        "200 single adds",
    )
    results: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in names}
    for rep in range(repeats):
        plain = Plain(tmp / f"plain-{rep}.db")
        manager = Manager(tmp / f"store-{rep}.db")
        session = manager.new_session()

        def store_search(manager=manager) -> object:
            return manager.search(QUERY)  # catches up first when anything is unindexed

        sides = [
            (0, plain.add, plain.get, plain.index_and_search, plain.search),
            (1, session.add_messages, session.get_messages, store_search, store_search),
        ]
        if rep % 2:
            sides.reverse()

        def both(name: str, step: Callable[..., object], sides=sides) -> None:
            for side, *ops in sides:
                results[name][side].append(timed(lambda ops=ops: step(*ops)))

        both("batch add 10,000", lambda add, get, first, search: add(msgs))
        both(FIRST_SEARCH, lambda add, get, first, search: first())
        for _ in range(20):
            both(STEADY_SEARCH, lambda add, get, first, search: search())
        hits = (len(plain.search()), len(manager.search(QUERY)))
        assert hits == (20, 20), f"the two sides found different numbers of hits: {hits}"
        for _ in range(20):
            both("get_messages(50)", lambda add, get, first, search: get(50))
        for _ in range(3):
            both("get_messages(0)", lambda add, get, first, search: get(0))
        for side, _, get, *_ in sides:
            assert get(0) == msgs, f"side {side} did not read back what it wrote"
        for _ in range(5):
            both("200 single adds", lambda add, get, first, search: [add([m]) for m in singles])
        plain.close()
        manager.close()
    return {k: tuple(statistics.median(x) for x in v) for k, v in results.items()}


def build_big_store(home: Path, sessions: int, per_session: int) -> None:
    msgs = make_messages(per_session, seed=1)
    with Manager(home / "sessions.db") as m:
        for _ in range(sessions):
            m.new_session().add_messages(msgs)


def process_median(cmd: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


FLOOR_LABEL = 'python -c "import typer"'


def fmt_s(seconds: float) -> str:
    return f"{seconds * 1000:9.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=5, help="repeats of each store operation")
    ap.add_argument("--runs", type=int, default=11, help="runs of each whole process")
    args = ap.parse_args()

    msgs = make_messages(N_MESSAGES)
    singles = make_messages(N_SINGLE, seed=2)
    avg = sum(
        len(m.content) + sum(len(c.arguments) + len(c.id) + len(c.name) for c in m.tool_calls)
        for m in msgs
    ) / len(msgs)
    print(
        f"python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}; "
        f"{N_MESSAGES} messages of {avg:.0f} bytes on average, "
        f"{sum(1 for m in msgs if m.tool_calls)} with tool calls; medians of {args.repeats} repeats"
    )
    print()
    with tempfile.TemporaryDirectory() as d:
        pairs = bench_pair(Path(d), msgs, singles, args.repeats)
    width = max(len(name) for name in pairs)
    print(f"{'operation':<{width}} {'plain sqlite3':>13} {'harness9':>13} {'ratio':>7}  target  ok")
    for name, (plain, store) in pairs.items():
        ratio = store / plain
        print(
            f"{name:<{width}} {fmt_s(plain):>13} {fmt_s(store):>13} {ratio:6.2f}x  < 2.00x  "
            f"{'yes' if ratio < 2 else 'NO'}"
        )

    print()
    with tempfile.TemporaryDirectory() as d:
        home = Path(d) / "home"
        t0 = time.perf_counter()
        build_big_store(home, 1000, 100)
        print(
            f"built a store of 1,000 sessions / 100,000 messages in {time.perf_counter() - t0:.1f} s "
            f"({(home / 'sessions.db').stat().st_size / 1e6:.0f} MB)"
        )
        env = dict(os.environ, HARNESS9_HOME=str(home), PYTHONPATH=str(REPO))
        env.pop("FORCE_COLOR", None)
        py = sys.executable
        base = process_median([py, "-c", "pass"], env, args.runs)
        # The floor any Typer command pays before parsing. A command with a non-flag option
        # (sessions list has --limit) also pays Typer's pydantic import for coercing it.
        floor = process_median([py, "-c", "import typer"], env, args.runs)
        listing = process_median([py, "-m", "harness9", "sessions", "list"], env, args.runs)
        as_json = process_median(
            [py, "-m", "harness9", "sessions", "list", "--json"], env, args.runs
        )
        # Last, so the listings above ran on the file as chat leaves it (nothing indexed).
        # One figure, not a median: it can happen only once per store.
        with Manager(home / "sessions.db") as m:
            t0 = time.perf_counter()
            indexed = m.catch_up_index()
            catch_up = time.perf_counter() - t0
    print(f"{'whole process':<34} {'median':>12} {'vs python -c pass':>18}  target    ok")
    print(f"{'python -c pass':<34} {fmt_s(base):>12} {'1.00x':>18}")
    print(f"{FLOOR_LABEL:<34} {fmt_s(floor):>12} {floor / base:17.2f}x  (framework floor)")
    for name, t in (
        ("harness9 sessions list", listing),
        ("harness9 sessions list --json", as_json),
    ):
        print(
            f"{name:<34} {fmt_s(t):>12} {t / base:17.2f}x  < 250 ms  {'yes' if t < 0.25 else 'NO'}"
        )
    print()
    print(
        f"first search's catch-up over that store: {indexed:,} messages indexed in "
        f"{catch_up:.2f} s, in one write transaction (other writers wait up to "
        f"busy_timeout = {BUSY_TIMEOUT_MS / 1000:.0f} s)"
    )


if __name__ == "__main__":
    main()
