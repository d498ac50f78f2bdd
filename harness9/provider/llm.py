"""The one litellm adapter: ``send(request) -> (Message, Usage | None)``.

``send`` sends a ``Request`` (harness9.request; built by ``ContextPolicy.prepare``)
exactly as it is: ``_request`` renders it to litellm's arguments in one place (its system
parts as cache blocks for Claude, its messages, tools and ``max_tokens``), and nothing else
reaches the wire but how to reach the server (base, key, timeout, streaming).
``generate(messages, tools)`` is the summarisers' seam: a request of those messages.

litellm is imported lazily (``load_litellm``) because the import costs seconds
and most commands never call a model. Retries are ours, not litellm's: we need
to know whether streamed text already reached the screen before retrying, and
to report each retry to the UI.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import ModuleType
from typing import Any

from harness9.provider import ollama
from harness9.provider.caching import needs_breakpoints, place_breakpoints, system_blocks
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
    body_status,
    error_body,
    is_overloaded,
    provider_message,
    refused_window,
    retry_delay,
    says_too_long,
)
from harness9.provider.wire import api_base_hint
from harness9.request import Request
from harness9.schema import ROLE_ASSISTANT, Message, ToolCall, ToolDefinition, Usage

# Sent when talking to a local server without a key: the OpenAI client refuses to
# build a request with no key at all, and local servers ignore it.
PLACEHOLDER_KEY = "sk-no-key"

# Provider prefix -> the environment variables litellm reads its key from (first is
# the one we tell users to set).
KEY_ENV_VARS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "openrouter": ("OPENROUTER_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "together_ai": ("TOGETHERAI_API_KEY",),
    "fireworks_ai": ("FIREWORKS_AI_API_KEY",),
    "perplexity": ("PERPLEXITYAI_API_KEY",),
    "deepinfra": ("DEEPINFRA_API_KEY",),
    "cohere": ("COHERE_API_KEY",),
    "cerebras": ("CEREBRAS_API_KEY",),
    "dashscope": ("DASHSCOPE_API_KEY",),
    "moonshot": ("MOONSHOT_API_KEY",),
}

# Bare model names litellm routes without a prefix.
_BARE_PROVIDERS = (
    (re.compile(r"^(gpt-|chatgpt-|o[134](-|$))"), "openai"),
    (re.compile(r"^claude"), "anthropic"),
)

_load_lock = threading.Lock()
_litellm: ModuleType | None = None


def load_litellm() -> ModuleType:
    """Import and configure litellm once (thread-safe): offline cost map, no banners."""
    global _litellm
    if _litellm is not None:
        return _litellm
    with _load_lock:
        if _litellm is None:
            # Without this litellm fetches its price map over the network at import.
            os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
            # litellm aborts a stream after 100 identical chunks, taking a real answer with
            # a long run of one string (a separator line, a table rule) for a looping model.
            # Our own timeout and the user's Ctrl-C already bound a runaway stream. The
            # variable is litellm's documented way to set the limit; it is read at import.
            os.environ.setdefault("REPEATED_STREAMING_CHUNK_LIMIT", str(2**31 - 1))
            with _import_setting("MAX_BASE64_LENGTH_FOR_LOGGING", "0"):
                import litellm

            litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" prints
            litellm.set_verbose = False
            for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
                logging.getLogger(name).setLevel(logging.CRITICAL)
            _litellm = litellm
    return _litellm


@contextlib.contextmanager
def _import_setting(name: str, value: str) -> Iterator[None]:
    """``name=value`` in the environment while litellm is imported (it reads its constants
    then), unless the user set it; afterwards the environment is as it was, so the
    commands the agent runs do not inherit it.

    MAX_BASE64_LENGTH_FOR_LOGGING=0: after every call litellm builds a logging payload
    in a background thread, copying every message of the request to shorten base64
    images in it. harness9 registers no logging callback, so that payload goes nowhere,
    and at a few hundred messages the copy took ~2 ms of CPU from the next request
    (issue 23). 0 is litellm's own "leave the messages as they are"."""
    if name in os.environ:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)


