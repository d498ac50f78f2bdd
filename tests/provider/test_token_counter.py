"""Token counters: the model's tokenizer through litellm, cached per message; the server's count model."""

from __future__ import annotations

import threading

import pytest

from harness9.provider import tokenizer as tokenizer_module
from harness9.provider.llm import load_litellm
from harness9.provider.tokenizer import (
    ByteCounter,
    TokenizerCounter,
    TokenizerSpec,
    _run_within,
    make_token_counter,
    tokenizer_for,
)
from harness9.schema import Message, ToolCall
from harness9.tokens import ServerCount, estimate_tokens
from tests.support.cli import run_python

CHINESE = (
    "上下文工程决定了智能体能否在长时间的会话中保持连贯。当历史记录接近模型的上下文窗口时，"
    "系统会把较早的消息压缩成摘要，并保留最近的工具调用及其结果。"
)


def chat() -> list[Message]:
    return [
        Message("system", "You are a careful coding assistant."),
        Message("user", "What does the compaction threshold do?"),
        Message("assistant", "It folds old messages into a summary at 80% of the window."),
    ]


def with_tools() -> list[Message]:
    return [
        Message("system", "You are terse."),
        Message("user", "List the files, then read README.md"),
        Message(
            "assistant",
            "",
            [
                ToolCall("call_1", "bash", '{"command": "ls -la"}'),
                ToolCall("call_2", "read_file", '{"path": "README.md"}'),
            ],
        ),
        Message("tool", "README.md\nharness9\npyproject.toml", tool_call_id="call_1"),
        Message("tool", "# harness9\nA terminal agent harness.", tool_call_id="call_2"),
        Message("assistant", "Three entries; the README describes the harness."),
    ]


def cjk() -> list[Message]:
    return [Message("user", CHINESE), Message("assistant", "好的，" + CHINESE[:40])]


def message_bytes_of(n_tokens: int) -> Message:
    """A user message whose byte estimate is exactly ``n_tokens``."""
    return Message("user", "abcd" * n_tokens)


# -- the per-message cache ------------------------------------------------------------------


def test_counting_the_same_list_twice_tokenizes_each_message_once() -> None:
    counter = TokenizerCounter("gpt-4o-mini")
    msgs = with_tools()
    first = counter.count(msgs)
    second = counter.count(msgs)
    assert counter.tokenized == 6
    assert second == first


def test_appending_messages_tokenizes_only_the_new_ones() -> None:
    counter = TokenizerCounter("gpt-4o-mini")
    msgs = chat()
    counter.count(msgs)
    msgs += [Message("user", "And below the threshold?"), Message("assistant", "Nothing.")]
    counter.count(msgs)
    assert counter.tokenized == 5


def test_an_equal_message_rebuilt_from_storage_is_a_cache_hit() -> None:
    counter = TokenizerCounter("gpt-4o-mini")
    counter.count(with_tools())
    counter.count(with_tools())  # new objects, same role/content/calls/ids
    assert counter.tokenized == 6


def test_a_message_with_changed_tool_arguments_is_tokenized_again() -> None:
    counter = TokenizerCounter("gpt-4o-mini")
    msgs = with_tools()
    counter.count(msgs)
    msgs[2].tool_calls[0].arguments = '{"command": "ls"}'
    counter.count(msgs)
    assert counter.tokenized == 7


def test_the_cache_evicts_the_least_recently_used_message() -> None:
    counter = TokenizerCounter("gpt-4o-mini", cache_size=2)
    a, b, c = chat()
    counter.count([a, b, c])  # a is evicted when c enters
    counter.count([c])
    assert counter.tokenized == 3
    counter.count([a])
    assert counter.tokenized == 4


def test_cache_size_zero_tokenizes_every_message_every_time() -> None:
    counter = TokenizerCounter("gpt-4o-mini", cache_size=0)
    counter.count(chat())
    counter.count(chat())
    assert counter.tokenized == 6


def test_an_empty_list_counts_zero() -> None:
    assert TokenizerCounter("gpt-4o-mini").count([]) == 0


# -- agreement with litellm -----------------------------------------------------------------


@pytest.mark.parametrize("model", ["gpt-4o-mini", "gpt-4", "claude-sonnet-4-5", "deepseek-chat"])
@pytest.mark.parametrize("build", [chat, with_tools, cjk], ids=["chat", "tools", "cjk"])
def test_total_agrees_with_litellm_token_counter_for_the_whole_list(model: str, build) -> None:
    msgs = build()
    litellm = load_litellm()
    expected = litellm.token_counter(model=model, messages=[m.to_dict() for m in msgs])
    assert abs(TokenizerCounter(model).count(msgs) - expected) <= 2


def test_gpt_4o_counts_with_o200k_and_gpt_4_with_cl100k() -> None:
    # Same text, different vocabularies: the counter follows the model's own tokenizer.
    msgs = cjk()
    assert TokenizerCounter("gpt-4o-mini").count(msgs) < TokenizerCounter("gpt-4").count(msgs)


def test_byte_estimate_of_chinese_is_within_half_and_twice_each_tokenizer() -> None:
    msgs = [Message("user", CHINESE * 5)]
    estimate = estimate_tokens(msgs)  # 273: three bytes a character, four bytes a token
    for model in ("gpt-4o-mini", "gpt-4", "claude-sonnet-4-5", "deepseek-chat"):
        exact = TokenizerCounter(model).count(msgs)
        assert 0.5 * exact <= estimate <= 2.0 * exact, model
    # characters / 4 would be 91: a third of what o200k counts.
    assert len(CHINESE * 5) // 4 < TokenizerCounter("gpt-4o-mini").count(msgs) // 2


# -- the server's count (one model, either side of the estimate) ----------------------------


