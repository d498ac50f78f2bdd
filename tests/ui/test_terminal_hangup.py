"""The terminal closing, or harness9 being killed, leaves nothing behind: no running
command, no empty session, no tool call the model is told was merely "truncated".

These run the real ``harness9`` in a pseudo-terminal (tests/support/pty_terminal.py) or as a
plain subprocess, against the scripted model server: a closed terminal is a kernel
event (SIGHUP, EIO), which no in-process runner can produce.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness9.config import db_path
from harness9.schema import UNFINISHED_STUB, Message, ToolCall
from harness9.store import Manager
from tests.support.cli import REPO_ROOT, chat, cli_env
from tests.support.pty_terminal import PtyProcess

# A command stopped with the chat, as by Ctrl-C: it printed nothing (its output goes to a file).
STOPPED_COMMAND = re.compile(r"\[interrupted by the user after \d+s: the command was stopped\]")
# Writes the shell's pid and its child's, then waits: a command that would run for minutes.
LONG_COMMAND = "echo $$ > pids; sleep 300 & echo $! >> pids; wait"


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie awaiting its reaper counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def all_gone(pids: list[int], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def started_pids(workdir: Path, within: float = 60.0) -> list[int]:
    path = workdir / "pids"
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().split()) == 2:
            return [int(x) for x in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError("the command never started")


def stored_sessions() -> list[tuple[str, int]]:
    with Manager(db_path()) as m:
        return [(i.id, i.message_count) for i in m.list_sessions()]


@pytest.fixture
def env(harness9_home: Path) -> dict[str, str]:
    return {"HARNESS9_HOME": str(harness9_home), "OPENAI_API_KEY": "sk-test"}


def chat_argv(server, *extra: str) -> list[str]:
    return ["chat", "--model", "openai/test-model", "--api-base", server.base_url, *extra]


def kill_leftovers(pids: list[int]) -> None:
    for pid in pids:  # a failing test must not leave its sleep behind
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


# -- item 9: no empty session ------------------------------------------------------------


def test_closing_the_terminal_at_the_first_prompt_leaves_no_empty_session(llm_server, workdir, env):
    with PtyProcess(chat_argv(llm_server), cwd=workdir, env=env) as term:
        term.expect("›")  # the prompt is drawn: the session exists by now
        assert [count for _, count in stored_sessions()] == [0]

        term.hang_up()

        assert term.wait(30) is not None, "harness9 outlived its terminal"
    assert stored_sessions() == []


def test_a_one_shot_whose_stderr_reader_is_gone_still_answers_and_saves(llm_server, env):
    llm_server.reply_text("the answer")
    read_end, write_end = os.pipe()
    os.close(read_end)  # whoever read stderr has gone: every write to it fails (EPIPE)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "harness9", *chat_argv(llm_server, "-p", "hi")],
            stdout=subprocess.PIPE,
            stderr=write_end,
            env=cli_env(**env),
            text=True,
            timeout=120,
            cwd=REPO_ROOT,
        )
    finally:
        os.close(write_end)

    assert (done.returncode, done.stdout) == (0, "the answer\n")
    assert [count for _, count in stored_sessions()] == [2]


def test_continue_skips_an_empty_session_for_the_last_real_one(llm_server):
    with Manager(db_path()) as m:
        real = m.new_session()
        real.add_messages([Message("user", "remember 42"), Message("assistant", "noted")])
        time.sleep(0.01)
        m.new_session()  # newer, and empty: a chat killed at its first prompt
    llm_server.reply_text("it was 42")

    result = chat(llm_server, "what was it?\n", "--continue")

    assert result.exit_code == 0, result.output
    sent = [m["content"] for m in llm_server.requests[0]["messages"][1:]]
    assert sent == ["remember 42", "noted", "what was it?"]
    with Manager(db_path()) as m:
        assert len(m.open_session(real.session_id).get_messages()) == 4


# -- item 8: no orphaned command -----------------------------------------------------------


@pytest.mark.parametrize("how", ["terminal closed", "SIGTERM"])
def test_closing_the_terminal_while_bash_runs_ends_the_command_and_keeps_the_turn(
    llm_server, workdir, env, how: str
):
    llm_server.reply_tool_calls([("call_1", "bash", json.dumps({"command": LONG_COMMAND}))])
    pids: list[int] = []
    try:
        with PtyProcess(chat_argv(llm_server, "--yes"), cwd=workdir, env=env) as term:
            term.expect("›")
            term.send("start the long job\r")
            pids = started_pids(workdir)

            if how == "SIGTERM":
                os.kill(term.pid, signal.SIGTERM)
            else:
                term.hang_up()

            assert term.wait(30) is not None, f"harness9 outlived {how}"
        assert all_gone(pids), f"the command outlived harness9 ({how})"
    finally:
        kill_leftovers(pids)
    with Manager(db_path()) as m:
        [(sid, _)] = stored_sessions()
        tool = m.open_session(sid).get_messages()[-1]
    assert (tool.role, tool.tool_call_id) == ("tool", "call_1")
    assert STOPPED_COMMAND.fullmatch(tool.content), tool.content


KILLED_RUN = """
import sys
from pathlib import Path
from harness9.tools.base import ToolContext
from harness9.tools.shell import run_command
run_command(sys.argv[1], ToolContext(workdir=Path.cwd(), session=None), 600)
"""


def test_a_command_dies_with_a_harness9_killed_by_sigkill(workdir):
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN, LONG_COMMAND], cwd=workdir, env=cli_env()
    )
    pids: list[int] = []
    try:
        pids = started_pids(workdir)

        proc.kill()  # SIGKILL: no handler, no clean-up of its own
        proc.wait(timeout=10)

        assert all_gone(pids), "the command outlived a harness9 killed with SIGKILL"
    finally:
        kill_leftovers(pids)


def test_a_call_whose_result_never_came_is_sent_as_interrupted_not_truncated(llm_server):
    with Manager(db_path()) as m:
        s = m.new_session()  # as a harness9 killed with -9 while `bash` ran leaves it
        s.add_messages(
            [
                Message("user", "build it"),
                Message("assistant", "", [ToolCall("call_1", "bash", '{"command": "make"}')]),
            ]
        )
    llm_server.reply_text("let me try again")

    result = chat(llm_server, "what happened?\n", "--continue")

    assert result.exit_code == 0, result.output
    [tool] = [m for m in llm_server.requests[0]["messages"] if m["role"] == "tool"]
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": UNFINISHED_STUB}


def test_the_repair_names_the_stub_it_is_told_and_truncated_stays_the_default():
    from harness9.context import repair_orphaned_tool_pairs
    from harness9.schema import TRUNCATED_STUB

    call = Message("assistant", "", [ToolCall("c1", "bash", "{}")])

    assert repair_orphaned_tool_pairs([call])[1].content == TRUNCATED_STUB
    repaired = repair_orphaned_tool_pairs([call], stub=UNFINISHED_STUB)
    assert repaired[1] == Message("tool", UNFINISHED_STUB, tool_call_id="c1")
