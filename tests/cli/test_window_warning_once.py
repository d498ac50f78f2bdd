"""The "window not known" warning is said once per model and API base, remembered in
$HARNESS9_HOME (issue 36, item 16), not on every one-shot."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import cli
from tests.support.llm_server import ScriptedLLMServer, TextReply

WARNING = "the context window of openai/test-model is not known"


def one_shot(server: ScriptedLLMServer, model: str = "openai/test-model") -> str:
    result = cli("chat", "--model", model, "--api-base", server.base_url, "-p", "hi")
    assert result.exit_code == 0, result.stderr
    return result.stderr


def test_the_warning_is_said_on_the_first_one_shot_only(llm_server: ScriptedLLMServer):
    llm_server.respond_with(lambda body: TextReply("ok"))

    first, second, third = (one_shot(llm_server) for _ in range(3))

    assert WARNING in first
    assert "is not known" not in second and "is not known" not in third


def test_another_model_or_api_base_is_warned_about_once_too(llm_server: ScriptedLLMServer):
    llm_server.respond_with(lambda body: TextReply("ok"))
    assert WARNING in one_shot(llm_server)

    other_model = one_shot(llm_server, "openai/other-model")
    with ScriptedLLMServer() as elsewhere:
        elsewhere.respond_with(lambda body: TextReply("ok"))
        other_base = one_shot(elsewhere)

    assert "the context window of openai/other-model is not known" in other_model
    assert WARNING in other_base


def test_what_was_warned_about_is_kept_in_the_home(
    llm_server: ScriptedLLMServer, harness9_home: Path
):
    llm_server.respond_with(lambda body: TextReply("ok"))

    one_shot(llm_server)

    kept = (harness9_home / "window_warnings").read_text()
    assert kept == f"openai/test-model\t{llm_server.base_url}\n"
