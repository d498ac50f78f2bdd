"""Calls that run side by side in a bounded pool, results in call order (the `task` tool).

Each call runs in a daemon thread of its own, at most ``limit`` at a time; the caller's
thread only waits, so Ctrl-C reaches it (Python delivers signals to the main thread)
and is answered at once: ``stop`` is set for every call, the calls that finished keep
their results, and each of the others gets ``stopped(call)`` (what it had). A worker
still inside a model call then notices ``stop`` at its next step and ends by itself;
being a daemon, it never holds up the process's exit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

C = TypeVar("C")
R = TypeVar("R")

WAIT_STEP_S = 0.05  # how often the waiting thread looks up (and can take a Ctrl-C)


def run_side_by_side(
    calls: Sequence[C],
    run: Callable[[C, threading.Event], R],
    *,
    limit: int,
    on_start: Callable[[C], None],
    stopped: Callable[[C], R],
) -> tuple[list[R], bool]:
    """Every call's result, in call order, and whether the wait was interrupted."""
    stop = threading.Event()
    slots = threading.BoundedSemaphore(max(1, limit))
    results: list[R | None] = [None] * len(calls)
    done = [threading.Event() for _ in calls]
    errors: list[BaseException | None] = [None] * len(calls)

    def work(i: int, call: C) -> None:
        try:
            with slots:
                if not stop.is_set():
                    results[i] = run(call, stop)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the waiting thread
            errors[i] = exc
        finally:
            done[i].set()

    for call in calls:
        on_start(call)
    threads = [
        threading.Thread(target=work, args=(i, c), name=f"harness9-task-{i}", daemon=True)
        for i, c in enumerate(calls)
    ]
    for t in threads:
        t.start()
    try:
        for flag in done:
            while not flag.wait(WAIT_STEP_S):
                pass
    except KeyboardInterrupt:
        stop.set()
        return [
            r if r is not None else stopped(c) for r, c in zip(results, calls, strict=True)
        ], True
    for exc in errors:
        if exc is not None:
            raise exc
    return [r if r is not None else stopped(c) for r, c in zip(results, calls, strict=True)], False
