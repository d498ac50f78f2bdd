"""LLMProvider end to end: litellm over real HTTP to the scripted server on 127.0.0.1."""

from __future__ import annotations

import os
import sys

import pytest

from harness9.provider import (
    AuthenticationError,
    BadRequestError,
    ContextWindowExceededError,
    LLMProvider,
    LocalRequestError,
    ModelTimeoutError,
    RateLimitError,
    ServiceUnavailableError,
    StreamInterruptedError,
    load_litellm,
    preload_in_background,
)
from harness9.schema import Message, ToolCall, ToolDefinition, Usage
from tests.support.cli import run_python
from tests.support.llm_server import ScriptedLLMServer

MODEL = "openai/test-model"
HELLO = [Message("system", "be brief"), Message("user", "hello")]


def make_provider(server: ScriptedLLMServer, **kwargs: object) -> LLMProvider:
    kwargs.setdefault("backoff_base", 0.01)
    kwargs.setdefault("timeout", 5.0)
    return LLMProvider(MODEL, api_base=server.base_url, **kwargs)  # type: ignore[arg-type]


class RetryLog:
    def __init__(self) -> None:
        self.calls: list[tuple[int, float, str]] = []

    def __call__(self, attempt: int, delay: float, reason: str) -> None:
        self.calls.append((attempt, delay, reason))


# -- replies -------------------------------------------------------------------------------


