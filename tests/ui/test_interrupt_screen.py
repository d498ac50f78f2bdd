"""What is left on the screen after Ctrl-C (issue 36, items 17 and 18), read as a person
reads it: the pseudo-terminal's output is played through a terminal emulator (pyte)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyte

from tests.support.llm_server import ScriptedLLMServer, TextReply, ToolCallsReply
from tests.support.pty_terminal import PtyProcess

ROWS, COLUMNS = 40, 100


def visible(term: PtyProcess) -> list[str]:
    """The lines a person sees on the terminal now, trailing blanks dropped."""
    screen = pyte.Screen(COLUMNS, ROWS)
    stream = pyte.ByteStream(screen)
    stream.feed(term.screen().encode("utf-8"))
    return [line.rstrip() for line in screen.display]


def start(server: ScriptedLLMServer, home: Path, cwd: Path) -> PtyProcess:
    argv = ["chat", "--model", "openai/test-model", "--api-base", server.base_url]
    argv += ["--context-window", "32k", "--yes"]
    env = {"HARNESS9_HOME": str(home), "OPENAI_API_KEY": "sk-test"}
    return PtyProcess(argv, cwd=cwd, env=env, rows=ROWS, columns=COLUMNS)


def test_ctrl_c_in_bash_clears_the_spinner_and_says_the_command_was_stopped(
    llm_server: ScriptedLLMServer, harness9_home: Path, tmp_path: Path
):
    def reply(body):
        if body["messages"][-1]["role"] == "user":
            args = json.dumps({"command": "echo started; sleep 30"})
            return ToolCallsReply(calls=(("call_1", "bash", args),))
        return TextReply("done")

    llm_server.respond_with(reply)
    with start(llm_server, harness9_home, tmp_path) as term:
        at = term.expect("›")
        term.send("wait for it\r")
        at = term.expect("running bash", after=at)
        term.expect("started", after=at)
        time.sleep(1.5)
        term.send("\x03")
        at = term.expect("interrupted —", after=at)
        term.expect("›", after=at)
        time.sleep(0.3)
        shown = visible(term)
        term.send("\x04")
        assert term.wait(30) == 0

    text = "\n".join(shown)
    assert "running bash…" not in text, text
    assert any(line.startswith("stopped bash after ") for line in shown), text
    stopped = next(i for i, line in enumerate(shown) if line.startswith("stopped bash after "))
    assert shown[stopped + 1].startswith("interrupted — "), text


def test_ctrl_c_during_a_streamed_reply_shows_each_of_its_lines_once(
    llm_server: ScriptedLLMServer, harness9_home: Path, tmp_path: Path
):
    # Word-wrapped at 100 columns, the second line fills the screen's width exactly: the
    # cursor then waits at the last column when Ctrl-C comes.
    first, second = "alpha" * 12, "bravo" * 9 + "abcd" + " " + "charlie" * 7 + "x"
    assert (len(first), len(second)) == (60, 100)
    streamed = f"{first} {second}"
    llm_server.respond_with(
        lambda body: TextReply(streamed + " and more", chunk_size=len(streamed), chunk_delay=30)
    )
    with start(llm_server, harness9_home, tmp_path) as term:
        at = term.expect("›")
        term.send("tell me\r")
        at = term.expect("charlie" * 7, after=at)
        time.sleep(1.0)
        term.send("\x03")
        at = term.expect("interrupted —", after=at)
        term.expect("›", after=at)
        time.sleep(0.3)
        shown = visible(term)
        term.send("\x04")
        assert term.wait(30) == 0

    text = "\n".join(shown)
    assert sum(line.count(first) for line in shown) == 1, text
    assert sum(line.count("charlie" * 7) for line in shown) == 1, text
