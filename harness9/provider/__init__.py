"""Talking to models: the litellm adapter, model limits and token counters.

Importing this package is cheap: litellm is imported only when a model is
called (``load_litellm``), and model limits are read from litellm's bundled
JSON map without importing litellm.
"""

from harness9.provider.errors import (
    AuthenticationError,
    BadRequestError,
    ContextWindowExceededError,
    LocalRequestError,
    ModelTimeoutError,
    ProviderError,
    RateLimitError,
    ServiceUnavailableError,
    StreamInterruptedError,
    TransientError,
)
from harness9.provider.limits import ModelLimits, get_model_limits, window_source
from harness9.provider.llm import LLMProvider, load_litellm, preload_in_background
from harness9.provider.tokenizer import (
    ByteCounter,
    TokenCounter,
    TokenizerCounter,
    make_token_counter,
)

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "ByteCounter",
    "ContextWindowExceededError",
    "LocalRequestError",
    "LLMProvider",
    "ModelLimits",
    "ModelTimeoutError",
    "ProviderError",
    "RateLimitError",
    "ServiceUnavailableError",
    "StreamInterruptedError",
    "TokenCounter",
    "window_source",
    "TokenizerCounter",
    "TransientError",
    "get_model_limits",
    "load_litellm",
    "make_token_counter",
    "preload_in_background",
]
