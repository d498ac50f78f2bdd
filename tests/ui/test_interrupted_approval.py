"""Ctrl-C at an approval question, as the chat shows it: the call ends as not run on the
line after the question, and nothing claims that a command was stopped after running."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

from rich.console import Console

from harness9.config import db_path
from harness9.engine import events as ev
from harness9.schema import ToolCall
from harness9.store import Manager
from harness9.tools.base import NOT_RUN
from harness9.ui.approval import TerminalApprover
from harness9.ui.repl import ChatIO, EventRenderer
from tests.support.chat_loop import chat_loop


def test_ctrl_c_at_the_question_shows_the_call_as_not_run_and_the_chat_goes_on(
    llm_server, harness9_home: Path, tmp_path: Path
):
    llm_server.reply_tool_calls([("call_1", "bash", json.dumps({"command": "touch made"}))])
    llm_server.reply_text("next answer")
    console = Console(file=io.StringIO(), width=100, color_system=None)

    def ctrl_c(question: str) -> str:
        console.print(
            question, end="", markup=False
        )  # as the terminal shows it, the cursor after it
        raise KeyboardInterrupt

    lines = iter(["make a file", "what now?"])

    def read_line(prompt: str) -> str:
        line = next(lines, None)
        if line is None:
            raise EOFError
        return line

    approver = TerminalApprover(console, ask=ctrl_c, flush=lambda: None)
    with Manager(db_path()) as manager:
        loop = chat_loop(
            llm_server, manager, tmp_path, console, read_line,
            model="openai/test-model", approver=approver, markdown=False,
        )  # fmt: skip
        loop.run()

    shown = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    asked = shown.index("Run: touch made? [y/N/a] ")
    assert shown[asked + 1 : asked + 3] == [
        f"  ✗ {NOT_RUN}",
        "interrupted — the completed part of the turn is kept",
    ]
    assert not any(line.startswith("stopped bash") for line in shown)
    assert "next answer" in shown
    assert not (tmp_path / "made").exists()


def test_a_stopped_command_counts_the_time_it_ran_not_the_time_it_waited_for_approval():
    console = Console(file=io.StringIO(), width=100, color_system=None)
    renderer = EventRenderer(ChatIO(console, console, input, interactive=False), "m", str)
    call = ToolCall("call_1", "bash", json.dumps({"command": "make"}))

    renderer(ev.ToolStarted(call))
    time.sleep(1.2)  # the question waits for an answer
    renderer(ev.ToolOutput(call, ""))  # approved: the command starts

    stopped = renderer.stopped_tool()
    assert stopped is not None and stopped.plain == "stopped bash after 0s: the command was ended"
