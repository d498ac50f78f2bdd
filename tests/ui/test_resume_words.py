"""What the /resume picker's words filter, and how it says it (issue 36, item 14)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import chat
from tests.support.llm_server import ScriptedLLMServer, TextReply
from tests.support.pty_terminal import PtyProcess


def two_sessions(server: ScriptedLLMServer) -> None:
    server.respond_with(lambda body: TextReply("ok"))
    assert chat(server, "fix the parser\nthen deploy to staging\n").exit_code == 0
    assert chat(server, "write the changelog\n").exit_code == 0


def test_words_found_only_in_messages_point_to_search(llm_server: ScriptedLLMServer):
    two_sessions(llm_server)

    result = chat(llm_server, "/resume staging\n")

    assert (
        "no session's title, id or directory matches 'staging'; "
        "/search staging looks in what was said"
    ) in result.stderr


def test_a_filtered_picker_says_what_it_filtered(llm_server: ScriptedLLMServer):
    two_sessions(llm_server)

    result = chat(llm_server, "/resume parser\nq\n")

    assert (
        "Sessions whose title, id or directory matches 'parser' (/search looks in what was "
        "said) (1-1 of 1):"
    ) in result.stderr


def test_the_picker_at_a_terminal_says_enter_or_q_cancels(
    llm_server: ScriptedLLMServer, harness9_home: Path, tmp_path: Path
):
    two_sessions(llm_server)
    argv = ["chat", "--model", "openai/test-model", "--api-base", llm_server.base_url]
    env = {"HARNESS9_HOME": str(harness9_home), "OPENAI_API_KEY": "sk-test"}
    with PtyProcess([*argv, "--context-window", "8k"], cwd=tmp_path, env=env) as term:
        at = term.expect("›")
        term.send("/resume\r")
        at = term.expect("number to resume, words to filter, Enter or q cancels", after=at)
        term.send("q\r")
        term.expect("resume cancelled", after=at)
        term.send("\x04")
        assert term.wait(30) == 0
    assert "Enter cancels, q cancels" not in term.screen()
