"""How long ``harness9 sessions fork`` takes on a large session, on either store.

Builds one session of ``--messages`` messages (user/assistant text and tool calls with
results, 60-400 bytes each), adds three checkpoints, then times ``fork_session`` at
the last message and at the middle, ``--repeat`` times each (median and max; "ok"
when the median is within the 0.25 s target), then ``harness9 sessions fork`` run
in-process through the CLI (the command's own cost, without the interpreter's start),
then one read of every message of the origin and of a fork (a fork's reads resolve
its inherited rows). A fork shares its origin's rows (harness9.store.lineage): it
writes no message row, whatever the session's length.

    python -m scripts.bench_fork                         # SQLite, 100,000 messages
    python -m scripts.bench_fork --database-url temp     # a throwaway PostgreSQL too
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from harness9.schema import Message, ToolCall
from harness9.store.backend import SessionStore, open_url
from harness9.store.session import Checkpoint


def fill(store: SessionStore, count: int) -> str:
    s = store.new_session()
    batch: list[Message] = []
    for i in range(count):
        kind = i % 4
        if kind == 0:
            batch.append(Message("user", f"step {i}: look at module {i % 97} " + "why " * 10))
        elif kind == 1:
            call = ToolCall(f"c{i}", "read_file", f'{{"path": "src/m{i % 97}.py"}}')
            batch.append(Message("assistant", "", [call]))
        elif kind == 2:
            batch.append(Message("tool", "def f():\n    return 1\n" * 15, tool_call_id=f"c{i - 1}"))
        else:
            batch.append(Message("assistant", f"module {i % 97} is fine " + "ok " * 20))
        if len(batch) == 10_000:
            s.add_messages(batch)
            batch = []
    ids = [r.id for r in s.get_records()]
    if batch:
        ids += s.add_messages(batch)
    for frac in (0.25, 0.5, 0.75):
        s.add_checkpoint(Checkpoint(ids[int(len(ids) * frac)], "summary", "summarize", 1, 1, 1, 1))
    return s.session_id


TARGET_S = 0.25


def measure(store: SessionStore, sid: str, at: int, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fork = store.fork_session(sid, at)
        times.append(time.perf_counter() - t0)
        store.delete_session(fork)
    return times


def measure_cli(url: str, sid: str, repeat: int) -> list[float]:
    """``harness9 sessions fork ID`` in-process (Typer's CliRunner), as a user runs it."""
    from typer.testing import CliRunner

    from harness9.cli import app
    from harness9.config import use_database_url

    flags = ["--database-url", url] if "://" in url else []
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = CliRunner().invoke(app, [*flags, "sessions", "fork", sid])
        times.append(time.perf_counter() - t0)
        if result.exit_code != 0:
            sys.exit(f"sessions fork failed: {result.output}")
    use_database_url(None)
    return times


def row(label: str, count: int, at: str, t: list[float]) -> None:
    median = statistics.median(t)
    ok = "ok" if median <= TARGET_S else "NO"
    print(f"| {label} | {count:,} | {at} | {median:.3f} s | {max(t):.3f} s | {ok} |")


def run(label: str, url: str, count: int, repeat: int) -> None:
    with open_url(url) as store:
        sid = fill(store, count)
        for at in (count, count // 2):
            row(label, count, f"{at:,}", measure(store, sid, at, repeat))
        row(label, count, f"{count:,} (CLI)", measure_cli(url, sid, repeat))
        fork = store.fork_session(sid)
        reads = []
        for who in (sid, fork):
            t0 = time.perf_counter()
            n = len(store.open_session(who).get_records())
            reads.append(f"{time.perf_counter() - t0:.3f} s ({n:,} messages)")
        print(f"| {label} | read all: origin {reads[0]}, fork {reads[1]} | | | | |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--database-url", help="a PostgreSQL URL, or 'temp' for a throwaway one")
    args = ap.parse_args()
    print(
        f"| store | messages | fork at | median | max | <= {TARGET_S} s |\n"
        "|---|---|---|---|---|---|"
    )
    with tempfile.TemporaryDirectory() as tmp:
        # The CLI finds the SQLite store in $HARNESS9_HOME.
        os.environ["HARNESS9_HOME"] = tmp
        from harness9.config import db_path

        run("sqlite", str(db_path()), args.messages, args.repeat)
    if args.database_url == "temp":
        from tests.support.pg_server import PgCluster, find_binaries

        bin_dir, why = find_binaries()
        if bin_dir is None:
            sys.exit(f"no PostgreSQL: {why}")
        cluster = PgCluster(bin_dir)
        cluster.start()
        try:
            run("postgres", cluster.create_database("bench_fork"), args.messages, args.repeat)
        finally:
            cluster.stop()
    elif args.database_url:
        run("postgres", args.database_url, args.messages, args.repeat)


if __name__ == "__main__":
    main()
