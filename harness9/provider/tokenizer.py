"""Token counts with the model's own tokenizer, cached per message.

``make_token_counter(model)`` picks a ``TokenizerCounter`` when litellm ships the
tokenizer for the model inside its package (OpenAI's tiktoken encodings, the
Anthropic and DeepSeek tokenizer files), else the zero-dependency ``ByteCounter``
(UTF-8 bytes / 4). Only bundled tokenizers are used: litellm fetches the others
(Llama, Cohere) from the network, with retries that take tens of seconds offline.

A counter gives the token line its figure before any server has reported one.
Once a server has, the context policy's one model of the server's count
(``harness9.tokens.ServerCount``) takes over: it sees what a counter
cannot (tool definitions, the provider's chat framing, a tokenizer that is only a
stand-in: Claude 3+ has no public tokenizer; the bundled one is Claude 2's).

Choosing a counter never imports litellm; the first ``count`` does.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol, TypeVar

from harness9.schema import Message
from harness9.tokens import estimate_tokens

DEFAULT_CACHE_SIZE = 20_000
# Loading a bundled tokenizer takes well under a second; anything slower means
# something is reaching for the network, and bytes/4 is better than a hang.
LOAD_TIMEOUT_S = 10.0

_T = TypeVar("_T")


class TokenCounter(Protocol):
    def count(self, msgs: list[Message]) -> int: ...


class ByteCounter:
    """UTF-8 bytes / 4 (``estimate_tokens``)."""

    name = "bytes/4"

    def count(self, msgs: list[Message]) -> int:
        return estimate_tokens(msgs)


@dataclass(frozen=True, slots=True)
class TokenizerSpec:
    """Which bundled tokenizer counts a model, and under which name litellm counts it."""

    family: str  # "openai" (tiktoken, by model name), "anthropic", "deepseek"
    count_model: str  # the model name handed to litellm.token_counter
    bundled_file: str | None = None  # tokenizer JSON inside litellm; None for tiktoken


_TOKENIZER_DIR = "litellm.litellm_core_utils.tokenizers"
# OpenAI's hosted chat models all use cl100k_base or o200k_base, both shipped with
# litellm. Not gpt-oss: litellm counts it with cl100k_base, which is not its tokenizer.
_OPENAI_NAME = re.compile(r"^(ft:)?(gpt-[345]|chatgpt-|o[134](-|$))")
_CLAUDE_NAME = re.compile(r"^claude")
# DeepSeek V3 and later (chat and reasoner are aliases of them) share one tokenizer.
_DEEPSEEK_NAME = re.compile(r"^deepseek-(chat|reasoner|v3|v4)")


def tokenizer_for(model: str) -> TokenizerSpec | None:
    """The bundled tokenizer for ``model``, by name alone (None when none is shipped).

    Decided on the last path segment, not the provider prefix: ``openai/meta-llama/
    Llama-3-8B`` on a local server is a Llama model whatever route it takes.
    """
    name = model.strip().rsplit("/", 1)[-1]
    lowered = name.lower()
    if _OPENAI_NAME.search(lowered):
        return TokenizerSpec("openai", name)
    if _CLAUDE_NAME.search(lowered):
        return TokenizerSpec("anthropic", name, "anthropic_tokenizer.json")
    if _DEEPSEEK_NAME.search(lowered):
        return TokenizerSpec("deepseek", name, "deepseek_tokenizer.json")
    return None


def _run_within(seconds: float, fn: Callable[[], _T]) -> _T:
    """``fn()`` in a daemon thread; TimeoutError if it has not returned in time."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=run, name="harness9-tokenizer-load", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"tokenizer did not load within {seconds:g}s")
    if "error" in box:
        raise box["error"]
    return box["value"]


_CacheKey = tuple[str, str, tuple[tuple[str, str, str], ...], str]


def _cache_key(msg: Message) -> _CacheKey:
    # The fields themselves, not a digest of them: str objects memoise their hash,
    # so re-keying a 2,000-message history each turn costs no pass over its text,
    # and equal keys are compared exactly (no collisions).
    if not msg.tool_calls:  # most messages; skipping the generator halves the cost
        return (msg.role, msg.content, (), msg.tool_call_id)
    calls = tuple((tc.id, tc.name, tc.arguments) for tc in msg.tool_calls)
    return (msg.role, msg.content, calls, msg.tool_call_id)


