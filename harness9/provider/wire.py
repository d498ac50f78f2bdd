"""Where each provider's requests go when ``--api-base`` is given, as litellm builds the URL.

litellm appends its own path to some bases and not to others, so the right form differs:

- ``anthropic/``: the server's root, no ``/v1``: litellm appends ``/v1/messages``
  (``ensure_api_route(api_base, "v1/messages")`` in litellm/main.py), so a base ending in
  ``/v1`` is sent to ``/v1/v1/messages``.
- ``ollama/``, ``ollama_chat/``: the server's root, no ``/v1``: litellm appends
  ``/api/generate`` or ``/api/chat`` (litellm/llms/ollama/*/transformation.py); ``/v1`` is
  Ollama's OpenAI-compatible surface, reached as ``openai/NAME`` instead.
- ``gemini/``: ending in ``/v1beta``: litellm appends ``/models/NAME:streamGenerateContent``
  (``_check_custom_proxy`` in litellm/llms/vertex_ai/vertex_llm_base.py); Google's own base
  is ``https://generativelanguage.googleapis.com/v1beta``.
- anything OpenAI-compatible (``openai/``, vLLM, llama.cpp, LM Studio...): ending in ``/v1``:
  the OpenAI client appends ``/chat/completions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(slots=True, frozen=True)
class BaseForm:
    """How one provider's --api-base looks: the path it must (not) end in, and an example."""

    describe: str  # completes "for <provider>, --api-base ..."
    example: str
    ends_with: str | None = None  # the path must end so
    not_ending: str | None = None  # the path must not end so


_ROOT = "is the server's root, without /v1 (litellm appends {route} itself)"
FORMS: dict[str, BaseForm] = {
    "anthropic": BaseForm(
        _ROOT.format(route="/v1/messages"), "https://api.anthropic.com", not_ending="/v1"
    ),
    "ollama": BaseForm(
        _ROOT.format(route="/api/generate"), "http://localhost:11434", not_ending="/v1"
    ),
    "ollama_chat": BaseForm(
        _ROOT.format(route="/api/chat"), "http://localhost:11434", not_ending="/v1"
    ),
    "gemini": BaseForm(
        "ends in /v1beta (litellm appends /models/NAME:streamGenerateContent)",
        "https://generativelanguage.googleapis.com/v1beta",
        ends_with="/v1beta",
    ),
}
OPENAI_COMPATIBLE = BaseForm(
    "ends in /v1 (the client appends /chat/completions)",
    "http://localhost:8000/v1",
    ends_with="/v1",
)
# litellm sends these through the OpenAI client, to the base as given.
OPENAI_ROUTES = frozenset({"openai", "hosted_vllm", "lm_studio", "llamafile", "custom_openai"})


def base_form(model: str) -> BaseForm | None:
    """The --api-base form ``model``'s provider expects; None for a provider not listed."""
    provider = model.strip().partition("/")[0].lower() if "/" in model else "openai"
    if provider in OPENAI_ROUTES:
        return OPENAI_COMPATIBLE
    return FORMS.get(provider)


def api_base_hint(model: str, api_base: str) -> str:
    """For a 404: ``"; for P, --api-base ..."`` when ``api_base`` is not in the form
    ``model``'s provider expects, else "" (the address is right; the provider's message
    says what is not, e.g. a model Ollama has not pulled)."""
    form = base_form(model)
    if form is None:
        return ""
    path = urlsplit(api_base.strip()).path.rstrip("/")
    wrong = (form.ends_with is not None and not path.endswith(form.ends_with)) or (
        form.not_ending is not None and path.endswith(form.not_ending)
    )
    if not wrong:
        return ""
    who = "an OpenAI-compatible server"
    if form is not OPENAI_COMPATIBLE:
        who = model.strip().partition("/")[0]
    return f"; for {who}, --api-base {form.describe}, e.g. {form.example}"


__all__ = ["FORMS", "OPENAI_COMPATIBLE", "OPENAI_ROUTES", "BaseForm", "api_base_hint", "base_form"]
