"""Benchmark the session store against plain sqlite3 doing the same work, in one run.

    .venv/bin/python -m scripts.bench_store [--repeats 5] [--runs 11]
    .venv/bin/python -m scripts.bench_store --scale [--sessions 10000 --messages 1000000]

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
A second table times the road not taken, indexing at write time: plain sqlite3
with and without an FTS5 insert trigger doing the same adds.

``--scale`` builds a year's store instead (10,000 sessions, 1,000,000 messages, one
session of 5,000) through the public API, copies the file for the plain sqlite3
side, and measures both sides on the same data: ``sessions list`` (whole
processes), reading the 5,000-message session, the first search (the store
catches the index up in bounded steps; plain sqlite3 in one transaction), a warm
search, importing a 50,000-message export (the store in bounded steps, invisible
until the last; plain sqlite3 in one transaction, as the store did before), and
deleting the older half of the sessions (the store in bounded steps; plain
sqlite3 in one DELETE). Meanwhile another process per database saves one
message every 20 ms through the store's API, as a running chat does, and each
row shows the longest such save and how many failed during that operation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from harness9.schema import Message, ToolCall
from harness9.store.codec import message_values
from harness9.store.export import SessionSnapshot
from harness9.store.migrations import FTS_BODY
from harness9.store.search import (
    ELLIPSIS,
    HIGHLIGHT_CLOSE,
    HIGHLIGHT_OPEN,
    SNIPPET_TOKENS,
    to_fts_query,
)
from harness9.store.session import SessionInfo, StoredMessage
from harness9.store.sqlite import BUSY_TIMEOUT_MS, STEP_TARGET_S, Manager
from harness9.store.sqlite_search import SEARCH_SQL as STORE_SEARCH_SQL
from scripts.bench_process import MINIMAL_TYPER_APP, MINIMAL_TYPER_LABEL, compile_bytecode

REPO = Path(__file__).resolve().parent.parent

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
SEARCH_SQL = STORE_SEARCH_SQL + " ORDER BY bm25(messages_fts), m.id DESC LIMIT 20"
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


def bench_write_time_indexing(
    tmp: Path, msgs: list[Message], singles: list[Message], repeats: int
) -> dict[str, tuple[float, float]]:
    """Medians for (deferred, at write time): the choice the store's fts_index made."""
    out: dict[str, tuple[list[float], list[float]]] = {
        "batch add 10,000": ([], []),
        "200 single adds": ([], []),
    }
    for rep in range(repeats):
        for eager in (rep % 2, 1 - rep % 2):
            plain = Plain(tmp / f"eager-{rep}-{eager}.db")
            if eager:
                plain.conn.execute(
                    "CREATE TRIGGER index_now AFTER INSERT ON messages BEGIN "
                    f"INSERT INTO messages_fts (rowid, body) VALUES (new.id, {FTS_BODY}); END"
                )
            out["batch add 10,000"][eager].append(timed(lambda p=plain: p.add(msgs)))
            out["200 single adds"][eager].append(
                timed(lambda p=plain: [p.add([m]) for m in singles])
            )
            plain.close()
    return {k: (statistics.median(a), statistics.median(b)) for k, (a, b) in out.items()}


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


# -- --scale: a year's store, with a concurrent writer ------------------------------------------

SHOW_MESSAGES = 5_000
WRITE_EVERY_S = 0.02
LIST_ROW = "sessions list (whole process)"
SCALE_QUERY = "nightly build"  # in about 1 message in 2,000, as a real search term is
SCALE_POOL = 20_000
SCALE_ARGS = (*SEARCH_ARGS[:-1], to_fts_query(SCALE_QUERY))


