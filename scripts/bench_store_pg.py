"""The PostgreSQL half of ``scripts/bench_store.py --database-url URL`` (and concurrent writers).

Single-store figures: the store (harness9.store.postgres) against plain psycopg
doing the same work on the same server, in the same tables (the store's own
schema, so both sides pay the same indexes), the same SELECT decoded into the same
Message objects, and the same full-text query. The ratio is the cost of the store's
own layer. The baseline is the strongest faithful version of each, written as
PostgreSQL's manual advises for loading data ("Populating a Database": one
transaction, ``COPY`` rather than INSERTs) through psycopg 3's ``cursor.copy()``
(its documentation's "Using COPY TO and COPY FROM"):

- a batch: the session-row UPDATE, one ``nextval`` round trip for the ids (handed
  back, as the store's API does) and one ``COPY`` of the rows, in one transaction;
- an import: the session row and one ``COPY`` of the rows, in one transaction;
- a single message: the session-row UPDATE and an INSERT in one transaction.

The indexing work is the store's too (harness9.store.pg_index): a single message is
written with its search document (``search_document``), a batch or an import without
(as the SQLite store writes everything), and the first search after it computes the
documents: the baseline in one UPDATE of its session's rows, the store in bounded steps,
each side then running the same query. That row runs the baseline first: the store's
catch-up indexes every unindexed row of the database, the baseline's would too.

Targets (issue 23): the store's 10,000-message batch within 5x of the SQLite store's
time for the same batch on this machine; a 50,000-message import under 3 s; and
another process saving a message every 20 ms to its own session while the import
runs (a writer on another machine) never waits: its longest save under 250 ms.

Concurrent writers: 8 processes append single messages for N seconds, each to its
own session, then all to one session; committed messages per second, and a check
that every acknowledged message is stored, in each writer's order (0 lost).

``--database-url temp`` starts a throwaway server (tests/support/pg_server.py) with
PostgreSQL's default durability (fsync and synchronous_commit on).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from harness9.schema import Message, ToolCall
from harness9.store.codec import message_values
from harness9.store.export import SessionSnapshot
from harness9.store.pg_index import EAGER_ROWS
from harness9.store.pg_search import parse, to_tsquery_text

REPO = Path(__file__).resolve().parent.parent
WRITERS = 8
BATCH_VS_SQLITE_TARGET = 5.0
IMPORT_TARGET_S = 3.0
IMPORT_SAVE_TARGET_S = 0.25
_NEXT_IDS = (
    "SELECT nextval(pg_get_serial_sequence('harness9.messages', 'id')) FROM generate_series(1, %s)"
)
_COPY = (
    "COPY messages (id, session_id, role, content, tool_calls, tool_call_id, offload_id, "
    "offload_tokens, created_at) FROM STDIN"
)
_INSERT_ONE = (
    "INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, offload_id, "
    "offload_tokens, created_at, search) SELECT v.*, search_document(v.content, v.tool_calls) "
    "FROM (VALUES (%s, %s::text, %s::text, %s::text, %s::text, %s::text, %s::integer, "
    "%s::float8)) AS v (session_id, role, content, tool_calls, tool_call_id, offload_id, "
    "offload_tokens, created_at) RETURNING id"
)
_INDEX_SESSION = (
    "UPDATE messages SET search = search_document(content, tool_calls) "
    "WHERE session_id = %s AND search IS NULL"
)


@contextmanager
def database(url: str) -> Iterator[str]:
    """``url``, or a throwaway durable server when ``url`` is "temp"."""
    if url != "temp":
        yield url
        return
    from tests.support.pg_server import PgCluster, find_binaries

    bin_dir, why = find_binaries()
    if bin_dir is None:
        raise SystemExit(why)
    cluster = PgCluster(bin_dir, durable=True)
    try:
        cluster.start()
        yield cluster.create_database("bench")
    finally:
        cluster.stop()


class PlainPg:
    """Hand-written psycopg on the store's tables: the baseline."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute("SET search_path TO harness9")
        self.sid = str(uuid.uuid4())
        now = time.time()
        self.conn.execute(
            "INSERT INTO sessions (id, created_at, updated_at) VALUES (%s, %s, %s)",
            (self.sid, now, now),
        )
        self.imported: list[str] = []

    def add(self, msgs: list[Message]) -> None:
        now = time.time()
        rows = [
            (
                self.sid,
                m.role,
                m.content,
                json.dumps([c.to_flat() for c in m.tool_calls]) if m.tool_calls else None,
                m.tool_call_id or None,
                "",  # offload_id: not offloaded, as the store writes it
                None,
                now,
            )
            for m in msgs
        ]
        with self.conn.transaction():
            self.conn.execute(
                "UPDATE sessions SET updated_at = %s, message_count = message_count + %s "
                "WHERE id = %s",
                (now, len(rows), self.sid),
            )
            if len(rows) <= EAGER_ROWS:  # what the store indexes as it writes
                self.conn.cursor().executemany(_INSERT_ONE, rows)
                return
            ids = [r[0] for r in self.conn.execute(_NEXT_IDS, (len(rows),))]
            with self.conn.cursor().copy(_COPY) as copy:
                for rid, row in zip(sorted(ids), rows, strict=True):
                    copy.write_row((rid, *row))

    def import_snapshot(self, snap: SessionSnapshot) -> int:
        """The session row and its messages, one COPY, one transaction."""
        sid, info = str(uuid.uuid4()), snap.info
        with self.conn.transaction():
            self.conn.execute(
                "INSERT INTO sessions (id, created_at, updated_at, title, message_count) "
                "VALUES (%s, %s, %s, %s, %s)",
                (sid, info.created_at, info.updated_at, info.title, len(snap.records)),
            )
            columns = (
                "session_id, role, content, tool_calls, tool_call_id, offload_id, "
                "offload_tokens, metadata, created_at"
            )
            with self.conn.cursor().copy(f"COPY messages ({columns}) FROM STDIN") as copy:
                for r in snap.records:
                    copy.write_row((sid, *message_values(r.message, r.offload), r.created_at))
        self.imported.append(sid)
        return len(snap.records)

    def get(self, limit: int) -> list[Message]:
        sql = "SELECT role, content, tool_calls, tool_call_id FROM messages WHERE session_id = %s"
        if limit:
            rows = self.conn.execute(
                sql + " ORDER BY id DESC LIMIT %s", (self.sid, limit)
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

    def index_and_search(self, query: str) -> list[tuple]:
        """The documents the batch left out, in one statement, then the search."""
        self.conn.execute(_INDEX_SESSION, (self.sid,))
        return self.search(query)

    def search(self, query: str) -> list[tuple]:
        tsq = to_tsquery_text(parse(query))
        # The store's query: rank the matches first, then read the text of the 20 kept.
        return self.conn.execute(
            "WITH q AS (SELECT to_tsquery('pg_catalog.simple', %s) AS q), "
            "hits AS (SELECT m.id, ts_rank(m.search, q.q) AS rank FROM messages AS m, q "
            "WHERE m.search @@ q.q ORDER BY rank DESC, m.id DESC LIMIT 20) "
            "SELECT m.session_id, m.id, m.role, m.created_at, s.title, "
            "left(search_body(m.content, m.tool_calls), 150000), hits.rank "
            "FROM hits JOIN messages AS m ON m.id = hits.id "
            "JOIN sessions AS s ON s.id = m.session_id ORDER BY hits.rank DESC, hits.id DESC",
            (tsq,),
        ).fetchall()

    def close(self) -> None:
        for sid in [self.sid, *self.imported]:
            self.conn.execute("DELETE FROM sessions WHERE id = %s", (sid,))
        self.conn.close()


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_pg_pair(
    url: str, msgs: list[Message], singles: list[Message], repeats: int, query: str
) -> dict[str, tuple[float, float]]:
    """Medians for (plain psycopg, store), alternating who goes first."""
    from harness9.store.postgres import PostgresManager

    names = (
        "batch add 10,000",
        "first search after 10,000 adds",
        "search",
        "get_messages(50)",
        "get_messages(0)",
        "200 single adds",
    )
    results: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in names}
    manager = PostgresManager(url)  # migrates the schema the baseline writes into
    for rep in range(repeats):
        plain = PlainPg(url)
        session = manager.new_session()

        def store_search(manager: PostgresManager = manager) -> object:
            return manager.search(query)

        sides = [
            (0, plain.add, plain.get, lambda plain=plain: plain.search(query)),
            (1, session.add_messages, session.get_messages, store_search),
        ]
        if rep % 2:
            sides.reverse()

        def both(name: str, step: Callable[..., object], sides=sides) -> None:
            for side, *ops in sides:
                results[name][side].append(timed(lambda ops=ops: step(*ops)))

        both("batch add 10,000", lambda add, get, search: add(msgs))
        firsts = {
            0: lambda plain=plain: plain.index_and_search(query),
            1: lambda manager=manager: manager.search(query),
        }
        for side in (0, 1):  # the baseline first (see the module docstring)
            results["first search after 10,000 adds"][side].append(timed(firsts[side]))
        hits = (len(plain.search(query)), len(manager.search(query)))
        assert hits == (20, 20), f"the two sides found different numbers of hits: {hits}"
        for _ in range(20):
            both("search", lambda add, get, search: search())
        for _ in range(20):
            both("get_messages(50)", lambda add, get, search: get(50))
        for _ in range(3):
            both("get_messages(0)", lambda add, get, search: get(0))
        for side, _, get, _ in sides:
            assert get(0) == msgs, f"side {side} did not read back what it wrote"
        for _ in range(5):
            both("200 single adds", lambda add, get, search: [add([m]) for m in singles])
        plain.close()
        manager.delete_session(session.session_id)
    manager.close()
    return {k: tuple(statistics.median(x) for x in v) for k, v in results.items()}


