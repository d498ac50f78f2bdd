"""Benchmark: TokenBudgetCompactor against langchain-core's trim_messages, and repair scaling.

    python -m scripts.bench_compaction [--runs 15]

Part 1 trims one 10,001-message history of about 1M tokens to 100K and to
20K tokens with both libraries, in the same run, and prints medians and the
speed-up. Both do the same job: keep the system message and the newest
messages that fit the budget, never starting on a tool result
(trim_messages: strategy="last", include_system=True, start_on human/ai,
token_counter="approximate"). The token counts differ a little (langchain
counts characters and adds 3 tokens a message; harness9 counts UTF-8 bytes),
so the kept message counts are printed too.

Part 2 times repair_orphaned_tool_pairs on 10K, 40K and 160K messages (with
orphans of both kinds and late results) and prints the 160K/10K time ratio:
16 for linear time, 256 for the seed's quadratic scan.

Needs the ``bench`` extra (langchain-core); harness9 itself never imports it.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from collections.abc import Callable

from harness9.context import (
    TokenBudgetCompactor,
    estimate_tokens,
    is_valid_tool_sequence,
    repair_orphaned_tool_pairs,
)
from harness9.schema import Message, ToolCall

WORDS = [
    "the",
    "build",
    "fails",
    "because",
    "src",
    "app",
    "py",
    "imports",
    "a",
    "module",
    "that",
    "moved",
    "during",
    "refactor",
]


def text(rng: random.Random, n_bytes: int) -> str:
    out: list[str] = []
    size = 0
    while size < n_bytes:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def history(n: int, seed: int = 9, *, orphans: bool = False) -> list[Message]:
    """System + n messages in turns of user, tool call, result, answer; ~100 tokens each."""
    rng = random.Random(seed)
    msgs = [Message("system", "You are harness9, a coding agent.")]
    turn = 0
    while len(msgs) - 1 < n:
        turn += 1
        cid = f"call_{turn}"
        msgs.append(Message("user", text(rng, rng.randint(150, 700))))
        args = json.dumps({"command": f"pytest -q tests/test_{turn}.py"})
        msgs.append(Message("assistant", "", [ToolCall(cid, "bash", args)]))
        if orphans and turn % 7 == 0:
            msgs.append(Message("user", "interrupt"))  # the result below arrives late
        if not (orphans and turn % 11 == 0):  # an interrupted call never answered
            msgs.append(Message("tool", text(rng, rng.randint(300, 1350)), tool_call_id=cid))
        if orphans and turn % 13 == 0:
            msgs.append(Message("tool", "stray", tool_call_id=f"gone_{turn}"))
        msgs.append(Message("assistant", text(rng, rng.randint(80, 450))))
    return msgs[: n + 1]


def to_langchain(msgs: list[Message]) -> list:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out = []
    for m in msgs:
        if m.role == "system":
            out.append(SystemMessage(m.content))
        elif m.role == "user":
            out.append(HumanMessage(m.content))
        elif m.role == "tool":
            out.append(ToolMessage(m.content, tool_call_id=m.tool_call_id))
        else:
            calls = [
                {"name": tc.name, "args": json.loads(tc.arguments), "id": tc.id}
                for tc in m.tool_calls
            ]
            out.append(AIMessage(m.content, tool_calls=calls))
    return out


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    gc.collect()  # every run starts from the same collector state
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def bench_trim(runs: int) -> None:
    from langchain_core.messages import trim_messages

    msgs = history(10_000)
    lc = to_langchain(msgs)
    print(f"history: {len(msgs):,} messages, {estimate_tokens(msgs):,} tokens (bytes/4)")
    print()
    print(
        f"{'budget':>8} | {'harness9 ms':>11} | {'kept':>5} | {'langchain ms':>12} | {'kept':>5} | speed-up"
    )
    print("-" * 66)
    for budget in (100_000, 20_000):
        compactor = TokenBudgetCompactor(budget)

        def ours_fn(c=compactor):
            return c.compact(msgs).messages

        def theirs_fn(b=budget):
            return trim_messages(
                lc,
                max_tokens=b,
                strategy="last",
                token_counter="approximate",
                include_system=True,
                start_on=("human", "ai"),
            )

        ours_t: list[float] = []
        theirs_t: list[float] = []
        for _ in range(runs):  # interleaved, so a noisy neighbour slows both alike
            t, out = timed(ours_fn)
            ours_t.append(t)
            t, lc_out = timed(theirs_fn)
            theirs_t.append(t)
        assert is_valid_tool_sequence(out) and estimate_tokens(out) <= budget
        ours, theirs = statistics.median(ours_t), statistics.median(theirs_t)
        print(
            f"{budget:>8,} | {ours * 1000:>11.1f} | {len(out):>5} | "
            f"{theirs * 1000:>12.1f} | {len(lc_out):>5} | {theirs / ours:>6.1f}x"
        )


def bench_repair(runs: int) -> None:
    sizes = (10_000, 40_000, 160_000)
    histories = {n: history(n, orphans=True) for n in sizes}
    times: dict[int, list[float]] = {n: [] for n in sizes}
    touch: dict[int, list[float]] = {n: [] for n in sizes}

    # Sizes interleaved run by run, so a noisy neighbour slows all of them alike.
    for _ in range(runs):
        for n in sizes:
            m = histories[n]
            t, out = timed(lambda m=m: repair_orphaned_tool_pairs(m))
            times[n].append(t)
            # Baseline: a bare pass reading each message's role. Its own ratio
            # shows what the memory hierarchy adds to any linear pass here.
            t, _ = timed(lambda m=m: [x.role for x in m])
            touch[n].append(t)
    assert is_valid_tool_sequence(out)
    print()
    print(f"{'messages':>9} | {'repair ms':>9} | {'ratio to 10K':>12} | {'bare pass ratio':>15}")
    print("-" * 56)
    base = statistics.median(times[sizes[0]])
    touch_base = statistics.median(touch[sizes[0]])
    for n in sizes:
        t = statistics.median(times[n])
        tt = statistics.median(touch[n]) / touch_base
        print(f"{n:>9,} | {t * 1000:>9.2f} | {t / base:>12.1f} | {tt:>15.1f}")
    print(f"\n160K/10K time ratio: {t / base:.1f} (linear: 16, must stay under 20)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="runs per measurement (median)")
    args = parser.parse_args()
    print(f"medians of {args.runs} runs\n")
    bench_trim(args.runs)
    bench_repair(args.runs)


if __name__ == "__main__":
    main()
