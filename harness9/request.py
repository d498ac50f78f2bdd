"""The request one model call sends, whole: the contract between the context policy, which
builds it (``harness9.context.policy.ContextPolicy.prepare``), and the provider, which sends
exactly that. A bottom-layer module beside ``schema`` and ``tokens``: both sides import it,
neither imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness9.schema import ROLE_SYSTEM, Message, ToolDefinition
from harness9.tokens import estimate_tokens, estimate_tool_tokens

# The system message's parts, the most stable first so that the cached prefix reaches as far
# as it can: the prompt (with AGENTS.md), the state (the date), the pins, the kept instructions.
PART_PROMPT, PART_STATE, PART_PINS, PART_INSTRUCTIONS = "prompt", "state", "pins", "instructions"
PART_SEPARATOR = "\n\n"


@dataclass(slots=True, frozen=True)
class SystemPart:
    kind: str  # PART_*
    text: str


# The system prompt the policy is given: its parts, or one message (one prompt part).
SystemPrompt = Message | Sequence[SystemPart]


def prompt_parts(system: SystemPrompt) -> tuple[SystemPart, ...]:
    if isinstance(system, Message):
        return (SystemPart(PART_PROMPT, system.content),)
    return tuple(system)


def system_message(parts: Sequence[SystemPart]) -> Message:
    """The system message the parts make: their texts joined, empty ones left out."""
    return Message(ROLE_SYSTEM, PART_SEPARATOR.join(p.text for p in parts if p.text))


@dataclass(slots=True)
class Request:
    """What one model call sends, whole, and the provider sends unchanged: the system message
    in its parts (none: the messages carry their own, as a summary's do), the messages
    (``messages[0]`` the system message the parts make), the tools and the reply's budget
    (``max_tokens``; None: the provider's default)."""

    system: tuple[SystemPart, ...]
    messages: list[Message]  # repaired: a valid tool sequence
    tools: list[ToolDefinition]
    max_tokens: int | None = None
    shown_tokens: int = 0  # what the token line shows before the call (the server's count)
    estimated: int = 0  # ``estimate()``: the decisions' unit
    window: int = 0  # the window it was made for (one learnt since leaves the reply other room)

    @property
    def history(self) -> list[Message]:
        return self.messages[1:] if self.system else list(self.messages)

    def estimate(self) -> int:
        """Bytes / 4 of every message sent, plus the tool definitions' estimate."""
        return estimate_tokens(self.messages) + estimate_tool_tokens(self.tools)