def test_non_streaming_text_and_usage_come_back(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_text("Hi there.", usage=(21, 4))
    message, usage = make_provider(llm_server).generate(HELLO, [])
    assert message == Message("assistant", "Hi there.")
    assert usage == Usage(input_tokens=21, output_tokens=4)


def test_request_carries_messages_and_omits_empty_tools(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_text("ok")
    make_provider(llm_server).generate(HELLO, [])
    body = llm_server.requests[0]
    assert body["model"] == "test-model"
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
    ]
    assert "tools" not in body


def test_tool_definitions_are_sent_in_openai_form(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_text("ok")
    params = {"type": "object", "properties": {"command": {"type": "string"}}}
    make_provider(llm_server).generate(HELLO, [ToolDefinition("bash", "Run a command", params)])
    assert llm_server.requests[0]["tools"] == [
        {
            "type": "function",
            "function": {"name": "bash", "description": "Run a command", "parameters": params},
        }
    ]


def test_streaming_asks_for_usage_and_returns_it(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_text("streamed answer", usage=(33, 5), chunk_size=4)
    pieces: list[str] = []
    message, usage = make_provider(llm_server).generate(
        HELLO, [], stream=True, on_delta=pieces.append
    )
    assert llm_server.requests[0]["stream"] is True
    assert llm_server.requests[0]["stream_options"] == {"include_usage": True}
    assert usage == Usage(input_tokens=33, output_tokens=5)
    assert message == Message("assistant", "streamed answer")
    assert pieces == ["stre", "amed", " ans", "wer"]


def test_streamed_parallel_tool_calls_are_assembled_by_index(
    llm_server: ScriptedLLMServer,
) -> None:
    llm_server.reply_tool_calls(
        [
            ("call_1", "bash", '{"command": "ls -la /tmp"}'),
            ("call_2", "read_file", '{"path": "notes.txt"}'),
        ],
        content="Looking.",
        chunk_size=3,
    )
    message, _ = make_provider(llm_server).generate(HELLO, [], stream=True)
    assert message.content == "Looking."
    assert message.tool_calls == [
        ToolCall("call_1", "bash", '{"command": "ls -la /tmp"}'),
        ToolCall("call_2", "read_file", '{"path": "notes.txt"}'),
    ]


def test_non_streamed_tool_calls_are_returned(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_tool_calls([("call_9", "write_file", '{"path": "a", "content": "b"}')])
    message, _ = make_provider(llm_server).generate(HELLO, [])
    assert message == Message(
        "assistant",
        "",
        tool_calls=[ToolCall("call_9", "write_file", '{"path": "a", "content": "b"}')],
    )


def test_empty_reply_is_an_empty_assistant_message(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_empty(usage=(5, 0))
    message, usage = make_provider(llm_server).generate(HELLO, [], stream=True)
    assert message == Message("assistant", "")
    assert usage == Usage(5, 0)


# -- keys ----------------------------------------------------------------------------------


def test_explicit_key_is_sent_as_bearer_token(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_text("ok")
    make_provider(llm_server, api_key="sk-explicit").generate(HELLO, [])
    assert llm_server.request_headers[0]["authorization"] == "Bearer sk-explicit"


def test_local_server_without_any_key_gets_a_placeholder(
    llm_server: ScriptedLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    llm_server.reply_text("ok")
    make_provider(llm_server).generate(HELLO, [])
    assert llm_server.request_headers[0]["authorization"] == "Bearer sk-no-key"


def test_missing_key_without_api_base_fails_before_any_request(
    llm_server: ScriptedLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    # Should the check not fire, litellm would reach the scripted server, not the network.
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.base_url)
    llm_server.reply_text("must not be used")
    with pytest.raises(AuthenticationError) as info:
        LLMProvider(MODEL).generate(HELLO, [])
    assert str(info.value) == (
        "no API key for openai/test-model: set OPENAI_API_KEY (or pass --api-base for a local server)"
    )
    assert llm_server.requests == []


@pytest.mark.parametrize(
    ("model", "variable"),
    [
        ("anthropic/claude-sonnet-4", "ANTHROPIC_API_KEY"),
        ("gemini/gemini-2.0-flash", "GEMINI_API_KEY"),
        ("openrouter/openai/gpt-4o", "OPENROUTER_API_KEY"),
        ("deepseek/deepseek-chat", "DEEPSEEK_API_KEY"),
        ("gpt-4o-mini", "OPENAI_API_KEY"),
    ],
)
def test_missing_key_error_names_the_providers_variable(
    model: str, variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENROUTER_API_KEY", "DEEPSEEK_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(AuthenticationError, match=f"set {variable} "):
        LLMProvider(model).check_credentials()


def test_key_from_the_environment_passes_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-x")
    LLMProvider("anthropic/claude-sonnet-4").check_credentials()  # raises if it fails


def test_repr_never_shows_the_key() -> None:
    assert "sk-secret-123" not in repr(LLMProvider(MODEL, api_key="sk-secret-123"))


# -- errors and retries --------------------------------------------------------------------


def test_server_error_then_success_is_retried(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_error(500, "overloaded")
    llm_server.reply_text("recovered")
    retries = RetryLog()
    message, _ = make_provider(llm_server, on_retry=retries).generate(HELLO, [])
    assert message.content == "recovered"
    assert len(llm_server.requests) == 2
    assert [(a, reason) for a, _, reason in retries.calls] == [
        (1, "openai/test-model is unavailable (HTTP 500): overloaded")
    ]


def test_backoff_doubles_between_attempts(llm_server: ScriptedLLMServer) -> None:
    for _ in range(3):
        llm_server.reply_error(503, "busy")
    llm_server.reply_text("ok")
    retries = RetryLog()
    make_provider(llm_server, on_retry=retries, backoff_base=0.01).generate(HELLO, [])
    delays = [d for _, d, _ in retries.calls]
    assert [a for a, _, _ in retries.calls] == [1, 2, 3]
    # base * 2**attempt plus at most 10% jitter
    for delay, expected in zip(delays, (0.01, 0.02, 0.04), strict=True):
        assert expected <= delay <= expected * 1.1


def test_rate_limit_honours_retry_after(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_error(429, "slow down", headers={"Retry-After": "0.25"})
    llm_server.reply_text("ok")
    retries = RetryLog()
    make_provider(llm_server, on_retry=retries).generate(HELLO, [])
    assert [(a, d) for a, d, _ in retries.calls] == [(1, 0.25)]
    assert len(llm_server.requests) == 2


def test_retry_after_is_capped_at_backoff_max(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_error(429, "slow down", headers={"Retry-After": "3600"})
    llm_server.reply_text("ok")
    retries = RetryLog()
    make_provider(llm_server, on_retry=retries, backoff_max=0.05).generate(HELLO, [])
    assert [d for _, d, _ in retries.calls] == [0.05]


def test_rate_limit_gives_up_after_max_retries(llm_server: ScriptedLLMServer) -> None:
    for _ in range(3):
        llm_server.reply_error(429, "quota")
    with pytest.raises(RateLimitError, match=r"rate limited by openai/test-model \(HTTP 429\)"):
        make_provider(llm_server, max_retries=2).generate(HELLO, [])
    assert len(llm_server.requests) == 3


def test_unauthorized_names_the_key_variable_and_is_not_retried(
    llm_server: ScriptedLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No api_base: the provider's default URL, pointed at the scripted server.
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.base_url)
    llm_server.reply_error(401, "Incorrect API key provided", code="invalid_api_key")
    retries = RetryLog()
    with pytest.raises(AuthenticationError) as info:
        LLMProvider(MODEL, backoff_base=0.01, on_retry=retries).generate(HELLO, [])
    assert str(info.value) == (
        "authentication failed for openai/test-model: "
        "set OPENAI_API_KEY (or pass --api-base for a local server)"
    )
    assert len(llm_server.requests) == 1
    assert retries.calls == []


def test_unauthorized_against_a_base_url_names_variable_and_server(
    llm_server: ScriptedLLMServer,
) -> None:
    llm_server.reply_error(401, "Incorrect API key provided", code="invalid_api_key")
    with pytest.raises(AuthenticationError) as info:
        make_provider(llm_server).generate(HELLO, [])
    assert str(info.value) == (
        f"authentication failed for openai/test-model at {llm_server.base_url}: "
        "set OPENAI_API_KEY to a key it accepts"
    )


def test_error_messages_never_contain_the_key(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_error(400, "bad request from key sk-very-secret-key")
    with pytest.raises(BadRequestError) as info:
        make_provider(llm_server, api_key="sk-very-secret-key").generate(HELLO, [])
    assert "sk-very-secret-key" not in str(info.value)
    assert str(info.value) == (
        "openai/test-model rejected the request (HTTP 400): bad request from key [redacted]"
    )


def test_context_length_400_is_context_window_exceeded_and_not_retried(
    llm_server: ScriptedLLMServer,
) -> None:
    llm_server.reply_error(
        400,
        "This model's maximum context length is 8192 tokens. However, your messages "
        "resulted in 9000 tokens.",
        code="context_length_exceeded",
    )
    with pytest.raises(ContextWindowExceededError, match="maximum context length is 8192"):
        make_provider(llm_server).generate(HELLO, [])
    assert len(llm_server.requests) == 1


def test_other_400_is_bad_request_and_not_retried(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_error(400, "Invalid 'messages[1].role'")
    with pytest.raises(BadRequestError) as info:
        make_provider(llm_server).generate(HELLO, [])
    assert not isinstance(info.value, ContextWindowExceededError)
    assert len(llm_server.requests) == 1


def test_unknown_model_404_is_bad_request(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_error(404, "The model `test-model` does not exist", code="model_not_found")
    with pytest.raises(BadRequestError, match=r"\(HTTP 404\): The model `test-model` does not"):
        make_provider(llm_server).generate(HELLO, [])


def test_stream_break_after_text_raises_with_partial_and_no_retry(
    llm_server: ScriptedLLMServer,
) -> None:
    llm_server.reply_stream_break("The answer is")
    llm_server.reply_text("must not be requested")
    shown: list[str] = []
    with pytest.raises(StreamInterruptedError) as info:
        make_provider(llm_server).generate(HELLO, [], stream=True, on_delta=shown.append)
    assert info.value.partial == Message("assistant", "The answer is")
    assert "".join(shown) == "The answer is"
    assert len(llm_server.requests) == 1


def test_stream_break_with_nothing_shown_is_retried(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_stream_break("lost")
    llm_server.reply_text("whole answer")
    message, _ = make_provider(llm_server).generate(HELLO, [], stream=True)
    assert message.content == "whole answer"
    assert len(llm_server.requests) == 2


def test_timeout_is_retried_then_reported(llm_server: ScriptedLLMServer) -> None:
    llm_server.reply_delay(3)
    llm_server.reply_delay(3)
    retries = RetryLog()
    provider = make_provider(llm_server, timeout=0.3, max_retries=1, on_retry=retries)
    with pytest.raises(ModelTimeoutError, match=r"openai/test-model did not answer within 0\.3s"):
        provider.generate(HELLO, [])
    assert len(llm_server.requests) == 2
    assert [a for a, _, _ in retries.calls] == [1]


def test_refused_connection_is_service_unavailable() -> None:
    server = ScriptedLLMServer().start()
    base_url = server.base_url
    server.stop()  # nothing listens on that port any more
    provider = LLMProvider(MODEL, api_base=base_url, max_retries=0, timeout=5)
    with pytest.raises(ServiceUnavailableError) as caught:
        provider.generate(HELLO, [])
    assert str(caught.value).startswith(f"could not connect to {base_url}: ")
    assert "HTTP" not in str(caught.value)


def test_an_api_base_that_is_not_a_url_says_so_and_is_not_retried() -> None:
    retries = RetryLog()
    provider = LLMProvider(MODEL, api_base="notaurl", on_retry=retries, timeout=5)
    with pytest.raises(BadRequestError) as caught:
        provider.generate(HELLO, [])
    assert str(caught.value) == "could not connect to notaurl: it is not an http:// or https:// URL"
    assert retries.calls == []


def test_an_unknown_provider_is_named_and_no_request_is_sent(
    llm_server: ScriptedLLMServer,
) -> None:
    provider = LLMProvider("nosuchprovider/foo", api_base=llm_server.base_url, timeout=5)
    with pytest.raises(BadRequestError) as caught:
        provider.generate(HELLO, [])
    assert str(caught.value).startswith(
        "unknown provider 'nosuchprovider' in model 'nosuchprovider/foo'"
    )
    assert "HTTP" not in str(caught.value)
    assert llm_server.requests == []


def test_a_local_fault_while_building_the_request_is_not_blamed_on_the_server(
    llm_server: ScriptedLLMServer,
) -> None:
    retries = RetryLog()
    bad = [Message("user", b"bytes, not text")]  # type: ignore[arg-type]
    with pytest.raises(LocalRequestError) as caught:
        make_provider(llm_server, on_retry=retries).generate(bad, [])
    assert "HTTP 500" not in str(caught.value) and "unavailable" not in str(caught.value)
    assert "TypeError" in str(caught.value) and "local fault" in str(caught.value)
    assert retries.calls == []


def test_a_long_run_of_identical_chunks_is_not_cut_off(llm_server: ScriptedLLMServer) -> None:
    rule = "=" * 750  # 150 identical 5-character chunks: litellm's guard stops at 100
    llm_server.reply_text(rule, chunk_size=5)
    shown: list[str] = []
    message, _ = make_provider(llm_server, max_retries=0).generate(
        HELLO, [], stream=True, on_delta=shown.append
    )
    assert message.content == rule
    assert "".join(shown) == rule


def test_under_scripted_server_error_surfaces_its_message(llm_server: ScriptedLLMServer) -> None:
    with pytest.raises(ServiceUnavailableError, match="scripted server: no reply queued"):
        make_provider(llm_server, max_retries=0).generate(HELLO, [])


# -- loading litellm -----------------------------------------------------------------------


def test_load_litellm_is_idempotent_and_quiet() -> None:
    first = load_litellm()
    assert load_litellm() is first
    assert first.suppress_debug_info is True
    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


def test_preload_in_background_loads_litellm_in_a_daemon_thread() -> None:
    thread = preload_in_background()
    assert thread.daemon
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert "litellm" in sys.modules


def test_importing_the_provider_package_does_not_import_litellm() -> None:
    code = (
        "import sys, harness9.provider as p; "
        "p.get_model_limits('openrouter/openai/gpt-4o'); "
        "print(sorted(m for m in ('litellm', 'openai', 'httpx') if m in sys.modules))"
    )
    out = run_python(code, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_litellm_copies_no_message_for_a_logging_payload_nobody_reads() -> None:
    """After every call litellm builds a logging payload in a background thread; with its
    base64 shortening off it keeps the request's messages as they are instead of copying
    every one of them (issue 23), and the setting does not reach the agent's commands."""
    load_litellm()
    from litellm import constants
    from litellm.litellm_core_utils.logging_utils import truncate_base64_in_messages

    assert constants.MAX_BASE64_LENGTH_FOR_LOGGING == 0
    messages = [{"role": "user", "content": "data:image/png;base64," + "A" * 500}]
    assert truncate_base64_in_messages(messages) is messages
    assert "MAX_BASE64_LENGTH_FOR_LOGGING" not in os.environ