# -- concurrent writers --------------------------------------------------------------------


def _open(target: str):  # noqa: ANN202 - either store
    from harness9.store.backend import open_url

    return open_url(target)


def writer_main(target: str, sid: str, seconds: float, tag: str) -> None:
    """Append single messages until the deadline; print how many were acknowledged."""
    done = 0
    with _open(target) as store:
        session = store.open_session(sid)
        print("ready", flush=True)
        sys.stdin.readline()  # start together
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            session.add_messages([Message("user", f"{tag}:{done}")])
            done += 1
    print(done, flush=True)


def concurrent_writers(target: str, seconds: float, *, same_session: bool) -> tuple[float, int]:
    """(messages committed per second, messages lost) for WRITERS processes."""
    with _open(target) as store:
        sids = [store.new_session().session_id for _ in range(1 if same_session else WRITERS)]
    procs = []
    for k in range(WRITERS):
        sid = sids[0] if same_session else sids[k]
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "scripts.bench_store_pg",
                    "writer",
                    target,
                    sid,
                    str(seconds),
                    f"w{k}",
                ],
                cwd=REPO,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    t0 = time.perf_counter()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    acked = {}
    for k, p in enumerate(procs):
        out, _ = p.communicate(timeout=seconds + 120)
        if p.returncode != 0:
            raise SystemExit(f"writer {k} failed (exit {p.returncode})")
        acked[f"w{k}"] = int(out.strip().splitlines()[-1])
    elapsed = time.perf_counter() - t0
    stored: dict[str, list[int]] = {tag: [] for tag in acked}
    with _open(target) as store:
        for sid in sids:
            for m in store.open_session(sid).get_messages():
                tag, n = m.content.split(":")
                stored[tag].append(int(n))
        for sid in sids:
            store.delete_session(sid)
    lost = 0
    for tag, count in acked.items():
        if stored[tag] != list(range(count)):  # every acknowledged one, in the writer's order
            lost += max(1, count - len(stored[tag]))
    del elapsed  # includes start-up and exit; the writers wrote for exactly `seconds`
    return sum(acked.values()) / seconds, lost


