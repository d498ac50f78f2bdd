"""What can go wrong talking to a model, as one-line errors the CLI can print.

``TransientError`` and its subclasses are the ones worth retrying; the others
(bad key, context overflow, a rejected request) would fail the same way again.
"""

from __future__ import annotations

from harness9.errors import HarnessError
from harness9.schema import Message


class ProviderError(HarnessError):
    """Base of every model-call failure; ``str(exc)`` is one line, no key in it."""


class AuthenticationError(ProviderError):
    """The key is missing or was rejected; the message names the variable to set."""


class BadRequestError(ProviderError):
    """The server refused the request itself (HTTP 400/404/422...): retrying cannot help."""


class LocalRequestError(ProviderError):
    """The request failed on this machine before or while it was sent (not the server's fault)."""


class ContextWindowExceededError(BadRequestError):
    """The prompt did not fit the model's window (the engine compacts and tries again)."""


class TransientError(ProviderError):
    """A failure that may pass: retried with backoff before it reaches the user."""


class RateLimitError(TransientError):
    """HTTP 429."""


class ServiceUnavailableError(TransientError):
    """HTTP 5xx, or the connection failed or dropped before any text was shown."""


class ModelTimeoutError(TransientError):
    """No answer within the timeout."""


class StreamInterruptedError(ProviderError):
    """The stream broke after text had been shown; ``partial`` holds what arrived.

    Not retried: a second attempt would print the same text again.
    """

    def __init__(self, message: str, partial: Message) -> None:
        super().__init__(message)
        self.partial = partial
