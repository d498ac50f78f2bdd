"""One rule for a context window a user gives (issue 36, item 12): the forms the screen
prints (4096, 4k, 32.8K, 1M) are taken, 1,024 to 10M, and every other value gets the same
one-line message, from --context-window, HARNESS9_CONTEXT_WINDOW and /model NAME WINDOW."""

from __future__ import annotations

import pytest

from tests.support.cli import chat, cli
from tests.support.llm_server import ScriptedLLMServer, TextReply

RULE = "takes a number of tokens from 1,024 to 10M, such as 8192, 32k, 32.8K or 1M"


@pytest.mark.parametrize(
    ("given", "shown"),
    [("4k", "4K"), ("32.8K", "32.8K"), ("1M", "1M"), ("2048", "2K"), ("16_384", "16.4K")],
)
def test_the_window_flag_takes_the_forms_the_screen_prints(
    llm_server: ScriptedLLMServer, given: str, shown: str
):
    result = chat(llm_server, "/model\n", "--context-window", given)

    assert result.exit_code == 0, result.stderr
    assert f"model openai/test-model · window {shown} ·" in result.stderr


@pytest.mark.parametrize("given", ["0", "500", "1023", "-4k", "4x", "k", "1.5", "2000000000"])
def test_every_refused_window_flag_gets_the_same_one_line(given: str):
    result = cli("chat", "--model", "openai/test-model", "--context-window", given, "-p", "hi")

    assert result.exit_code == 2
    assert result.stderr == (
        f"harness9: --context-window (HARNESS9_CONTEXT_WINDOW) {RULE} (no model works in "
        f"less; none has more), got {given!r}\n"
    )


def test_the_environment_takes_the_same_forms(
    llm_server: ScriptedLLMServer, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("HARNESS9_CONTEXT_WINDOW", "128k")

    result = chat(llm_server, "/model\n")

    assert result.exit_code == 0, result.stderr
    assert "window 128K" in result.stderr


def test_a_refused_window_in_the_environment_gets_the_same_line(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("HARNESS9_CONTEXT_WINDOW", "0")

    result = cli("chat", "--model", "openai/test-model", "-p", "hi")

    assert result.exit_code == 2
    assert RULE in result.stderr and len(result.stderr.splitlines()) == 1


def test_slash_model_refuses_a_window_past_the_maximum_and_keeps_the_model(
    llm_server: ScriptedLLMServer,
):
    llm_server.respond_with(lambda body: TextReply("ok"))

    result = chat(llm_server, "/model openai/other 2000000000\nhi\n", "--context-window", "8k")

    assert f"error: the window after /model NAME {RULE}" in result.stderr
    assert "switched" not in result.stderr
    assert llm_server.requests[-1]["model"] == "test-model"


def test_slash_model_takes_a_window_in_k(llm_server: ScriptedLLMServer):
    result = chat(llm_server, "/model openai/other 32.8k\n", "--context-window", "8k")

    assert "switched to openai/other · window 32.8K" in result.stderr