def saver_main(target: str, sid: str, stop: str) -> None:
    """Save one message every 20 ms until ``stop`` exists; print the longest save and count."""
    longest, made = 0.0, 0
    with _open(target) as store:
        session = store.open_session(sid)
        print("ready", flush=True)
        sys.stdin.readline()
        while not Path(stop).exists():
            t0 = time.perf_counter()
            session.add_messages([Message("user", f"save {made}")])
            took = time.perf_counter() - t0
            longest, made = max(longest, took), made + 1
            time.sleep(max(0.0, 0.02 - took))
    print(f"{longest} {made}", flush=True)


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "writer":
    writer_main(sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5])
if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "saver":
    saver_main(sys.argv[2], sys.argv[3], sys.argv[4])


@contextmanager
def saving_meanwhile(target: str, tmp: Path) -> Iterator[list[float]]:
    """Another process saving every 20 ms to its own session while the block runs; the
    yielded list gets (longest save in seconds, saves made) when the block ends."""
    with _open(target) as store:
        sid = store.new_session().session_id
    stop = tmp / f"stop-{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "scripts.bench_store_pg", "saver", target, sid, str(stop)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.stdin.write("go\n")
    proc.stdin.flush()
    time.sleep(0.2)  # a few saves before the block starts
    out: list[float] = []
    try:
        yield out
    finally:
        time.sleep(0.1)
        stop.touch()
        text, _ = proc.communicate(timeout=60)
        longest, made = text.split()
        out += [float(longest), float(made)]
        with _open(target) as store:
            store.delete_session(sid)


