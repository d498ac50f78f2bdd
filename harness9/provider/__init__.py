"""Talking to models: the litellm adapter and model limits.

Importing this package is cheap: litellm is imported only when a model is
called (``load_litellm``), and model limits are read from litellm's bundled
JSON map without importing litellm.
"""

from harness9.provider.errors import (
    AuthenticationError,
    BadRequestError,
    ContextWindowExceededError,
    ModelTimeoutError,
    ProviderError,
    RateLimitError,
    ServiceUnavailableError,
    StreamInterruptedError,
    TransientError,
)
from harness9.provider.limits import ModelLimits, get_model_limits
from harness9.provider.llm import LLMProvider, load_litellm, preload_in_background

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "ContextWindowExceededError",
    "LLMProvider",
    "ModelLimits",
    "ModelTimeoutError",
    "ProviderError",
    "RateLimitError",
    "ServiceUnavailableError",
    "StreamInterruptedError",
    "TransientError",
    "get_model_limits",
    "load_litellm",
    "preload_in_background",
]
