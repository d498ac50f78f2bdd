"""Keys typed ahead never answer a question they were not typed for, nor leak into a message.

Driven through the real line editor (prompt_toolkit reading keystrokes from a pipe, as it
reads a terminal) and the real chat loop and approval question, against the scripted model.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from harness9.config import db_path
from harness9.store import Manager
from harness9.ui.approval import TerminalApprover
from harness9.ui.line_editor import prompt_reader
from harness9.ui.repl import SLASH_COMMANDS
from tests.support.chat_loop import chat_loop


def test_a_key_typed_right_after_enter_is_not_prepended_to_the_next_message(
    llm_server, harness9_home: Path, tmp_path: Path
):
    llm_server.reply_tool_calls([("call_1", "bash", json.dumps({"command": "echo hi"}))])
    llm_server.reply_text("ran it")
    llm_server.reply_text("second answer")
    console = Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None)
    questions: list[str] = []
    with create_pipe_input() as keys, Manager(db_path()) as manager:
        # Enter, then "y" at once: the editor reads both in one chunk, as from a fast typist.
        keys.send_text("first message\ry")

        def answer(question: str) -> str:
            questions.append(question)
            keys.send_text("second message\r\x04")  # typed once the first turn is done
            return "y"

        approver = TerminalApprover(console, ask=answer)  # the real type-ahead discard
        read = prompt_reader([*SLASH_COMMANDS], None, pt_input=keys, pt_output=DummyOutput())
        loop = chat_loop(
            llm_server, manager, tmp_path, console, read,
            model="openai/test-model", approver=approver, markdown=False,
        )  # fmt: skip
        assert loop.run() == 0

    assert questions == ["Run: echo hi? [y/N/a] "]
    users = [m["content"] for m in llm_server.requests[-1]["messages"] if m["role"] == "user"]
    assert users == ["first message", "second message"]
