"""Going back leaves no loose ends (issue 36, items 5 and 6): a rewind to one of your own
messages takes it back (never two user turns in a row), and a fork this chat made and
left empty is removed like any session the chat started and left empty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness9.config import db_path
from harness9.store import Manager
from tests.support.cli import chat
from tests.support.llm_server import ScriptedLLMServer, TextReply
from tests.support.pty_terminal import PtyProcess


def roles(body: dict[str, Any]) -> list[str]:
    return [m["role"] for m in body["messages"][1:]]


def user_turns_in_a_row(body: dict[str, Any]) -> bool:
    r = roles(body)
    return any(a == b == "user" for a, b in zip(r, r[1:], strict=False))


def test_rewind_to_your_own_message_sends_its_replacement_in_its_place(
    llm_server: ScriptedLLMServer,
):
    llm_server.respond_with(lambda body: TextReply("reply"))

    result = chat(llm_server, "alpha\nbeta\n/rewind 3\nbeta, said better\n")

    assert result.exit_code == 0, result.stderr
    last = [m["content"] for m in llm_server.requests[-1]["messages"][1:]]
    assert last == ["alpha", "reply", "beta, said better"]
    assert not any(user_turns_in_a_row(b) for b in llm_server.requests)
    assert "rewound to before your message 3" in result.stderr
    assert "taken back (the next line is sent in its place): beta" in result.stderr


def test_rewind_to_your_first_message_continues_in_a_fresh_session(
    llm_server: ScriptedLLMServer,
):
    llm_server.respond_with(lambda body: TextReply("reply"))

    result = chat(llm_server, "alpha\n/rewind 1\nalpha again\n")

    assert result.exit_code == 0, result.stderr
    assert [m["content"] for m in llm_server.requests[-1]["messages"][1:]] == ["alpha again"]
    with Manager(db_path()) as m:
        contents = sorted(
            [x.content for x in m.open_session(i.id).get_messages()] for i in m.list_sessions()
        )
    assert contents == [["alpha", "reply"], ["alpha again", "reply"]]


def test_rewind_in_a_terminal_puts_the_message_back_in_the_prompt(
    llm_server: ScriptedLLMServer, harness9_home: Path, tmp_path: Path
):
    llm_server.respond_with(lambda body: TextReply("reply"))
    argv = ["chat", "--model", "openai/test-model", "--api-base", llm_server.base_url]
    argv += ["--context-window", "32000"]
    env = {"HARNESS9_HOME": str(harness9_home), "OPENAI_API_KEY": "sk-test"}
    with PtyProcess(argv, cwd=tmp_path, env=env) as term:
        at = term.expect("›")
        term.send("alpha\r")
        at = term.expect("›", after=term.expect("reply", after=at))
        term.send("beta\r")
        at = term.expect("›", after=term.expect("reply", after=at))
        term.send("/rewind 3\r")
        at = term.expect("back in the prompt", after=at)
        at = term.expect("›", after=at)
        term.expect("beta", after=at)  # the line editor shows it, ready to send
        term.send("\r")
        term.expect("›", after=term.expect("reply", after=at))
        term.send("\x04")
        assert term.wait(30) == 0
    last = [m["content"] for m in llm_server.requests[-1]["messages"][1:]]
    assert last == ["alpha", "reply", "beta"]
    assert len(llm_server.requests) == 3


def test_a_fork_of_an_empty_session_left_empty_is_not_kept(llm_server: ScriptedLLMServer):
    result = chat(llm_server, "/fork\n")

    assert result.exit_code == 0, result.stderr
    assert "forked: now in fork" in result.stderr
    with Manager(db_path()) as m:
        assert m.list_sessions() == []


def test_a_fork_that_was_written_to_is_kept(llm_server: ScriptedLLMServer):
    llm_server.respond_with(lambda body: TextReply("ok"))

    result = chat(llm_server, "/fork\nhello\n")

    assert result.exit_code == 0, result.stderr
    with Manager(db_path()) as m:
        [kept] = m.list_sessions()
        assert kept.message_count == 2