def preload_in_background() -> threading.Thread:
    """Start importing litellm in a daemon thread, so a prompt can appear meanwhile."""

    def run() -> None:
        # A failure here resurfaces, with its traceback, when load_litellm() is called
        # for real; printing it from a background thread would garble the prompt.
        with contextlib.suppress(Exception):
            load_litellm()

    thread = threading.Thread(target=run, name="harness9-litellm-preload", daemon=True)
    thread.start()
    return thread


def provider_of(model: str) -> str | None:
    """The litellm provider a model name routes to, when we can tell without litellm."""
    if "/" in model:
        return model.split("/", 1)[0].lower()
    for pattern, provider in _BARE_PROVIDERS:
        if pattern.search(model.lower()):
            return provider
    return None


def key_env_vars(model: str) -> tuple[str, ...]:
    """Environment variables that can hold the key for ``model`` (empty when unknown)."""
    return KEY_ENV_VARS.get(provider_of(model) or "", ())


def unroutable_model(litellm: ModuleType, model: str) -> str:
    """Why litellm cannot route ``model``, with the closest names it knows.

    A bare name is a model name (``gpt-4o-minii``), not a provider: litellm routes
    bare names by its model map, so the suggestions come from there. A prefixed one
    names a provider litellm lacks (``opnai/gpt-4o``)."""
    import difflib

    how = (
        "name it as litellm does, e.g. openai/gpt-4o-mini, or openai/NAME with --api-base "
        "for an OpenAI-compatible server"
    )
    if "/" not in model:
        close = difflib.get_close_matches(model, list(litellm.model_cost), n=3, cutoff=0.75)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        return f"unknown model {model!r}{hint} ({how})"
    prefix = model.split("/", 1)[0]
    providers = [str(getattr(p, "value", p)) for p in litellm.provider_list]
    close = difflib.get_close_matches(prefix, providers, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"unknown provider {prefix!r} in model {model!r}{hint} ({how})"


class LLMProvider:
    """Calls one model through litellm, with our own retries and one-line errors."""

    def __init__(
        self,
        model: str,
        api_base: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 120.0,
        max_retries: int = 3,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        on_retry: Callable[[int, float, str], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        max_tokens: int | None = None,
        cache_ttl: str = "5m",
        context_window: int | None = None,
    ) -> None:
        self.model = model
        # The window harness9 works with: a local server (Ollama) is told to run with it.
        self.context_window = context_window
        self.api_base = api_base or None
        self._api_key = api_key or None  # never printed: see __repr__ and _redact
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.on_retry = on_retry
        # Request shape (harness9.provider.caching, limits.output_budget): the reply's
        # token budget, and the cache lifetime of the breakpoints placed for Claude.
        self.max_tokens = max_tokens
        self.cache_ttl = cache_ttl
        # Usage the server reported for a call whose stream then broke off: billed, so
        # counted, though generate() raises (or retries) instead of returning it.
        self.on_cut_off_usage: Callable[[Usage], None] | None = None
        self._provider_checked = False
        # Waits out the backoff; tests inject one that only records the delay.
        self.sleep = sleep

    def __repr__(self) -> str:
        return f"LLMProvider(model={self.model!r}, api_base={self.api_base!r})"

    def fit_window(self, window: int) -> None:
        """Work in a ``window`` the server named: the reply's budget (``max_tokens``) becomes
        at most a fifth of it, since some servers (vLLM, llama.cpp's) count it against the
        window with the prompt (the context policy keeps the same reserve)."""
        self.context_window = window
        if self.max_tokens is not None:
            self.max_tokens = max(1, min(self.max_tokens, window // 5))

    # -- credentials -----------------------------------------------------------------------
    def check_credentials(self) -> None:
        """Fail fast, offline, when the provider needs a key and none is anywhere."""
        names = key_env_vars(self.model)
        if self._api_key or self.api_base or not names:
            return
        if any(os.environ.get(name) for name in names):
            return
        raise AuthenticationError(
            f"no API key for {self.model}: set {names[0]} (or pass --api-base for a local server)"
        )

    def check_routable(self) -> None:
        """The error the first call would raise for a name litellm cannot route (an unknown
        provider or model), now and without a request (imports litellm)."""
        self._check_provider(load_litellm())

    def _check_provider(self, litellm: ModuleType) -> None:
        """An unknown provider prefix is our finding, not a server's answer: no request is sent."""
        if self._provider_checked:
            return
        try:
            litellm.get_llm_provider(self.model, api_base=self.api_base)
        except Exception:  # litellm raises its BadRequestError (no request was made)
            raise BadRequestError(unroutable_model(litellm, self.model)) from None
        self._provider_checked = True

    def _effective_key(self) -> str | None:
        if self._api_key:
            return self._api_key
        names = key_env_vars(self.model)
        if self.api_base and not any(os.environ.get(name) for name in names):
            return PLACEHOLDER_KEY
        return None  # litellm reads the provider's variable itself

    # -- the call --------------------------------------------------------------------------
    def generate(
        self,
        messages: list[Message],
        tools: list[ToolDefinition],
        *,
        stream: bool = False,
        on_delta: Callable[[str], None] | None = None,
    ) -> tuple[Message, Usage | None]:
        """``send`` of a request of ``messages`` (their own system message first, if any) and
        ``tools``, with this provider's reply budget (a summary's call)."""
        return self.send(self.bare(messages, tools), stream=stream, on_delta=on_delta)

    def bare(self, messages: list[Message], tools: list[ToolDefinition]) -> Request:
        """A request of ``messages`` and ``tools`` alone, with this provider's reply budget."""
        return Request((), list(messages), list(tools), self.max_tokens)

    def send(
        self,
        sent: Request,
        *,
        stream: bool = False,
        on_delta: Callable[[str], None] | None = None,
    ) -> tuple[Message, Usage | None]:
        """One assistant reply (text and/or tool calls) to ``sent``, and the usage the
        server reported."""
        self.check_credentials()
        litellm = load_litellm()
        self._check_provider(litellm)
        request = self._request(sent, stream)
        attempt = 0
        while True:
            shown: list[str] = []  # text already handed to on_delta in this attempt
            response: Any = None
            try:
                response = litellm.completion(**request)
                if stream:
                    reply, usage = self._read_stream(response, on_delta, shown)
                    if not reply.content and not reply.tool_calls:
                        usage = _no_usage_sent(litellm, request["messages"], usage)
                else:
                    reply, usage = _read_response(response)
                return reply, _mark_estimate(litellm, self.model, request["messages"], usage)
            except Exception as exc:
                if stream and response is not None and not shown and _ended_without_reply(exc):
                    # A 200 whose stream closed before any reply: no reply, no usage. Whether
                    # it means "too long" is the caller's to judge (it knows the sizes).
                    return Message(ROLE_ASSISTANT, ""), None
                error = self._translate(exc)
                if error is None:
                    raise
                if stream:
                    self._count_cut_off(response)
                if shown and on_delta is not None:
                    partial = Message(ROLE_ASSISTANT, "".join(shown))
                    raise StreamInterruptedError(
                        f"the reply from {self.model} broke off after "
                        f"{len(partial.content)} characters: {self._redact(_clean_message(exc))}",
                        partial,
                    ) from exc
                if not isinstance(error, TransientError) or attempt >= self.max_retries:
                    raise error from exc
                delay = self._retry_delay(exc, attempt)
                attempt += 1
                if self.on_retry is not None:
                    self.on_retry(attempt, delay, str(error))
                self.sleep(delay)

    async def agenerate(
        self, messages: list[Message], tools: list[ToolDefinition]
    ) -> tuple[Message, Usage | None]:
        """``generate`` (not streamed) as a coroutine, in one attempt: a summary prepared in
        the background (harness9.engine.background) awaits it, so that cancelling its task
        closes the connection at once. A failure is not retried: the compaction it was
        preparing then runs as it would have without it."""
        self.check_credentials()
        litellm = load_litellm()
        self._check_provider(litellm)
        request = self._request(self.bare(messages, tools), False)
        try:
            response = await litellm.acompletion(**request)
            reply, usage = _read_response(response)
        except Exception as exc:
            error = self._translate(exc)
            if error is None:
                raise
            raise error from exc
        return reply, _mark_estimate(litellm, self.model, request["messages"], usage)

    def _request(self, sent: Request, stream: bool) -> dict[str, Any]:
        """litellm's arguments for ``sent``: the one place a request is rendered."""
        wire = [m.to_dict() for m in sent.messages]
        if needs_breakpoints(self.model):
            wire = place_breakpoints(wire, self.cache_ttl, system_blocks(sent.system))
        request: dict[str, Any] = {
            "model": self.model,
            "messages": wire,
            "stream": stream,
            "timeout": self.timeout,
            "num_retries": 0,  # retries are ours (see module docstring)
        }
        if sent.tools:
            request["tools"] = [t.to_dict() for t in sent.tools]
        if sent.max_tokens is not None:
            request["max_tokens"] = sent.max_tokens
        if stream:
            request["stream_options"] = {"include_usage": True}
        if self.api_base:
            request["api_base"] = self.api_base
        request.update(ollama.request_options(self.model, self.context_window))
        key = self._effective_key()
        if key:
            request["api_key"] = key
        return request

    def _read_stream(
        self, chunks: Iterable[Any], on_delta: Callable[[str], None] | None, shown: list[str]
    ) -> tuple[Message, Usage | None]:
        calls: dict[int, dict[str, Any]] = {}
        usage: Usage | None = None
        for chunk in chunks:
            chunk_usage = _usage(getattr(chunk, "usage", None))
            if chunk_usage is not None:
                usage = chunk_usage  # include_usage puts it on the last chunk
            for choice in getattr(chunk, "choices", None) or []:
                delta = getattr(choice, "delta", None)
                text = getattr(delta, "content", None)
                if text:
                    shown.append(text)
                    if on_delta is not None:
                        on_delta(text)
                for piece in getattr(delta, "tool_calls", None) or []:
                    _merge_tool_call_delta(calls, piece)
        tool_calls = [_finish_call(calls[i]) for i in sorted(calls)]
        return Message(ROLE_ASSISTANT, "".join(shown), tool_calls=tool_calls), usage

    def _count_cut_off(self, response: Any) -> None:
        """Report the usage a broken stream had carried (Anthropic's message_start).

        litellm hands usage to the caller only on the stream's last chunk, but keeps the
        chunks it parsed in the stream object's ``chunks`` list, where message_start's
        usage is.
        """
        if self.on_cut_off_usage is None or response is None:
            return
        for chunk in reversed(list(getattr(response, "chunks", None) or [])):
            usage = _usage(getattr(chunk, "usage", None))
            if usage is not None:
                self.on_cut_off_usage(usage)
                return

    # -- errors and retries ----------------------------------------------------------------
    def _where(self) -> str:
        """The address a connection error names: the API base, or for an Ollama model the
        server it was sent to ($OLLAMA_API_BASE, else localhost), which is what to check."""
        if self.api_base:
            return self.api_base
        if ollama.is_ollama(self.model):
            return f"the Ollama server at {ollama.server_root(None)}"
        return f"the {provider_of(self.model) or self.model} API"

    def _translate(self, exc: Exception) -> ProviderError | None:
        """Our error for a litellm/openai/httpx failure; None for anything else (a bug)."""
        litellm = load_litellm()
        import httpx
        import openai

        if not isinstance(exc, openai.OpenAIError | httpx.HTTPError):
            return None
        detail = self._redact(_clean_message(exc))
        model = self.model
        chain = _cause_chain(exc)
        local = next((e for e in chain if isinstance(e, _LOCAL_FAULTS)), None)
        if local is not None:
            # litellm wraps any exception raised while building the request as an HTTP 500;
            # blaming the server for it would send the user looking in the wrong place.
            return LocalRequestError(
                f"could not send the request to {model}: {type(local).__name__}: "
                f"{self._redact(_clean_message(local))} (a local fault, not the server's)"
            )
        where = self._where()
        if any(isinstance(e, httpx.UnsupportedProtocol | httpx.InvalidURL) for e in chain):
            return BadRequestError(
                f"could not connect to {where}: it is not an http:// or https:// URL"
            )
        timed_out = any(isinstance(e, httpx.TimeoutException) for e in chain)
        if not timed_out and any(isinstance(e, httpx.ConnectError) for e in chain):
            reason = self._redact(_clean_message(chain[-1]))
            return ServiceUnavailableError(f"could not connect to {where}: {reason}")
        if not timed_out and any(
            isinstance(e, httpx.TransportError | openai.APIConnectionError) for e in chain
        ):
            reason = self._redact(_clean_message(chain[-1]))
            return ServiceUnavailableError(f"lost the connection to {where}: {reason}")
        return self._from_status(litellm, exc, detail)

    def _from_status(self, litellm: ModuleType, exc: Exception, detail: str) -> ProviderError:
        """The error for an HTTP answer: the status as the server sent it (litellm reports
        some as 500; Google's body names the real one), the provider's message, and for a
        404 from --api-base the address form this provider expects."""
        import httpx
        import openai

        model = self.model
        body = error_body(str(exc))
        status = body_status(body) or getattr(exc, "status_code", None)
        said = _refusal_text(exc)
        if isinstance(exc, litellm.ContextWindowExceededError) or (
            status in (None, 400, 413, 500) and says_too_long(said)
        ):
            return ContextWindowExceededError(
                f"context window exceeded for {model}: {detail}", refused_window(said)
            )
        if isinstance(exc, litellm.AuthenticationError | openai.PermissionDeniedError) or (
            status in (401, 403)
        ):
            return AuthenticationError(self._auth_message(status))
        if isinstance(exc, litellm.RateLimitError) or status == 429:
            return RateLimitError(f"rate limited by {model} (HTTP 429): {detail}")
        if isinstance(exc, openai.APITimeoutError | httpx.TimeoutException) or status == 408:
            return ModelTimeoutError(f"{model} did not answer within {self.timeout:g}s")
        if is_overloaded(status, body):
            # Anthropic's overloaded_error is its 529, which litellm may report as a 500.
            shown = 529 if status in (None, 500) else status
            return ServiceUnavailableError(f"{model} is overloaded (HTTP {shown}): {detail}")
        if isinstance(exc, openai.APIConnectionError | httpx.TransportError) or (
            isinstance(status, int) and status >= 500
        ):
            code = f" (HTTP {status})" if isinstance(status, int) else ""
            return ServiceUnavailableError(f"{model} is unavailable{code}: {detail}")
        if status == 404 and self.api_base:
            hint = api_base_hint(model, self.api_base)
            return BadRequestError(
                f"{model} was not found at {self.api_base} (HTTP 404): {detail}{hint}"
            )
        if isinstance(status, int) and 400 <= status < 500:
            return BadRequestError(f"{model} rejected the request (HTTP {status}): {detail}")
        return ProviderError(f"{model} failed: {detail}")

    def _auth_message(self, status: int | None) -> str:
        names = key_env_vars(self.model)
        what = "permission denied" if status == 403 else "authentication failed"
        if not names:
            return f"{what} for {self.model}: check the API key for this provider"
        if self.api_base:
            return f"{what} for {self.model} at {self.api_base}: set {names[0]} to a key it accepts"
        return f"{what} for {self.model}: set {names[0]} (or pass --api-base for a local server)"

    def _redact(self, text: str) -> str:
        secrets = [self._api_key] + [os.environ.get(n) for n in key_env_vars(self.model)]
        for secret in secrets:
            if secret and len(secret) >= 4:
                text = text.replace(secret, "[redacted]")
        return text

    def _retry_delay(self, exc: Exception, attempt: int) -> float:
        """The wait the server asked for (Retry-After, or Google's retryDelay), capped at
        ``backoff_max``; else exponential backoff with jitter."""
        hinted = _retry_after(exc)
        if hinted is None:  # Google names the wait in the body (google.rpc.RetryInfo)
            hinted = retry_delay(error_body(str(exc)))
        if hinted is not None:
            return min(hinted, self.backoff_max)
        delay = self.backoff_base * 2**attempt
        # Jitter keeps parallel clients from retrying in lockstep.
        return min(self.backoff_max, delay * (1 + random.uniform(0, 0.1)))


# Python errors that mean our own code (or litellm's, on our input) failed: never a server's.
_LOCAL_FAULTS = (TypeError, AttributeError, NameError, AssertionError, UnicodeEncodeError)


def _cause_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and everything it was raised from, outermost first (cycles cut)."""
    chain: list[BaseException] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


# -- response reading ----------------------------------------------------------------------


def _read_response(response: Any) -> tuple[Message, Usage | None]:
    message = response.choices[0].message
    calls = [
        ToolCall(
            id=tc.id or _new_call_id(),
            name=tc.function.name or "",
            arguments=tc.function.arguments or "{}",
        )
        for tc in (getattr(message, "tool_calls", None) or [])
    ]
    content = message.content or ""
    return Message(ROLE_ASSISTANT, content, tool_calls=calls), _usage(
        getattr(response, "usage", None)
    )


def _merge_tool_call_delta(calls: dict[int, dict[str, Any]], piece: Any) -> None:
    index = getattr(piece, "index", None)
    if index is None:
        index = len(calls)
    slot = calls.setdefault(index, {"id": "", "name": "", "arguments": []})
    if getattr(piece, "id", None):
        slot["id"] = piece.id
    function = getattr(piece, "function", None)
    if function is not None:
        if getattr(function, "name", None):
            slot["name"] = function.name
        if getattr(function, "arguments", None):
            slot["arguments"].append(function.arguments)


def _finish_call(slot: dict[str, Any]) -> ToolCall:
    arguments = "".join(slot["arguments"]) or "{}"
    return ToolCall(id=slot["id"] or _new_call_id(), name=slot["name"], arguments=arguments)


def _new_call_id() -> str:
    # Some local servers omit ids; results must still pair with their call.
    return f"call_{uuid.uuid4().hex[:16]}"


def _usage(raw: Any) -> Usage | None:
    if raw is None:
        return None
    prompt = getattr(raw, "prompt_tokens", None)
    completion = getattr(raw, "completion_tokens", None)
    if prompt is None and completion is None:
        return None
    details = getattr(raw, "prompt_tokens_details", None)
    return Usage(
        input_tokens=int(prompt or 0),
        output_tokens=int(completion or 0),
        cached_tokens=_count(details, "cached_tokens") or _count(raw, "cache_read_input_tokens"),
        cache_write_tokens=(
            _count(raw, "cache_creation_input_tokens") or _count(details, "cache_creation_tokens")
        ),
        cache_write_1h_tokens=_count(
            getattr(details, "cache_creation_token_details", None), "ephemeral_1h_input_tokens"
        ),
    )


def _count(obj: Any, name: str) -> int:
    """A token count litellm reports (OpenAI's prompt_tokens_details.cached_tokens;
    Anthropic's cache_read/cache_creation_input_tokens, the 1-hour part of the writes in
    cache_creation_token_details); 0 when absent."""
    value = getattr(obj, name, None)
    return value if isinstance(value, int) and value > 0 else 0


def _mark_estimate(
    litellm: ModuleType, model: str, messages: list[dict[str, Any]], usage: Usage | None
) -> Usage | None:
    if usage is not None and ollama.prompt_count_estimated(
        litellm, model, messages, usage.input_tokens
    ):
        usage.input_estimated = True
    return usage


def _ended_without_reply(exc: BaseException) -> bool:
    """litellm's report of a stream the server closed cleanly before any finish reason
    (its MidStreamFallbackError, or the httpx error it raises it from)."""
    return any("Stream ended before a finish_reason" in str(e) for e in _cause_chain(exc))


def _refusal_text(exc: BaseException) -> str:
    """Everything the server said in an error: litellm's message keeps only the body's
    ``message``, while llama.cpp names its window in another field (``n_ctx``), which the
    HTTP response litellm keeps holds."""
    text = str(exc)
    response: Any = getattr(exc, "response", None)
    with contextlib.suppress(Exception):  # no response, or one whose body was streamed away
        text += " " + str(response.text)
    return text


def _no_usage_sent(
    litellm: ModuleType, messages: list[dict[str, Any]], usage: Usage | None
) -> Usage | None:
    """None for the usage of an empty stream when it is litellm's own stand-in (its count of
    the messages) rather than the server's: a stream that closed before any reply reports
    none, and the engine must be able to tell it from an honest empty reply."""
    if usage is None or usage.output_tokens:
        return usage
    try:
        stand_in = litellm.token_counter(messages=messages)
    except Exception:  # noqa: BLE001 - no count to compare with: take the figure as real
        return usage
    return None if usage.input_tokens == stand_in else usage


def _clean_message(exc: BaseException) -> str:
    """What the server (or the failing library) said, decoded, on one line."""
    return provider_message(str(exc)) or type(exc).__name__


def _retry_after(exc: BaseException) -> float | None:
    headers = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    if not isinstance(headers, Mapping):
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    with contextlib.suppress(ValueError):
        if "retry-after-ms" in lowered:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000)
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    import email.utils  # rare path; kept out of the import cost

    try:  # the HTTP-date form
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
