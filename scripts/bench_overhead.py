"""The time harness9 spends between two model calls, early and late in a long session.

A scripted model (``tests/support/llm_server.py``, OpenAI's protocol on 127.0.0.1) drives the
real ``harness9 chat --yes`` in-process through ``--calls`` ``read_file`` calls of one
600-byte file, ``--per-turn`` calls per user turn, with the default policy and offload,
once per window. For each model call after a tool call the gap is the time from the
end of one reply (the server sent its last byte) to the next request's arrival (its
headers are in): parsing the reply, saving it, running the tool, saving its result,
building the next request, and litellm sending it.

litellm's share of a gap: from the server's last byte to ``LLMProvider.send``
returning (litellm reading and converting the reply), plus from the end of
``LLMProvider._request`` (harness9's messages handed over) to the request's arrival
(litellm preparing and sending it). Both are timed by wrapping harness9's own
provider methods for this process; litellm itself is not touched. "harness9 alone"
is the gap less litellm's share. The CPU column is
the CPU time the whole process (harness9, litellm and its logging thread, the server,
idle in a gap) spent in each gap: unlike the wall-clock figures it hardly moves when
other processes load the machine.

The server sets TCP_NODELAY, as hosted APIs' servers and httpcore's client sockets
do. Before it did, each reply's body waited ~40 ms in the kernel for a delayed ACK
after its headers, and this benchmark counted that wait in every gap (in litellm's
share): 56 ms measured then was ~16 ms of work.

Targets (issue 23): the median gap over the last 100 calls at most 1.5x the median
over the first 100, at every window, and the median gap at most 60 ms.

    .venv/bin/python -m scripts.bench_overhead                       # 1,230 calls, 128K and 1M
    .venv/bin/python -m scripts.bench_overhead --calls 300 --windows 128000

Not part of the test suite: it takes minutes. Timings are noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from typer.testing import CliRunner

from harness9.cli import app
from harness9.provider.llm import LLMProvider
from tests.support.llm_server import ScriptedLLMServer, TextReply, ToolCallsReply, _Handler

RATIO_TARGET = 1.5
MEDIAN_TARGET_MS = 60.0
WINDOW = 100  # calls at each end of the session
FILE_BYTES = 600


@dataclass(slots=True)
class Clock:
    """When harness9's provider handed a request to litellm and got the reply back."""

    handed: list[float] = field(default_factory=list)  # end of LLMProvider._request
    returned: list[float] = field(default_factory=list)  # end of LLMProvider.send
    lock: threading.Lock = field(default_factory=threading.Lock)

    def install(self) -> Callable[[], None]:
        """Wrap the provider's methods for this process; returns the undo."""
        request, send = LLMProvider._request, LLMProvider.send
        clock = self

        def timed_request(self: LLMProvider, *args: Any, **kwargs: Any) -> dict[str, Any]:
            out = request(self, *args, **kwargs)
            with clock.lock:
                clock.handed.append(time.perf_counter())
            return out

        def timed_send(self: LLMProvider, *args: Any, **kwargs: Any) -> Any:
            try:
                return send(self, *args, **kwargs)
            finally:
                with clock.lock:
                    clock.returned.append(time.perf_counter())

        LLMProvider._request = timed_request  # type: ignore[method-assign]
        LLMProvider.send = timed_send  # type: ignore[method-assign]

        def undo() -> None:
            LLMProvider._request = request  # type: ignore[method-assign]
            LLMProvider.send = send  # type: ignore[method-assign]

        return undo


class CpuClock(_Handler):
    """The scripted server's handler, noting the process's CPU time (all its threads) when
    each request arrives and when its reply is sent, beside the server's own timings."""

    marks: list[tuple[float, float]] = []  # replaced per run (run_one)

    def _handle_post(self) -> None:
        arrived = time.process_time()
        try:
            super()._handle_post()
        finally:
            type(self).marks.append((arrived, time.process_time()))


class Model:
    """Calls read_file ``per_turn`` times per user turn, ``calls`` times in all."""

    def __init__(self, calls: int, per_turn: int) -> None:
        self.calls, self.per_turn = calls, per_turn
        self.done = 0
        self.in_turn = 0
        self.tool_reply: list[bool] = []  # per request: answered with a tool call
        self.sizes: list[int] = []  # messages per request

    def __call__(self, body: dict[str, Any]) -> Any:
        self.sizes.append(len(body.get("messages", [])))
        if not body.get("tools"):  # a summary request (the default policy should not send one)
            self.tool_reply.append(False)
            return TextReply("Summary: the agent read notes.txt many times.", usage=(100, 10))
        if self.done >= self.calls or self.in_turn >= self.per_turn:
            self.in_turn = 0
            self.tool_reply.append(False)
            return TextReply("Read it.", usage=(100, 3))
        self.done += 1
        self.in_turn += 1
        self.tool_reply.append(True)
        args = '{"path": "notes.txt"}'
        return ToolCallsReply(((f"call_{self.done:05d}", "read_file", args),), usage=(100, 10))


@dataclass(slots=True)
class Row:
    window: int
    calls: int = 0
    first_ms: float = 0.0
    last_ms: float = 0.0
    p95_ms: float = 0.0
    median_ms: float = 0.0
    litellm_first_ms: float = 0.0
    litellm_last_ms: float = 0.0
    own_first_ms: float = 0.0  # the gap less litellm's share: harness9's own time
    own_last_ms: float = 0.0
    cpu_first_ms: float = 0.0
    cpu_last_ms: float = 0.0
    messages_last: int = 0
    summary_calls: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.last_ms / self.first_ms if self.first_ms > 0 else math.inf

    @property
    def cpu_ratio(self) -> float:
        return self.cpu_last_ms / self.cpu_first_ms if self.cpu_first_ms > 0 else math.inf


