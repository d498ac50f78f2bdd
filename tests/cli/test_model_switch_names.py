"""/model checks a name as --model does (issue 36, item 13): a provider litellm cannot
route is refused before the switch, with the same line, and the chat keeps its model."""

from __future__ import annotations

from tests.support.cli import chat
from tests.support.llm_server import ScriptedLLMServer, TextReply


def test_slash_model_refuses_an_unknown_provider_and_keeps_the_model(
    llm_server: ScriptedLLMServer,
):
    llm_server.respond_with(lambda body: TextReply("ok"))

    result = chat(llm_server, "/model nosuchprovider/xyz\n/model\nhi\n", "--context-window", "8k")

    assert "error: unknown provider 'nosuchprovider' in model 'nosuchprovider/xyz'" in (
        result.stderr
    )
    assert "switched" not in result.stderr
    assert "model openai/test-model · window 8K" in result.stderr
    assert [b["model"] for b in llm_server.requests] == ["test-model"]


def test_slash_model_refuses_an_unknown_provider_as_the_flag_does(
    llm_server: ScriptedLLMServer,
):
    flag = chat(llm_server, "hi\n", "--model", "nosuchprovider/xyz", "--context-window", "8k")
    slash = chat(llm_server, "/model nosuchprovider/xyz\n", "--context-window", "8k")

    [flag_line] = [x for x in flag.stderr.splitlines() if x.startswith("error: ")]
    [slash_line] = [x for x in slash.stderr.splitlines() if x.startswith("error: ")]
    assert flag_line == slash_line
    assert llm_server.requests == []
