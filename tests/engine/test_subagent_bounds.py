"""A sub-agent's bounds: model calls, tokens, wall time, and its parent's stop."""

from __future__ import annotations

import threading

import pytest

from harness9.engine.subagents import BoundedProvider, Bounds, SubAgentStopped
from harness9.request import Request
from harness9.schema import Message, Usage

EMPTY = Request((), [], [])


class Model:
    model = "openai/test"

    def __init__(self, usage: Usage) -> None:
        self.usage = usage
        self.calls = 0

    def send(self, request, *, stream=False, on_delta=None):
        self.calls += 1
        return Message("assistant", "ok"), self.usage


def test_the_call_bound_stops_the_next_call_before_it_is_made():
    inner = Model(Usage(10, 1))
    bounded = BoundedProvider(inner, Bounds(max_model_calls=2))
    bounded.send(EMPTY)
    bounded.send(EMPTY)
    with pytest.raises(SubAgentStopped, match="^stopped at its bound of 2 model calls$"):
        bounded.send(EMPTY)
    assert inner.calls == 2


def test_the_token_bound_counts_input_and_output():
    bounded = BoundedProvider(Model(Usage(600, 50)), Bounds(max_tokens=1200))
    bounded.send(EMPTY)
    bounded.send(EMPTY)  # 1300 tokens after this one
    with pytest.raises(SubAgentStopped, match=r"bound of 1200 tokens \(1300 used\)"):
        bounded.send(EMPTY)


def test_the_wall_time_bound():
    now = [0.0]
    bounded = BoundedProvider(Model(Usage(1, 1)), Bounds(max_seconds=30), clock=lambda: now[0])
    bounded.send(EMPTY)
    now[0] = 31.0
    with pytest.raises(SubAgentStopped, match=r"bound of 30 s of wall time \(31 s\)"):
        bounded.send(EMPTY)


def test_a_stopped_parent_stops_the_sub_agent():
    stop = threading.Event()
    bounded = BoundedProvider(Model(Usage(1, 1)), Bounds(), stop)
    bounded.send(EMPTY)
    stop.set()
    with pytest.raises(SubAgentStopped, match="its parent's turn was interrupted"):
        bounded.send(EMPTY)
