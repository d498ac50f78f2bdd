"""Provider errors as one readable line: the server's words, its status, the wait it asked for."""

from __future__ import annotations

import pytest

from harness9.provider import LLMProvider, RateLimitError, ServiceUnavailableError
from harness9.provider.errors import (
    error_body,
    is_overloaded,
    provider_message,
    refused_window,
    retry_delay,
)
from harness9.provider.wire import api_base_hint
from harness9.schema import Message
from tests.support.cli import chat, piped
from tests.support.llm_server import ScriptedLLMServer

HELLO = [Message("user", "hello")]


def test_a_529_is_named_overloaded_and_retried(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_error(529, "Overloaded", type="overloaded_error")
    llm_server.reply_text("fine now")
    waits: list[float] = []
    result = chat(llm_server, "", obj=(env := piped("hello\n", sleep=waits.append)))

    assert result.exit_code == 0
    assert env.stdout.getvalue() == "fine now\n"
    assert "openai/test-model is overloaded (HTTP 529): Overloaded; retrying in" in (
        env.stderr.getvalue()
    )
    assert len(waits) == 1


def test_a_529_that_persists_ends_the_turn_with_the_overloaded_line(
    llm_server: ScriptedLLMServer,
) -> None:
    provider = LLMProvider(
        "openai/test-model", api_base=llm_server.base_url, max_retries=0, sleep=lambda s: None
    )
    llm_server.reply_error(529, "Overloaded", type="overloaded_error")
    try:
        provider.generate(HELLO, [])
    except ServiceUnavailableError as exc:
        assert str(exc) == "openai/test-model is overloaded (HTTP 529): Overloaded"
    else:
        raise AssertionError("no error")


def test_retry_after_still_wins_over_backoff(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_error(429, "slow down", headers={"Retry-After": "4"})
    llm_server.reply_text("ok")
    waits: list[float] = []
    provider = LLMProvider("openai/test-model", api_base=llm_server.base_url, sleep=waits.append)
    provider.generate(HELLO, [])
    assert waits == [4.0]


def test_a_rate_limit_error_names_the_status_and_the_message(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_error(429, "Rate limit reached for requests")
    provider = LLMProvider(
        "openai/test-model", api_base=llm_server.base_url, max_retries=0, sleep=lambda s: None
    )
    try:
        provider.generate(HELLO, [])
    except RateLimitError as exc:
        assert str(exc) == (
            "rate limited by openai/test-model (HTTP 429): Rate limit reached for requests"
        )
    else:
        raise AssertionError("no error")


# -- the pieces ------------------------------------------------------------------------------


def test_bytes_reprs_and_class_names_give_way_to_the_providers_message() -> None:
    raw = b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded \xe2\x80\x94 try later"}}'
    text = f"litellm.InternalServerError: AnthropicException - {raw!r}"

    assert provider_message(text) == "Overloaded — try later"
    assert is_overloaded(500, error_body(text))
    assert provider_message("litellm.RateLimitError: RateLimitError: OpenAIException - slow") == (
        "slow"
    )
    assert provider_message("Vertex_ai_betaException BadRequestError - no body here") == (
        "no body here"
    )
    assert provider_message('OllamaException - {"error": "model \\"x\\" not found"}') == (
        'model "x" not found'
    )


def test_google_retry_info_is_read_from_the_details() -> None:
    body = {
        "error": {
            "code": 429,
            "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37.5s"},
            ],
        }
    }
    assert retry_delay(body) == 37.5
    assert retry_delay({"error": {"code": 429}}) is None
    assert retry_delay(None) is None


def test_the_api_base_hint_follows_litellms_url_construction() -> None:
    assert "without /v1" in api_base_hint("anthropic/claude-sonnet-4-5", "http://h:8080/v1")
    assert api_base_hint("anthropic/claude-sonnet-4-5", "https://api.anthropic.com") == ""
    assert "without /v1" in api_base_hint("ollama/llama3.1", "http://localhost:11434/v1/")
    assert api_base_hint("ollama_chat/llama3.1", "http://localhost:11434") == ""
    assert "ends in /v1beta" in api_base_hint("gemini/gemini-2.5-flash", "http://h:1")
    assert api_base_hint("gemini/gemini-2.5-flash", "http://h:1/v1beta/") == ""
    assert "ends in /v1 " in api_base_hint("openai/qwen", "http://localhost:8000")
    assert api_base_hint("mistral/mistral-large", "http://h:1") == ""  # a form not known


# -- the window a too-long refusal names (issue 32) ------------------------------------------


@pytest.mark.parametrize(
    ("said", "window"),
    [
        ("This model's maximum context length is 4096 tokens. However, you requested 6953", 4096),
        ("Requested tokens (3191) exceed context window of 2048", 2048),
        ("However, the model is loaded with context length of only 2048 tokens, which", 2048),
        ("prompt is too long: 250000 tokens > 200000 maximum", 200_000),
        (
            "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
            1_048_576,
        ),
        (
            '{"error": {"type": "exceed_context_size_error", "n_prompt_tokens": 3191, "n_ctx": 2048}}',
            2048,
        ),
        ("the request is too long", None),
    ],
)
def test_a_refusal_names_the_window_in_each_servers_words(said, window):
    assert refused_window(said) == window
