"""The sub-agents' lines on the screen while `task` calls run, and their settings."""

from __future__ import annotations

import io

from rich.console import Console

from harness9.config import SubAgentOptions, subagent_options
from harness9.engine import events as ev
from harness9.errors import ConfigError
from harness9.schema import ToolCall, Usage
from harness9.ui.subagents import SubAgentLines, elapsed_text


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def drawn(lines: SubAgentLines) -> str:
    console = Console(record=True, width=100, color_system=None)
    console.print(lines)
    return console.export_text()


def test_each_running_sub_agent_has_a_line_with_its_description_time_and_tool():
    clock = Clock()
    lines = SubAgentLines(Console(file=io.StringIO()), live=False, clock=clock)
    lines.handle(ev.SubAgentStarted("c1", "s1", "find alpha"))
    lines.handle(ev.SubAgentStarted("c2", "s2", "find beta"))
    clock.now += 2.5
    read = ToolCall("r1", "read_file", '{"path": "src/a.py"}')
    lines.handle(ev.SubAgentActivity("c1", "s1", ev.ToolStarted(read)))
    text = drawn(lines)
    assert 'find alpha · 2.5s · read_file {"path": "src/a.py"}' in text
    assert "find beta · 2.5s · thinking" in text


def test_a_finished_sub_agent_leaves_one_line_with_its_outcome():
    console = Console(record=True, width=100, color_system=None)
    clock = Clock()
    lines = SubAgentLines(console, live=False, clock=clock)
    lines.handle(ev.SubAgentStarted("c1", "s1", "find alpha"))
    for _ in range(3):
        used = ev.ModelUsage("m", Usage(10, 1))
        lines.handle(ev.SubAgentActivity("c1", "s1", used))
    lines.handle(ev.SubAgentFinished("c1", "s1", "find alpha", "stopped", 65.0))
    assert console.export_text() == "  ↳ find alpha: stopped in 1m05s (3 model calls)\n"
    assert lines.running == 0


def test_elapsed_time_reads_in_seconds_then_minutes():
    assert [elapsed_text(s) for s in (0.04, 9.96, 59.9, 60, 754)] == [
        "0.0s",
        "10.0s",
        "59.9s",
        "1m00s",
        "12m34s",
    ]


def test_the_settings_have_documented_defaults_and_reject_bad_values(harness9_home):
    assert subagent_options({}) == SubAgentOptions(
        enabled=True,
        max_model_calls=30,
        max_tokens=1_000_000,
        max_seconds=600.0,
        parallel=4,
        nested=False,
    )
    assert subagent_options({"subagents": {"max_seconds": 30}}).max_seconds == 30.0
    for bad, said in (
        ({"parallel": 0}, "subagents.parallel in "),
        ({"nested": "yes"}, "subagents.nested in "),
        ({"depth": 2}, "unknown key subagents.depth in "),
    ):
        try:
            subagent_options({"subagents": bad})
        except ConfigError as exc:
            assert str(exc).startswith(said), exc
        else:
            raise AssertionError(f"{bad} was accepted")
