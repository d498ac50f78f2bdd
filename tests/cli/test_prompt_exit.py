"""After a model call the process ends as soon as the command is done: no seconds of
interpreter teardown between the last line and the shell prompt, the exit status kept."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.support.cli import cli_env, run_cli


def one_shot(server, home, *args: str) -> tuple[str, float, int]:
    """Run `harness9 chat -p` in a process; (the first stdout line, seconds from it to the
    exit, the exit status)."""
    argv = [sys.executable, "-m", "harness9", "chat", "--model", "openai/test-model"]
    argv += ["--api-base", server.base_url, *args]
    env = cli_env(HARNESS9_HOME=str(home), OPENAI_API_KEY="sk-test")
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    shown = time.monotonic()
    proc.communicate(timeout=120)
    return line, time.monotonic() - shown, proc.returncode


def test_a_one_shot_exits_promptly_after_its_reply_and_keeps_the_session(llm_server, harness9_home):
    llm_server.reply_text("hello there")

    line, after_reply, status = one_shot(llm_server, harness9_home, "-p", "hi")

    assert (line, status) == ("hello there\n", 0)
    # The interpreter's teardown of litellm took 2.5 s at idle (5-7 s under load) here.
    assert after_reply < 2.0
    listed = run_cli("sessions", "list", env={"HARNESS9_HOME": str(harness9_home)})
    assert "hi" in listed.stdout


def test_a_failed_turn_still_exits_1(llm_server, harness9_home):
    llm_server.reply_error(400, "bad request")

    line, _, status = one_shot(llm_server, harness9_home, "-p", "hi")

    assert (line, status) == ("", 1)
