"""A model name that names no model is refused in one line, with close names when there are."""

from __future__ import annotations

from tests.support.cli import chat, cli


def test_a_misspelt_model_is_an_unknown_model_with_suggestions(llm_server):
    result = cli("chat", "--model", "gpt-4o-minii", "-p", "hi")

    assert result.exit_code == 1
    assert "unknown model 'gpt-4o-minii'; did you mean gpt-4o-mini" in result.stderr
    assert "unknown provider" not in result.stderr
    assert llm_server.requests == []  # nothing was sent


def test_a_misspelt_provider_is_an_unknown_provider_with_suggestions(llm_server):
    result = cli("chat", "--model", "opnai/gpt-4o", "-p", "hi")

    assert result.exit_code == 1
    assert "unknown provider 'opnai' in model 'opnai/gpt-4o'; did you mean openai" in (
        result.stderr
    )


def test_an_empty_model_is_refused_not_replaced_by_the_default(llm_server):
    result = cli("chat", "--model", "", "-p", "hi")

    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "harness9: --model is empty; name a model, e.g. --model openai/gpt-4o-mini"
    )


def test_a_provider_without_a_model_is_refused(llm_server):
    result = cli("chat", "--model", "openai/", "-p", "hi")

    assert result.exit_code == 2
    assert "--model 'openai/' names no model after its provider" in result.stderr


def test_model_switch_to_a_provider_alone_is_one_error_line(llm_server):
    result = chat(llm_server, "/model openai/\n/model\n")

    assert "error: /model 'openai/' names no model after its provider" in result.stderr
    assert "model openai/test-model" in result.stderr