def _median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else 0.0


def gaps(
    timings: list[tuple[float, float]],
    clock: Clock,
    tool_reply: list[bool],
    cpu: list[tuple[float, float]],
) -> tuple[list[float], list[float], list[float]]:
    """(gap, litellm's part of it, CPU time the process spent in it) for every request
    that follows a tool-call reply."""
    n = min(len(timings), len(clock.handed), len(clock.returned), len(tool_reply), len(cpu))
    total, litellm, used = [], [], []
    for k in range(1, n):
        if not tool_reply[k - 1]:
            continue
        answered_prev = timings[k - 1][1]
        arrived = timings[k][0]
        reading = max(0.0, clock.returned[k - 1] - answered_prev)
        sending = max(0.0, arrived - clock.handed[k])
        total.append(arrived - answered_prev)
        litellm.append(reading + sending)
        used.append(cpu[k][0] - cpu[k - 1][1])
    return total, litellm, used


def run_one(window: int, calls: int, per_turn: int, tmp: Path) -> Row:
    home = tmp / f"w{window}"
    work = home / "work"
    work.mkdir(parents=True)
    line = "The quick brown fox jumps over the lazy dog; notes for the bench. "
    (work / "notes.txt").write_text((line * (FILE_BYTES // len(line) + 1))[:FILE_BYTES])
    model = Model(calls, per_turn)
    clock = Clock()
    env = {"HARNESS9_HOME": str(home / "h9"), "OPENAI_API_KEY": "sk-bench"}
    turns = math.ceil(calls / per_turn) + 1
    row = Row(window)
    undo = clock.install()
    CpuClock.marks = cpu = []
    started = time.perf_counter()
    try:
        server = ScriptedLLMServer()
        server.handler_class = CpuClock
        with server:
            server.respond_with(model)
            args = ["chat", "--model", "openai/bench", "--api-base", server.base_url]
            args += ["--context-window", str(window), "--yes", "--no-stream"]
            args += ["--workdir", str(work)]
            res = CliRunner().invoke(app, args, input="Read notes.txt.\n" * turns, env=env)
            timings = server.timings
    finally:
        undo()
    row.seconds = time.perf_counter() - started
    if res.exit_code != 0:
        row.notes.append(f"chat exited {res.exit_code}: {res.output[-300:]}")
    total, litellm, used = gaps(timings, clock, model.tool_reply, cpu)
    row.calls = model.done
    row.summary_calls = sum(1 for s in model.tool_reply if not s) - turns
    if len(total) < 2 * WINDOW:
        row.notes.append(f"only {len(total)} gaps measured")
        return row
    row.first_ms, row.last_ms = _median_ms(total[:WINDOW]), _median_ms(total[-WINDOW:])
    row.median_ms = _median_ms(total)
    row.p95_ms = sorted(total)[int(len(total) * 0.95)] * 1000
    row.litellm_first_ms = _median_ms(litellm[:WINDOW])
    row.litellm_last_ms = _median_ms(litellm[-WINDOW:])
    own = [t - x for t, x in zip(total, litellm, strict=True)]
    row.own_first_ms, row.own_last_ms = _median_ms(own[:WINDOW]), _median_ms(own[-WINDOW:])
    row.cpu_first_ms, row.cpu_last_ms = _median_ms(used[:WINDOW]), _median_ms(used[-WINDOW:])
    row.messages_last = max(model.sizes[-WINDOW:]) if model.sizes else 0
    return row


def _ok(good: bool) -> str:
    return "ok" if good else "NO"


def print_table(rows: list[Row]) -> None:
    print(
        "| window | calls | first 100 (litellm) | last 100 (litellm) | last/first "
        f"(<= {RATIO_TARGET}) | median (<= {MEDIAN_TARGET_MS:.0f} ms) | p95 | "
        "harness9 alone, first / last 100 | CPU first / last 100 | messages sent, last 100 "
        "| seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r.window:,} | {r.calls:,} | {r.first_ms:.0f} ms ({r.litellm_first_ms:.0f}) "
            f"| {r.last_ms:.0f} ms ({r.litellm_last_ms:.0f}) "
            f"| {r.ratio:.2f} {_ok(r.ratio <= RATIO_TARGET)} "
            f"| {r.median_ms:.0f} ms {_ok(r.median_ms <= MEDIAN_TARGET_MS)} "
            f"| {r.p95_ms:.0f} ms | {r.own_first_ms:.1f} / {r.own_last_ms:.1f} ms "
            f"| {r.cpu_first_ms:.1f} / {r.cpu_last_ms:.1f} ms "
            f"({r.cpu_ratio:.2f}) | {r.messages_last:,} | {r.seconds:.0f} |"
        )
    for r in rows:
        for note in r.notes:
            print(f"note ({r.window:,}): {note}")
        if r.summary_calls > 0:
            print(f"note ({r.window:,}): {r.summary_calls} summary calls")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1230)
    ap.add_argument("--per-turn", type=int, default=40, help="tool calls per user turn")
    ap.add_argument("--windows", default="128000,1000000")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        for window in (int(w) for w in args.windows.split(",")):
            rows.append(run_one(window, args.calls, args.per_turn, Path(tmp)))
            print(f"window {window:,}: done in {rows[-1].seconds:.0f} s", file=sys.stderr)
    print_table(rows)
    good = all(r.ratio <= RATIO_TARGET and r.median_ms <= MEDIAN_TARGET_MS for r in rows)
    return 0 if good and not any(r.notes for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
