"""How long ``harness9 sessions fork`` takes on a large session, on either store.

Builds one session of ``--messages`` messages (user/assistant text and tool calls with
results, 60-400 bytes each), adds three checkpoints, then times ``fork_session`` at
the last message and at the middle, ``--repeat`` times each (median and max). The
fork is one transaction with one set-based ``INSERT … SELECT`` for the messages.

    python scripts/bench_fork.py                         # SQLite, 100,000 messages
    python scripts/bench_fork.py --database-url temp     # a throwaway PostgreSQL too
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from harness9.schema import Message, ToolCall  # noqa: E402
from harness9.store.backend import SessionStore, open_url  # noqa: E402
from harness9.store.session import Checkpoint  # noqa: E402


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


def measure(store: SessionStore, sid: str, at: int, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fork = store.fork_session(sid, at)
        times.append(time.perf_counter() - t0)
        store.delete_session(fork)
    return times


def run(label: str, url: str, count: int, repeat: int) -> None:
    with open_url(url) as store:
        sid = fill(store, count)
        for at in (count, count // 2):
            t = measure(store, sid, at, repeat)
            print(
                f"| {label} | {count:,} | {at:,} | {statistics.median(t):.3f} s | {max(t):.3f} s |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--database-url", help="a PostgreSQL URL, or 'temp' for a throwaway one")
    args = ap.parse_args()
    print("| store | messages | fork at | median | max |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        run("sqlite", str(Path(tmp) / "sessions.db"), args.messages, args.repeat)
    if args.database_url == "temp":
        from pg_server import PgCluster, find_binaries

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