def bench_import(
    url: str, snap: SessionSnapshot, repeats: int, tmp: Path
) -> tuple[float, float, float]:
    """(plain psycopg s, store s) medians of importing ``snap``, and the longest save
    another process made while the store imported."""
    from harness9.store.postgres import PostgresManager

    plain_t, store_t, longest = [], [], 0.0
    manager = PostgresManager(url)
    plain = PlainPg(url)
    for _ in range(repeats):
        plain_t.append(timed(lambda: plain.import_snapshot(snap)))
        with saving_meanwhile(url, tmp) as saves:
            t0 = time.perf_counter()
            sid = manager.restore(snap, new_id=True)
            store_t.append(time.perf_counter() - t0)
        longest = max(longest, saves[0])
        assert manager.session_info(sid).message_count == len(snap.records)
        manager.delete_session(sid)
    plain.close()
    manager.close()
    return statistics.median(plain_t), statistics.median(store_t), longest


def _ok(good: bool) -> str:
    return "ok" if good else "NO"


def print_targets(
    pg_batch: float, sqlite_batch: float, imports: tuple[float, float, float], n: int
) -> None:
    plain_s, store_s, longest = imports
    ratio = pg_batch / sqlite_batch
    print()
    print(f"{'target':<58} {'figure':>24}  ok")
    print(
        f"{'batch add 10,000: PG store within 5x of SQLite store':<58} "
        f"{f'{ratio:.2f}x ({pg_batch * 1000:.0f} ms)':>24}  "
        f"{_ok(ratio <= BATCH_VS_SQLITE_TARGET)}"
    )
    print(
        f"{f'import of a {n:,}-message export under 3 s':<58} "
        f"{f'{store_s:.2f} s (psycopg {plain_s:.2f} s)':>24}  {_ok(store_s < IMPORT_TARGET_S)}"
    )
    print(
        f"{'another writer never waits: longest save during it < 250 ms':<58} "
        f"{f'{longest * 1000:.0f} ms':>24}  {_ok(longest < IMPORT_SAVE_TARGET_S)}"
    )


def report(
    url: str,
    msgs: list[Message],
    singles: list[Message],
    repeats: int,
    query: str,
    seconds: float,
    sqlite_pairs: dict[str, tuple[float, float]],
    tmp: Path,
    export: SessionSnapshot | None = None,
) -> None:
    """Print the PostgreSQL table next to SQLite's, then the concurrent-writer figures."""
    import psycopg

    with database(url) as db:
        with psycopg.connect(db) as conn:
            version = conn.execute("SHOW server_version").fetchone()
        print()
        print(
            f"PostgreSQL {version[0] if version else '?'}, psycopg {psycopg.__version__}; "
            f"medians of {repeats} repeats, same messages"
        )
        pg = bench_pg_pair(db, msgs, singles, repeats, query)
        same = {
            "batch add 10,000": "batch add 10,000",
            "first search after 10,000 adds": (
                "first search after 10,000 adds (catch-up indexing)"
            ),
            "search": "search (index up to date)",
            "get_messages(50)": "get_messages(50)",
            "get_messages(0)": "get_messages(0)",
            "200 single adds": "200 single adds",
        }
        width = max(len(k) for k in same)
        # SQLite store (ratio vs plain sqlite3, from the table above), then PostgreSQL store
        # against plain psycopg.
        print(
            f"{'operation':<{width}} {'SQLite store':>12} {'ratio':>7}   {'PG store':>11} "
            f"{'psycopg':>11} {'ratio':>7}  target  ok"
        )
        for name, sqlite_name in same.items():
            sp, ss = sqlite_pairs.get(sqlite_name, (float("nan"), float("nan")))
            pp, ps = pg[name]
            ratio = ps / pp
            print(
                f"{name:<{width}} {ss * 1000:9.2f} ms {ss / sp:6.2f}x   {ps * 1000:8.2f} ms "
                f"{pp * 1000:8.2f} ms {ratio:6.2f}x  < 2.00x  {'yes' if ratio < 2 else 'NO'}"
            )
        if export is not None:
            imports = bench_import(db, export, max(1, repeats // 2), tmp)
            sqlite_batch = sqlite_pairs["batch add 10,000"][1]
            print_targets(pg["batch add 10,000"][1], sqlite_batch, imports, len(export.records))
        print()
        print(f"{WRITERS} writer processes appending single messages for {seconds:.0f} s")
        print(f"{'backend':<12} {'sessions':<18} {'messages/s':>11} {'lost':>5}")
        for backend, target in (("SQLite", str(tmp / "writers.db")), ("PostgreSQL", db)):
            for same_session in (False, True):
                rate, lost = concurrent_writers(target, seconds, same_session=same_session)
                where = "one shared" if same_session else "one each"
                print(f"{backend:<12} {where:<18} {rate:11.0f} {lost:5d}")