def make_scale_messages(n: int, seed: int) -> list[Message]:
    """Like make_messages, but the words follow a Zipf law over a 4,000-word vocabulary
    (real text has rare words; ten words in every message would make every query match
    every message) and one message in 2,000 mentions the nightly build."""
    rnd = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ter", "sun", "vel", "dra", "po", "qui", "zen"]
    stems = [a + b + c for a in syllables for b in syllables for c in syllables]  # 1,000
    vocab = [stem + end for end in ("", "s", "er", "ing") for stem in stems]
    weights = [1 / (k + 1) for k in range(len(vocab))]

    def text(size: int) -> str:
        words = rnd.choices(vocab, weights, k=size // 5)
        return " ".join(words)[:size]

    msgs = make_messages(n, seed)
    out = []
    for i, m in enumerate(msgs):
        body = text(len(m.content))
        if i % 2000 == 7:
            body = "the nightly build failed again: " + body
        out.append(Message(m.role, body, m.tool_calls, m.tool_call_id))
    return out


def writer_main(db: str, sid: str, stop: str) -> None:
    """Child process: save one message every WRITE_EVERY_S until ``stop`` exists.

    Prints one JSON list of [wall-clock start, seconds waited, ok] per save.
    """
    out: list[list[object]] = []
    with Manager(db) as m:
        s = m.open_session(sid)
        Path(stop + ".ready").touch()
        i = 0
        while not Path(stop).exists():
            start, t0 = time.time(), time.perf_counter()
            try:
                s.add_messages([Message("user", f"concurrent save {i}")])
                ok = True
            except Exception:  # noqa: BLE001 - counted as a failed save
                ok = False
            out.append([start, time.perf_counter() - t0, ok])
            i += 1
            time.sleep(WRITE_EVERY_S)
    print(json.dumps(out))


class ConcurrentWriter:
    """Another process saving to ``db`` as a running chat does, until ``finish``."""

    def __init__(self, db: Path, sid: str, stop: Path) -> None:
        self.stop = stop
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scripts.bench_store", "--writer", str(db), sid, str(stop)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        while not Path(str(stop) + ".ready").exists():
            if self.proc.poll() is not None:
                raise SystemExit("the concurrent writer did not start")
            time.sleep(0.01)

    def finish(self) -> list[tuple[float, float, bool]]:
        self.stop.touch()
        out, _ = self.proc.communicate(timeout=600)
        return [(float(a), float(b), bool(c)) for a, b, c in json.loads(out)]


def build_scale_store(db: Path, sessions: int, messages: int) -> tuple[str, float]:
    """The store through the public API, one add_messages per session.

    Half the sessions are built before the returned cutoff and half after, so
    ``delete --older-than`` the cutoff removes half. Returns (the id of the
    SHOW_MESSAGES-message session, the cutoff).
    """
    per, extra = divmod(messages - SHOW_MESSAGES, sessions - 1)
    pool = make_scale_messages(SCALE_POOL + per + 1, seed=3)
    cutoff = 0.0
    t0 = time.perf_counter()
    with Manager(db) as m:
        big = m.new_session()
        big.add_messages(make_scale_messages(SHOW_MESSAGES, seed=4))
        for i in range(sessions - 1):
            if i == sessions // 2 - 1:
                time.sleep(0.05)
                cutoff = time.time()
                time.sleep(0.05)
            at = (i * 7919) % SCALE_POOL  # a different slice of the pool for each session
            m.new_session().add_messages(pool[at : at + per + (1 if i < extra else 0)])
            if i % 2000 == 1998:
                print(f"  {i + 2:,} sessions in {time.perf_counter() - t0:.0f} s", flush=True)
    return big.session_id, cutoff


PLAIN_LIST = (
    "import sqlite3, sys\n"
    "c = sqlite3.connect(sys.argv[1])\n"
    "rows = c.execute('SELECT id, created_at, updated_at, message_count, title FROM sessions "
    "ORDER BY updated_at DESC, created_at DESC, rowid DESC').fetchall()\n"
    "sys.stdout.write(''.join(f'{r[0]}  {r[3]}  {r[4]}\\n' for r in rows))\n"
)


def plain_read(conn: sqlite3.Connection, sid: str) -> list[Message]:
    rows = conn.execute(
        "SELECT role, content, tool_calls, tool_call_id FROM messages WHERE session_id = ? "
        "ORDER BY id",
        (sid,),
    ).fetchall()
    return [
        Message(
            r,
            c,
            [ToolCall(d["id"], d["name"], d["arguments"]) for d in json.loads(t)] if t else [],
            i or "",
        )
        for r, c, t, i in rows
    ]


def plain_first_search(conn: sqlite3.Connection) -> list[tuple]:
    """The catch-up done by hand in one transaction (as the store did before), then search."""
    conn.execute("BEGIN IMMEDIATE")
    (upto,) = conn.execute("SELECT indexed_upto FROM fts_state").fetchone()
    conn.execute(
        f"INSERT INTO messages_fts (rowid, body) SELECT new.id, {FTS_BODY} "
        "FROM messages AS new WHERE new.id > ?",
        (upto,),
    )
    conn.execute("UPDATE fts_state SET indexed_upto = (SELECT max(id) FROM messages)")
    conn.execute("COMMIT")
    return conn.execute(SEARCH_SQL, SCALE_ARGS).fetchall()


IMPORT_MESSAGES = 50_000


def scale_export() -> SessionSnapshot:
    """A 50,000-message session as ``sessions import`` reads it from an export."""
    now = time.time()
    msgs = make_scale_messages(IMPORT_MESSAGES, seed=5)
    records = [StoredMessage(i + 1, m, now) for i, m in enumerate(msgs)]
    info = SessionInfo(str(uuid.uuid4()), now, now, len(records), "imported")
    return SessionSnapshot(info, records, [], [])


def plain_import(conn: sqlite3.Connection, snap: SessionSnapshot) -> int:
    """The same rows in one transaction, as the store's import did before."""
    sid, info = str(uuid.uuid4()), snap.info
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "INSERT INTO sessions (id, created_at, updated_at, title, message_count) "
        "VALUES (?, ?, ?, ?, ?)",
        (sid, info.created_at, info.updated_at, info.title, len(snap.records)),
    )
    conn.executemany(
        "INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, offload_id, "
        "offload_tokens, metadata, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(sid, *message_values(r.message), r.created_at) for r in snap.records],
    )
    conn.execute("COMMIT")
    return len(snap.records)