def test_the_servers_count_is_the_estimate_until_a_server_reports() -> None:
    model = ServerCount()
    assert not model.known and model.count(1000) == 1000


def test_one_report_of_a_server_that_counts_half_again_scales_larger_requests() -> None:
    model = ServerCount()
    model.observe(1000, 1500)
    assert model.count(1000) == 1500 and model.count(2000) == 3000


def test_one_report_of_a_server_that_drops_the_tools_takes_them_off_larger_requests() -> None:
    # 1,000 tokens of tool definitions the chat template has no place for.
    model = ServerCount()
    model.observe(1500, 500)
    assert model.count(2500) == 1500


def test_requests_of_different_sizes_fit_a_ratio_and_a_fixed_part() -> None:
    model = ServerCount()
    for estimate in (1000, 1500, 2000, 3000):
        model.observe(estimate, round(0.7 * estimate) - 400)  # a denser tokenizer, no tools
    assert model.ratio == pytest.approx(0.7) and model.fixed == pytest.approx(-400)
    assert model.count(4000) == 2400  # below the estimate: believed


def notes(messages: int, summary: bool = False) -> tuple[int, int]:
    """(estimate, server's count) of a request of ``messages`` messages of 75 tokens each
    (``summary``: one of them is a 675-token summary of 22 folded messages) to a server
    that counts 4 tokens a message beyond the estimate and 200 tokens of tool definitions."""
    estimate = 75 * messages + (600 if summary else 0)
    return estimate, estimate + 4 * messages + 200


def test_the_calls_before_a_compaction_do_not_tilt_the_count_after_it() -> None:
    # After the compaction the same estimate holds fewer messages, so the server counts it
    # lower; fitted across both, the slope steepens and the next request was counted 24
    # tokens over the server's 5,066 (a threshold in between compacted a call early).
    model = ServerCount()
    for messages in range(52, 66, 2):
        model.observe(*notes(messages))
    for messages in range(44, 54, 2):
        model.observe(*notes(messages, summary=True))
    estimate, served = notes(54, summary=True)
    assert (estimate, served) == (4650, 5066)
    assert model.count(estimate) == 5066


def test_one_reply_after_a_compaction_sets_the_level_at_the_slope_learnt_before() -> None:
    model = ServerCount()
    for messages in range(50, 66, 2):
        model.observe(*notes(messages))
    model.observe(*notes(44, summary=True))
    estimate, served = notes(46, summary=True)
    assert model.count(estimate) == served == 4434


def test_a_ratio_outside_four_times_either_way_is_clamped() -> None:
    model = ServerCount()
    model.observe(1000, 10_000)
    assert model.ratio == 4.0


def test_a_call_without_usage_teaches_nothing() -> None:
    model = ServerCount()
    model.observe(1000, 0)
    model.observe(0, 500)
    assert not model.known


# -- choosing a counter, and falling back ---------------------------------------------------


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("gpt-4o-mini", "openai"),
        ("openai/gpt-4.1", "openai"),
        ("azure/eu/gpt-4o", "openai"),
        ("o3-mini", "openai"),
        ("anthropic/claude-sonnet-4-5", "anthropic"),
        ("claude-3-5-haiku-20241022", "anthropic"),
        ("deepseek/deepseek-reasoner", "deepseek"),
    ],
)
def test_models_with_a_bundled_tokenizer(model: str, family: str) -> None:
    spec = tokenizer_for(model)
    assert spec is not None
    assert spec.family == family


@pytest.mark.parametrize(
    "model",
    [
        "ollama/llama3",
        "ollama/llama-3",  # litellm would fetch this one from the network
        "openai/meta-llama/Llama-3-8B",  # an OpenAI-compatible route, not an OpenAI model
        "ollama/gpt-oss:20b",  # litellm would count it with cl100k, not its o200k_harmony
        "gemini/gemini-2.0-flash",
        "hosted_vllm/qwen2.5-coder",
        "",
    ],
)
def test_unknown_tokenizer_falls_back_to_the_byte_counter(model: str) -> None:
    assert tokenizer_for(model) is None
    counter = make_token_counter(model)
    assert isinstance(counter, ByteCounter)
    assert counter.count(chat()) == estimate_tokens(chat())


def test_known_model_gets_a_tokenizer_counter() -> None:
    counter = make_token_counter("openai/gpt-4o-mini")
    assert isinstance(counter, TokenizerCounter)
    assert counter.spec == TokenizerSpec("openai", "gpt-4o-mini")


def test_tokenizer_counter_refuses_a_model_without_a_bundled_tokenizer() -> None:
    with pytest.raises(ValueError, match="no bundled tokenizer"):
        TokenizerCounter("ollama/llama3")


def test_a_tokenizer_that_fails_to_load_falls_back_to_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(litellm, spec):
        raise OSError("tokenizer file missing")

    monkeypatch.setattr(tokenizer_module, "_litellm_counter", broken)
    counter = TokenizerCounter("gpt-4o-mini")
    assert counter.count(chat()) == estimate_tokens(chat())
    assert counter.load_error == "OSError: tokenizer file missing"
    assert counter.name == "bytes/4"


def test_a_load_that_outlives_its_timeout_is_abandoned() -> None:
    never = threading.Event()
    with pytest.raises(TimeoutError, match="within 0.05s"):
        _run_within(0.05, never.wait)
    never.set()


def test_choosing_a_counter_does_not_import_litellm() -> None:
    code = (
        "import sys\n"
        "from harness9.provider.tokenizer import make_token_counter\n"
        "c = make_token_counter('gpt-4o-mini')\n"
        "print(type(c).__name__, 'litellm' in sys.modules)\n"
    )
    out = run_python(code, timeout=60)
    assert out.stdout.strip() == "TokenizerCounter False"
