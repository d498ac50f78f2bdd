"""Token counters: the model's tokenizer through litellm, cached per message, calibrated."""

from __future__ import annotations

import threading

import pytest

from harness9.context.tokens import estimate_tokens
from harness9.provider import tokenizer as tokenizer_module
from harness9.provider.llm import load_litellm
from harness9.provider.tokenizer import (
    ByteCounter,
    Calibration,
    TokenizerCounter,
    TokenizerSpec,
    _run_within,
    make_token_counter,
    tokenizer_for,
)
from harness9.schema import Message, ToolCall
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


def test_byte_estimate_of_chinese_is_within_the_calibration_band_of_each_tokenizer() -> None:
    msgs = [Message("user", CHINESE * 5)]
    estimate = estimate_tokens(msgs)  # 273: three bytes a character, four bytes a token
    for model in ("gpt-4o-mini", "gpt-4", "claude-sonnet-4-5", "deepseek-chat"):
        exact = TokenizerCounter(model).raw_count(msgs)
        assert 0.5 * exact <= estimate <= 2.0 * exact, model
    # characters / 4 would be 91: a third of what o200k counts.
    assert len(CHINESE * 5) // 4 < TokenizerCounter("gpt-4o-mini").raw_count(msgs) // 2


# -- calibration ----------------------------------------------------------------------------


def test_calibration_moves_the_next_estimate_half_way_to_the_actual() -> None:
    counter = ByteCounter()
    msgs = [message_bytes_of(1000)]
    assert counter.count(msgs) == 1000
    counter.calibrate(1000, 1200)  # would have been exact at 1.2; move half-way
    assert counter.ratio == pytest.approx(1.1)
    assert counter.count(msgs) == 1100
    counter.calibrate(1100, 1200)  # target 1.1 * 1200 / 1100 = 1.2
    assert counter.ratio == pytest.approx(1.15)
    assert counter.count(msgs) == 1150


def test_repeated_calibration_converges_on_the_actual() -> None:
    counter = ByteCounter()
    msgs = [message_bytes_of(1000)]
    for _ in range(20):
        counter.calibrate(counter.count(msgs), 1300)
    assert counter.count(msgs) == 1300


def test_tokenizer_counter_scales_its_raw_count_by_the_ratio() -> None:
    counter = TokenizerCounter("gpt-4o-mini")
    msgs = with_tools()
    raw = counter.raw_count(msgs)
    counter.calibrate(raw, raw * 2)  # e.g. tool definitions the counter cannot see
    assert counter.ratio == pytest.approx(1.5)
    assert counter.count(msgs) == round(raw * 1.5)


def test_calibration_target_is_clamped_to_two() -> None:
    cal = Calibration()
    cal.update(1000, 10_000)  # target 10.0 is clamped to 2.0
    assert cal.ratio == pytest.approx(1.5)
    for _ in range(50):
        cal.update(1000, 10_000)
    assert cal.ratio <= 2.0
    assert cal.apply(1000) == 2000


def test_calibration_target_is_clamped_to_one_half() -> None:
    cal = Calibration()
    cal.update(1000, 100)  # target 0.1 is clamped to 0.5
    assert cal.ratio == pytest.approx(0.75)
    for _ in range(50):
        cal.update(1000, 100)
    assert cal.ratio >= 0.5
    assert cal.apply(1000) == 500


def test_calibration_ignores_a_call_without_usage() -> None:
    cal = Calibration()
    cal.update(1000, 0)
    cal.update(0, 500)
    assert cal.ratio == 1.0


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
