"""The bounded pool `task` calls run in: call order, the bound, errors, a stop."""

from __future__ import annotations

import threading
import time

import pytest

from harness9.engine.parallel import run_side_by_side


def test_results_come_back_in_call_order_whatever_order_they_finish_in():
    delays = {"a": 0.3, "b": 0.0, "c": 0.15}

    def run(call: str, stop: threading.Event) -> str:
        time.sleep(delays[call])
        return call.upper()

    started: list[str] = []
    results, interrupted = run_side_by_side(
        list(delays), run, limit=3, on_start=started.append, stopped=lambda c: "-"
    )
    assert (results, interrupted, started) == (["A", "B", "C"], False, ["a", "b", "c"])


def test_no_more_than_the_limit_run_at_once():
    lock = threading.Lock()
    active, peak = [0], [0]

    def run(call: int, stop: threading.Event) -> int:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return call

    results, _ = run_side_by_side(
        list(range(6)), run, limit=2, on_start=lambda c: None, stopped=lambda c: -1
    )
    assert results == [0, 1, 2, 3, 4, 5]
    assert peak[0] == 2


def test_a_call_that_raises_raises_in_the_waiting_thread():
    def run(call: str, stop: threading.Event) -> str:
        if call == "bad":
            raise RuntimeError("boom")
        return call

    with pytest.raises(RuntimeError, match="boom"):
        run_side_by_side(["ok", "bad"], run, limit=2, on_start=lambda c: None, stopped=str)


def test_ctrl_c_while_waiting_sets_stop_and_answers_every_call_at_once():
    import _thread

    seen_stop = threading.Event()

    def run(call: str, stop: threading.Event) -> str:
        # "slow": a sub-agent in a long step, which looks at `stop` after it.
        if call == "slow" and stop.wait(5):
            seen_stop.set()
        return f"{call} done"

    # Raised in the waiting thread, as Python delivers a SIGINT there.
    threading.Timer(0.2, _thread.interrupt_main).start()
    started = time.monotonic()
    results, interrupted = run_side_by_side(
        ["fast", "slow"], run, limit=2, on_start=lambda c: None, stopped=lambda c: f"{c} stopped"
    )
    assert time.monotonic() - started < 3
    assert interrupted is True
    assert results == ["fast done", "slow stopped"]
    assert seen_stop.wait(2)  # the worker saw the stop and ended by itself
