"""Prompt-cache breakpoints for providers that cache only where the client asks.

OpenAI, Gemini and DeepSeek cache a repeated prompt prefix by themselves. Anthropic caches
only prefixes that end at a block marked ``cache_control`` (at most 4 marks a request), and
so does Claude reached through Bedrock, Vertex AI or OpenRouter. For those, the request's
messages get litellm's public form of the mark: ``cache_control`` on a message (system,
user, assistant text, tool result) or on an assistant's tool call, which litellm moves onto
the Anthropic block it builds from it (or a Bedrock ``cachePoint``).

Where the marks go (3 of the 4 allowed):
- the system message: tools and system prompt, the part every request shares (and every
  session in the same directory). Its parts from the session state on (the date, the pins,
  the kept instructions; harness9.request.SystemPart) change more often, so the
  system text is sent as two blocks (``system_blocks``) and the mark goes on the first;
- the end of the previous request's prompt (the message before the newest assistant
  reply): exactly what the previous request cached, so this one reads it whatever was
  appended since (Anthropic looks back only 20 blocks from a mark for a hit);
- the last message: the rolling mark the next request reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness9.config import CACHE_TTLS
from harness9.request import PART_SEPARATOR, PART_STATE, SystemPart

MAX_BREAKPOINTS = 4
# Routing prefixes under which a Claude model still needs the client's marks.
_CLAUDE_ROUTES = frozenset({"anthropic", "bedrock", "vertex_ai", "openrouter"})


def needs_breakpoints(model: str) -> bool:
    """True for Claude models, whose prompt cache works only at the client's breakpoints."""
    name = model.strip().lower()
    if "/" not in name:
        return name.startswith("claude")
    route = name.split("/", 1)[0]
    return route in _CLAUDE_ROUTES and "claude" in name


def cache_control(ttl: str) -> dict[str, str]:
    if ttl not in CACHE_TTLS:
        raise ValueError(f"cache lifetime must be one of {CACHE_TTLS}, got {ttl!r}")
    # "5m" is the API's default lifetime; saying it would only make the request longer.
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}


def system_blocks(parts: Sequence[SystemPart]) -> list[str]:
    """The system message's text as cache blocks: the parts before the session state, then
    the rest (one block when there is no state part)."""
    cut = next((i for i, p in enumerate(parts) if p.kind == PART_STATE), len(parts))
    groups = (parts[:cut], parts[cut:])
    blocks = [PART_SEPARATOR.join(p.text for p in group if p.text) for group in groups]
    return [b for b in blocks if b]


def place_breakpoints(
    messages: list[dict[str, Any]], ttl: str = "5m", system: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """``messages`` (request dicts, OpenAI form) with the breakpoints described above;
    ``system``: the system message's text as blocks (``system_blocks``), the mark on the
    first when there are two.

    The input is not changed; the marked messages are copies. A message that cannot carry
    a mark (an assistant message with neither text nor tool calls) passes it to the one
    before it.
    """
    out = list(messages)
    marks = _mark_positions(out)
    control = cache_control(ttl)
    for index in marks[:MAX_BREAKPOINTS]:
        out[index] = _marked(out[index], control, system)
    return out


def _mark_positions(messages: list[dict[str, Any]]) -> list[int]:
    positions: list[int] = []
    system = next((i for i, m in enumerate(messages) if m.get("role") == "system"), None)
    if system is not None and _markable(messages[system]):
        positions.append(system)
    last_reply = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "assistant"),
        None,
    )
    if last_reply is not None:
        previous_end = _markable_at_or_before(messages, last_reply - 1)
        if previous_end is not None:
            positions.append(previous_end)
    last = _markable_at_or_before(messages, len(messages) - 1)
    if last is not None:
        positions.append(last)
    return sorted(set(positions))


def _markable_at_or_before(messages: list[dict[str, Any]], index: int) -> int | None:
    for i in range(index, -1, -1):
        if _markable(messages[i]):
            return i
    return None


def _markable(message: dict[str, Any]) -> bool:
    if message.get("role") == "assistant":
        return bool(message.get("content")) or bool(message.get("tool_calls"))
    return bool(message.get("content")) or message.get("role") == "tool"


def _marked(
    message: dict[str, Any], control: dict[str, str], system: Sequence[str]
) -> dict[str, Any]:
    marked = dict(message)
    content = marked.get("content")
    if marked.get("role") == "system" and len(system) > 1:
        stable, *rest = system
        marked["content"] = [
            {"type": "text", "text": stable, "cache_control": dict(control)},
            *({"type": "text", "text": text} for text in rest),
        ]
    elif marked.get("role") == "assistant" and not content:
        # Only tool calls: litellm takes the mark from the call onto its tool_use block.
        calls = [dict(c) for c in marked["tool_calls"]]
        calls[-1]["cache_control"] = dict(control)
        marked["tool_calls"] = calls
    else:
        marked["cache_control"] = dict(control)
    return marked


__all__ = [
    "MAX_BREAKPOINTS",
    "cache_control",
    "needs_breakpoints",
    "place_breakpoints",
    "system_blocks",
]
