"""What a person sees at the end of things in a terminal: an interrupted turn on its own
line, the way back into the session on leaving, the window warning once per session."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from harness9.config import ContextOptions, Settings
from harness9.engine.setup import build_engine
from harness9.store import Manager
from harness9.ui.repl import ChatIO, ChatLoop
from tests.support.cli import cli
from tests.support.pty_terminal import drive_pty


def test_an_interrupted_turn_starts_its_notice_on_a_new_line(llm_server, harness9_home, tmp_path):
    llm_server.reply_tool_calls([("c1", "bash", '{"command": "sleep 30"}')])
    console = Console(file=io.StringIO(), width=80, color_system=None, record=True)

    def approver(_approval):
        raise KeyboardInterrupt  # Ctrl-C while the question waits: the terminal echoed ^C

    with Manager(harness9_home / "sessions.db") as manager:
        engine = build_engine(
            Settings("openai/test-model", llm_server.base_url),
            ContextOptions(),
            manager.new_session(),
            tmp_path,
            100_000,
            confirm=approver,
        )
        io_ = ChatIO(console, console, lambda _p: "", interactive=True)
        ChatLoop(engine, manager, io_, "openai/test-model").turn("wait a while")

    shown = console.export_text()
    # The ^C the terminal echoed is ended first: the call's line (it never ran) starts a
    # line of its own, and the notice a later one.
    assert re.search(
        r"\n  ✗ \[not run: the user stopped the turn when asked to approve this call\]\n"
        r"\n?interrupted — the completed part of the turn is kept",
        shown,
    )


@pytest.mark.slow
def test_leaving_a_terminal_chat_says_how_to_resume_it(llm_server, harness9_home):
    llm_server.reply_text("hello")
    env = {
        "HARNESS9_HOME": str(harness9_home),
        "OPENAI_API_KEY": "sk-test",
        "COLUMNS": "100",
        "PROMPT_TOOLKIT_NO_CPR": "1",
    }
    argv = ["chat", "--model", "openai/gpt-4o-mini", "--api-base", llm_server.base_url]
    steps = [("›", b"hi\r"), ("hello", b""), ("›", b"\x04")]

    printed, code = drive_pty(argv, env, steps, timeout=90)

    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", printed)
    assert code == 0
    match = re.search(r"resume this session with: harness9 chat --resume ([0-9a-f]{8})", screen)
    assert match is not None, screen[-400:]
    with Manager(harness9_home / "sessions.db") as m:
        assert m.list_sessions()[0].id.startswith(match.group(1))


def test_the_window_guess_is_announced_once_per_session(llm_server):
    argv = ["chat", "--model", "openai/unheard-of", "--api-base", llm_server.base_url]
    llm_server.reply_text("one")
    first = cli(*argv, "-p", "hi")
    llm_server.reply_text("two")
    again = cli(*argv, "--continue", "-p", "more")

    assert "is not known; assuming" in first.stderr
    assert again.exit_code == 0, again.output
    assert "is not known" not in again.stderr
