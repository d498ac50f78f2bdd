"""What a model call cost, from litellm's price map (bundled, read offline)."""

from __future__ import annotations

from harness9.provider.llm import load_litellm
from harness9.schema import Usage


def call_cost(model: str, usage: Usage) -> float | None:
    """US dollars for one call's usage; None when litellm has no price for ``model``.

    Cached prompt tokens are billed at the provider's cache-read price, which is
    why they are passed separately (they are part of ``input_tokens`` too).
    """
    litellm = load_litellm()
    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model,
            prompt_tokens=usage.input_tokens,
            completion_tokens=usage.output_tokens,
            cache_read_input_tokens=usage.cached_tokens,
        )
    except Exception:  # noqa: BLE001 - litellm raises several kinds for "not mapped"
        return None
    return float(prompt_cost) + float(completion_cost)
