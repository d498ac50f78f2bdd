"""What a model call cost, from litellm's price map (bundled, read offline)."""

from __future__ import annotations

from harness9.provider.limits import window_source
from harness9.provider.llm import load_litellm
from harness9.schema import Usage


def call_cost(model: str, usage: Usage) -> float | None:
    """US dollars for one call's usage; None when litellm has no price for ``model``.

    Priced by litellm from a usage object as the provider reports it: cache reads at the
    cache-read price, cache writes at the write price (1-hour writes at theirs), the rest
    of the prompt at the input price. litellm answers $0 for some names it does not map
    (``anthropic/claude-sonnet-4-20250514``): a model outside its map with a zero price is
    unpriced, not free, while a mapped free model (a local Ollama one) is $0.
    """
    litellm = load_litellm()
    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model, usage_object=_litellm_usage(usage)
        )
    except Exception:  # noqa: BLE001 - litellm raises several kinds for "not mapped"
        return None
    cost = float(prompt_cost) + float(completion_cost)
    if cost == 0 and usage.input_tokens + usage.output_tokens > 0 and window_source(model) != "map":
        return None
    return cost


def _litellm_usage(usage: Usage) -> object:
    """``usage`` as litellm's own Usage, the form its cost calculator reads cache tokens from
    (imported after load_litellm has configured litellm)."""
    from litellm.types.utils import CacheCreationTokenDetails, PromptTokensDetailsWrapper
    from litellm.types.utils import Usage as LitellmUsage

    writes_1h = min(usage.cache_write_1h_tokens, usage.cache_write_tokens)
    details = PromptTokensDetailsWrapper(
        cached_tokens=usage.cached_tokens,
        cache_creation_tokens=usage.cache_write_tokens,
        cache_creation_token_details=CacheCreationTokenDetails(
            ephemeral_5m_input_tokens=usage.cache_write_tokens - writes_1h,
            ephemeral_1h_input_tokens=writes_1h,
        ),
    )
    return LitellmUsage(
        prompt_tokens=usage.input_tokens,
        completion_tokens=usage.output_tokens,
        total_tokens=usage.input_tokens + usage.output_tokens,
        prompt_tokens_details=details,
        cache_read_input_tokens=usage.cached_tokens,
        cache_creation_input_tokens=usage.cache_write_tokens,
    )
