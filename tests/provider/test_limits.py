"""Model limits: override, environment, litellm's bundled map, the seed's family table, 256K."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness9.errors import UsageError
from harness9.provider import ModelLimits, get_model_limits
from harness9.provider import limits as limits_module
from harness9.provider.limits import model_map_path, routing_candidates


def clear_caches() -> None:
    limits_module._lookup.cache_clear()
    limits_module._model_map.cache_clear()
    limits_module._model_map_text.cache_clear()


@pytest.fixture
def without_model_map(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As if the installed litellm shipped no JSON model map."""
    monkeypatch.setattr(limits_module, "model_map_path", lambda: None)
    clear_caches()
    yield
    clear_caches()


def test_litellm_ships_the_model_map_we_read() -> None:
    path = model_map_path()
    assert path is not None
    assert path.name == "model_prices_and_context_window_backup.json"


def test_known_model_comes_from_the_model_map() -> None:
    assert get_model_limits("gpt-4o") == ModelLimits(context_tokens=128_000, output_tokens=16_384)


def test_model_map_wins_over_the_family_table() -> None:
    # The seed's table says 64K for DeepSeek; litellm's map knows deepseek-chat better.
    assert get_model_limits("deepseek-chat").context_tokens == 131_072


@pytest.mark.parametrize("name", ["openai/gpt-4o", "openrouter/openai/gpt-4o"])
def test_routing_prefixes_are_stripped_until_a_match(name: str) -> None:
    assert get_model_limits(name) == get_model_limits("gpt-4o")


def test_routing_candidates_strip_one_prefix_at_a_time() -> None:
    assert routing_candidates("openrouter/openai/gpt-4o") == [
        "openrouter/openai/gpt-4o",
        "openai/gpt-4o",
        "gpt-4o",
    ]


def test_unmapped_qwen_uses_the_family_table() -> None:
    assert get_model_limits("qwen-plus") == ModelLimits(context_tokens=128_000, output_tokens=8_192)


@pytest.mark.parametrize(
    ("name", "context"),
    [
        ("claude-sonnet-4-future", 200_000),
        ("proxy/claude-3-7-custom", 200_000),
        ("gpt-4o-custom-finetune", 128_000),
        ("gpt-4.5-custom", 128_000),
        ("o3-custom", 200_000),
        ("o4-mini-custom", 200_000),
        ("myproxy/gemini-2.0-flash-custom", 1_048_576),
        ("deepseek-custom", 64_000),
        ("qwen-max-custom", 128_000),
    ],
)
def test_family_table_covers_the_seeds_families(name: str, context: int) -> None:
    assert get_model_limits(name).context_tokens == context


def test_unknown_model_gets_the_256k_default() -> None:
    assert get_model_limits("openai/test-model") == ModelLimits(256_000, 8_192)


def test_unknown_model_on_a_local_server_gets_the_small_guess() -> None:
    local = get_model_limits("openai/test-model", api_base="http://127.0.0.1:8080/v1")
    assert local == ModelLimits(32_768, 8_192)


@pytest.mark.parametrize(
    "name", ["ollama/unheard-of", "ollama_chat/unheard-of", "lemonade/x", "lm_studio/x"]
)
def test_a_local_server_provider_is_local_without_an_api_base(name: str) -> None:
    assert get_model_limits(name).context_tokens == 32_768


def test_only_a_model_no_table_knows_gets_the_local_guess() -> None:
    local = "http://h:1/v1"
    assert get_model_limits("openai/qwen2.5-7b", api_base=local).context_tokens == 128_000
    # Known models keep their window wherever they are served.
    assert get_model_limits("openai/gpt-4o", api_base="http://h:1/v1").context_tokens == 128_000


def test_a_window_given_wins_over_the_local_guess() -> None:
    given = get_model_limits("openai/test-model", override=200_000, api_base="http://h:1/v1")
    assert given == ModelLimits(200_000, 8_192)


def test_override_wins_over_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS9_CONTEXT_WINDOW", "50000")
    assert get_model_limits("gpt-4o", override=32_768) == ModelLimits(32_768, 16_384)


def test_override_caps_output_at_the_window() -> None:
    assert get_model_limits("gpt-4o", override=4_096) == ModelLimits(4_096, 4_096)


def test_environment_override_wins_over_the_map(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS9_CONTEXT_WINDOW", "32000")
    assert get_model_limits("gpt-4o").context_tokens == 32_000


def test_malformed_environment_override_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS9_CONTEXT_WINDOW", "lots")
    with pytest.raises(UsageError, match="HARNESS9_CONTEXT_WINDOW"):
        get_model_limits("gpt-4o")


def test_without_the_model_map_the_family_table_answers(without_model_map: None) -> None:
    assert get_model_limits("gpt-4o") == ModelLimits(128_000, 16_384)
    assert get_model_limits("deepseek-chat").context_tokens == 64_000


def test_lookup_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    clear_caches()  # make the first call read the JSON map again
    get_model_limits("openrouter/openai/gpt-4o")
    get_model_limits("qwen-plus")
    get_model_limits("no-such-model")
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    "name", ["gpt-4o", "gpt-4o-mini", "openai/gpt-4o", "deepseek-chat", "o3", "dashscope/qwen-plus"]
)
def test_reading_the_json_map_agrees_with_litellm_get_model_info(name: str) -> None:
    from harness9.provider import load_litellm

    info = load_litellm().get_model_info(name)
    assert get_model_limits(name) == ModelLimits(
        info["max_input_tokens"], info["max_output_tokens"]
    )


def test_the_sliced_entry_lookup_agrees_with_parsing_the_whole_map() -> None:
    # Start-up reads one entry out of the map's text instead of parsing 1.5 MB of JSON.
    import json

    whole = json.loads(model_map_path().read_text(encoding="utf-8"))
    for key in (
        "gpt-4o-mini",
        "gpt-4o",
        "deepseek-chat",
        "claude-sonnet-4-20250514",
        "no-such-model",
    ):
        assert limits_module._map_entry(key) == whole.get(key)