class TokenizerCounter:
    """litellm's count for the model's bundled tokenizer, cached per message.

    A list's count is ``litellm.token_counter(model, messages=list)``: each message
    costs its role, content, tool-call arguments and tool_call_id plus a fixed
    framing (3 tokens for chat models), and the list adds 3 for the reply primer.
    That sum is additive, so each message's share is cached (LRU, ``cache_size``
    entries; 0 disables the cache) and a turn tokenizes only the new messages.
    ``tokenized`` counts the messages actually handed to the tokenizer.

    If the tokenizer cannot be loaded (or takes longer than ``load_timeout``), the
    counter falls back to bytes / 4 and says why in ``load_error``.
    """

    def __init__(
        self,
        model: str,
        *,
        cache_size: int = DEFAULT_CACHE_SIZE,
        load_timeout: float = LOAD_TIMEOUT_S,
    ) -> None:
        spec = tokenizer_for(model)
        if spec is None:
            raise ValueError(f"no bundled tokenizer is known for {model!r}")
        self.model = model
        self.spec = spec
        self.cache_size = max(0, cache_size)
        self.load_timeout = load_timeout
        self.tokenized = 0
        self.load_error: str | None = None
        self._cache: OrderedDict[_CacheKey, int] = OrderedDict()
        self._count_dicts: Callable[[list[dict[str, Any]]], int] | None = None
        self._primer = 0

    @property
    def name(self) -> str:
        return self.spec.family if self.load_error is None else "bytes/4"

    def count(self, msgs: list[Message]) -> int:
        """The tokenizer's count (0 for an empty list)."""
        if not msgs:
            return 0
        if self._count_dicts is None and self.load_error is None:
            self._load()
        if self.load_error is not None:
            return estimate_tokens(msgs)
        return self._primer + sum(self._message_tokens(m) for m in msgs)

    def _message_tokens(self, msg: Message) -> int:
        if not self.cache_size:
            return self._tokenize(msg)
        key = _cache_key(msg)
        cache = self._cache
        n = cache.get(key)
        if n is not None:
            cache.move_to_end(key)
            return n
        n = cache[key] = self._tokenize(msg)
        if len(cache) > self.cache_size:
            cache.popitem(last=False)
        return n

    def _tokenize(self, msg: Message) -> int:
        assert self._count_dicts is not None
        self.tokenized += 1
        return self._count_dicts([msg.to_dict()]) - self._primer

    def _load(self) -> None:
        from harness9.provider.llm import load_litellm

        try:
            # Outside the timeout: importing litellm is slow but never goes online.
            litellm = load_litellm()
            self._count_dicts, self._primer = _run_within(
                self.load_timeout, lambda: _litellm_counter(litellm, self.spec)
            )
        except Exception as exc:
            self.load_error = f"{type(exc).__name__}: {exc}"


def _litellm_counter(
    litellm: Any, spec: TokenizerSpec
) -> tuple[Callable[[list[dict[str, Any]]], int], int]:
    """A ``messages -> tokens`` function for ``spec`` and the reply primer it adds."""
    custom = None
    if spec.bundled_file is not None:
        path = resources.files(_TOKENIZER_DIR).joinpath(spec.bundled_file)
        custom = litellm.create_tokenizer(path.read_text(encoding="utf-8"))

    def count_dicts(dicts: list[dict[str, Any]]) -> int:
        return litellm.token_counter(
            model=spec.count_model, custom_tokenizer=custom, messages=dicts
        )

    primer = count_dicts([])
    count_dicts([{"role": "user", "content": "probe"}])  # loads the encoding now, under the timeout
    return count_dicts, primer


def make_token_counter(model: str) -> TokenCounter:
    """A TokenizerCounter when litellm ships the model's tokenizer, else a ByteCounter.

    Never raises and never imports litellm (the first count does).
    """
    try:
        if tokenizer_for(model) is not None:
            return TokenizerCounter(model)
    except Exception:
        pass
    return ByteCounter()