def plain_delete(conn: sqlite3.Connection, cutoff: float) -> int:
    conn.execute("BEGIN IMMEDIATE")
    n = conn.execute("DELETE FROM sessions WHERE updated_at < ?", (cutoff,)).rowcount
    conn.execute("COMMIT")
    return n


def run_scale(sessions: int, messages: int, runs: int) -> int:
    print(
        f"python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}; building "
        f"{sessions:,} sessions / {messages:,} messages through the public API"
    )
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        home, plain_home = tmp / "home", tmp / "plain"
        home.mkdir()
        plain_home.mkdir()
        db, plain_db = home / "sessions.db", plain_home / "sessions.db"
        t0 = time.perf_counter()
        big_id, cutoff = build_scale_store(db, sessions, messages)
        built = time.perf_counter() - t0
        with Manager(db) as m:
            writer_sid = m.new_session().session_id  # created now: never "older"
        shutil.copyfile(db, plain_db)  # closed, so the WAL was checkpointed into the file
        print(
            f"built in {built:.0f} s ({db.stat().st_size / 1e6:,.0f} MB), copied for plain sqlite3"
        )

        env = dict(os.environ, HARNESS9_HOME=str(home), PYTHONPATH=str(REPO))
        env.pop("FORCE_COLOR", None)
        py = sys.executable
        writers = {
            "plain": ConcurrentWriter(plain_db, writer_sid, tmp / "stop-plain"),
            "store": ConcurrentWriter(db, writer_sid, tmp / "stop-store"),
        }
        windows: list[tuple[str, str, float, float]] = []  # (row, side, start, end)
        results: dict[str, dict[str, float]] = {}

        def measure(row: str, side: str, fn: Callable[[], object], repeat: int = 1) -> object:
            times, value = [], None
            for _ in range(repeat):
                start, t = time.time(), time.perf_counter()
                value = fn()
                times.append(time.perf_counter() - t)
                windows.append((row, side, start, time.time()))
            results.setdefault(row, {})[side] = statistics.median(times)
            return value

        print(compile_bytecode())
        floor = process_median([py, "-c", "import typer"], env, runs)
        typer_app = process_median([py, "-c", MINIMAL_TYPER_APP], env, runs)
        list_cmds = {
            "plain": [py, "-c", PLAIN_LIST, str(plain_db)],
            "store": [py, "-m", "harness9", "sessions", "list"],
        }
        for side, cmd in list_cmds.items():
            start = time.time()
            results.setdefault(LIST_ROW, {})[side] = process_median(cmd, env, runs)
            windows.append((LIST_ROW, side, start, time.time()))
        plain = sqlite3.connect(plain_db, isolation_level=None)
        plain.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        plain.execute("PRAGMA foreign_keys = ON")
        store = Manager(db)
        show = f"show of a {SHOW_MESSAGES:,}-message session"
        a = measure(show, "plain", lambda: plain_read(plain, big_id), repeat=3)
        b = measure(show, "store", lambda: store.open_session(big_id).get_messages(), repeat=3)
        assert a == b, "the two sides read different messages"
        first = f"first search ({messages:,} messages to index)"
        print(f"first searches ({messages:,} messages to index on each side)…", flush=True)
        a = measure(first, "plain", lambda: plain_first_search(plain))
        b = measure(first, "store", lambda: store.search(SCALE_QUERY))
        assert isinstance(a, list) and isinstance(b, list) and len(a) == len(b) > 0
        warm = "warm search (median of 5)"
        measure(warm, "plain", lambda: plain.execute(SEARCH_SQL, SCALE_ARGS).fetchall(), 5)
        measure(warm, "store", lambda: store.search(SCALE_QUERY), 5)
        imported = f"import of a {IMPORT_MESSAGES:,}-message export"
        export = scale_export()
        a = measure(imported, "plain", lambda: plain_import(plain, export))
        b = measure(
            imported,
            "store",
            lambda: store.session_info(store.restore(export, new_id=True)).message_count,
        )
        assert a == b == IMPORT_MESSAGES, f"the two sides imported {a} and {b} messages"
        half = f"delete --older-than ({sessions // 2:,} sessions)"
        a = measure(half, "plain", lambda: plain_delete(plain, cutoff))
        b = measure(half, "store", lambda: len(store.delete_sessions_older_than(cutoff)))
        assert a == b == sessions // 2, f"the two sides deleted {a} and {b} sessions"
        plain.close()
        store.close()
        saves = {side: w.finish() for side, w in writers.items()}

    def writer_figures(row: str, side: str) -> tuple[float, int, int]:
        """(longest wait, failed, made) of the saves that overlapped ``row`` on ``side``."""
        spans = [(s, e) for r, sd, s, e in windows if r == row and sd == side]
        mine = [
            (wait, ok)
            for start, wait, ok in saves[side]
            if any(start <= e and start + wait >= s for s, e in spans)
        ]
        return max((w for w, _ in mine), default=0.0), sum(not ok for _, ok in mine), len(mine)

    print()
    width = max(len(r) for r in results)
    head = "concurrent saves: longest (failed/made)"
    print(f"{'operation':<{width}} {'plain sqlite3':>13} {'harness9':>13} {'ratio':>7}   {head}")
    print(f"{'':<{width}} {'':>13} {'':>13} {'':>7}   {'plain sqlite3':>20} {'harness9':>20}")
    worst, failed = 0.0, 0
    for row, sides in results.items():
        cells = []
        for side in ("plain", "store"):
            wait, bad, made = writer_figures(row, side)
            cells.append(f"{wait * 1000:7.0f} ms ({bad}/{made})")
            if side == "store":
                worst, failed = max(worst, wait), failed + bad
        print(
            f"{row:<{width}} {fmt_s(sides['plain']):>13} {fmt_s(sides['store']):>13} "
            f"{sides['store'] / sides['plain']:6.2f}x   {cells[0]:>20} {cells[1]:>20}"
        )
    listing = results[LIST_ROW]["store"]
    warm_s = results[warm]["store"]
    checks = [
        (f"every concurrent save waits < 1 s (longest {worst * 1000:.0f} ms)", worst < 1.0),
        (f"no concurrent save fails ({failed} failed)", failed == 0),
        (f"warm search < 100 ms ({warm_s * 1000:.1f} ms)", warm_s < 0.1),
        (
            f"sessions list within 1.3x of {FLOOR_LABEL} ({listing * 1000:.0f} ms vs "
            f"{floor * 1000:.0f} ms: {listing / floor:.2f}x)",
            listing < 1.3 * floor,
        ),
    ]
    print()
    print(
        f"framework floor: {MINIMAL_TYPER_LABEL} {typer_app * 1000:.0f} ms "
        f"({typer_app / floor:.2f}x {FLOOR_LABEL}); sessions list is {listing / typer_app:.2f}x it"
    )
    print()
    for text, ok in checks:
        print(f"{'ok' if ok else 'NO'}  {text}")
    return 0 if all(ok for _, ok in checks) else 1


