"""While bash runs, a terminal shows a spinner, the time it has run and the last lines of
its output (bounded); the engine hands the output over as it comes, not at the end."""

from __future__ import annotations

import io
import json
import time

from rich.console import Console

from harness9.ui.tool_progress import LINES, ToolProgress
from tests.support.cli import chat


def render(progress: ToolProgress, width: int = 40) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None, record=True)
    console.print(progress)
    return console.export_text().splitlines()


def test_the_live_view_shows_the_elapsed_time_and_only_the_last_lines():
    now = [100.0]
    progress = ToolProgress("bash", clock=lambda: now[0])
    progress.feed("".join(f"line {n}\n" for n in range(1, 9)))
    progress.feed("downloading 10%\rdownloading 90%")  # a progress bar redrawing its line
    now[0] = 107.4

    lines = render(progress)

    assert lines[0] == "running bash… 7s"
    assert lines[1:] == ["  line 5", "  line 6", "  line 7", "  line 8", "  downloading 90%"]
    assert len(lines) == 1 + LINES


def test_a_long_output_line_is_cut_to_the_width_and_escapes_are_shown_not_obeyed():
    progress = ToolProgress("bash")
    progress.feed("x" * 100 + "\n\x1b[2Jcleared?\n")

    lines = render(progress, width=40)

    assert all(len(line) <= 40 for line in lines)
    assert lines[1].endswith("…")
    assert lines[2] == "  \\x1b[2Jcleared?"


def test_the_engine_hands_over_bash_output_while_the_command_runs(llm_server, tmp_path):
    script = "echo first; sleep 1; echo second"
    llm_server.reply_tool_calls([("c1", "bash", json.dumps({"command": script}))])
    llm_server.reply_text("ran it")
    from harness9.config import ContextOptions, Settings
    from harness9.engine import events as ev
    from harness9.engine.setup import build_engine
    from harness9.store import MemorySession

    seen: list[tuple[float, str]] = []
    engine = build_engine(
        Settings("openai/test-model", llm_server.base_url),
        ContextOptions(),
        MemorySession(),
        tmp_path,
        100_000,
        assume_yes=True,
    )

    def on_event(event: ev.Event) -> None:
        if isinstance(event, ev.ToolOutput):
            seen.append((time.monotonic(), event.text))
        elif isinstance(event, ev.ToolFinished):
            seen.append((time.monotonic(), "<finished>"))

    engine.on_event = on_event
    engine.run_turn("run it")

    texts = [t for _, t in seen]
    assert texts[0] == ""  # started
    assert "first\n" in texts and texts[-1] == "<finished>"
    first_at = next(at for at, t in seen if t == "first\n")
    assert seen[-1][0] - first_at >= 0.9  # "first" was shown a second before the end


def test_last_prints_the_full_result_of_a_bash_command(llm_server, tmp_path):
    script = "for i in $(seq 1 40); do echo row $i; done"
    llm_server.reply_tool_calls([("c1", "bash", json.dumps({"command": script}))])
    llm_server.reply_text("done")

    result = chat(llm_server, "list rows\n/last\n", "--yes", workdir=tmp_path)

    after_last = result.stderr.split("→ bash")[-1]
    assert all(f"row {i}\n" in after_last for i in range(1, 41))
    assert "exit code: 0" in after_last