def fmt_s(seconds: float) -> str:
    return f"{seconds * 1000:9.2f} ms"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        writer_main(*sys.argv[2:5])
        return
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=5, help="repeats of each store operation")
    ap.add_argument("--runs", type=int, default=11, help="runs of each whole process")
    ap.add_argument("--scale", action="store_true", help="the year's-store run (minutes)")
    ap.add_argument("--sessions", type=int, default=10_000, help="--scale: sessions")
    ap.add_argument("--messages", type=int, default=1_000_000, help="--scale: messages")
    ap.add_argument(
        "--database-url",
        metavar="URL",
        help="also benchmark the PostgreSQL store on this server ('temp': a throwaway one); "
        "see scripts/bench_store_pg.py",
    )
    ap.add_argument("--seconds", type=float, default=10, help="concurrent writers: seconds per run")
    args = ap.parse_args()
    if args.scale:
        raise SystemExit(run_scale(args.sessions, args.messages, args.runs))

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
        eager = bench_write_time_indexing(Path(d), msgs, singles, args.repeats)
    print("indexing at write time instead (plain sqlite3 with an FTS5 insert trigger; not used):")
    for name, (deferred, at_write) in eager.items():
        print(
            f"  {name:<{width - 2}} {fmt_s(deferred):>13} {fmt_s(at_write):>13} "
            f"{at_write / deferred:6.2f}x  < 2.00x  {'yes' if at_write / deferred < 2 else 'NO'}"
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
        print(compile_bytecode())
        base = process_median([py, "-c", "pass"], env, args.runs)
        # `import typer` is the floor the target names; a Typer 0.29+ command that parses
        # any option also builds pydantic adapters (Typer's coercion), as the small app does.
        floor = process_median([py, "-c", "import typer"], env, args.runs)
        typer_app = process_median([py, "-c", MINIMAL_TYPER_APP], env, args.runs)
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
    print(f"{FLOOR_LABEL:<34} {fmt_s(floor):>12} {floor / base:17.2f}x")
    print(
        f"{MINIMAL_TYPER_LABEL:<34} {fmt_s(typer_app):>12} {typer_app / base:17.2f}x  (framework floor)"
    )
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
        f"{catch_up:.2f} s, in steps of about {STEP_TARGET_S * 1000:.0f} ms (another writer "
        "waits about one step; --scale measures it)"
    )
    if args.database_url:
        from scripts.bench_store_pg import report

        with tempfile.TemporaryDirectory() as d:
            report(
                args.database_url,
                msgs,
                singles,
                args.repeats,
                QUERY,
                args.seconds,
                pairs,
                Path(d),
                export=scale_export(),
            )


if __name__ == "__main__":
    main()
