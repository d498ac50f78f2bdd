"""The user's words kept verbatim through compaction, and the session's pins.

A summary may be weak; what the user asked of the agent may not be lost. So a
checkpoint keeps the user messages it folds *verbatim* (``carry_instructions``):
newest first within a budget scaled to the window (Codex keeps 20K tokens of user
messages), carried from one checkpoint to the next. The view repeats them after the
system prompt, marked as earlier instructions, together with the session's pins
(``with_notes``). Both are rendered from stored values only, so every request between
two compactions (and ``--resume``) carries the same bytes: the cached prefix changes
only when a compaction (or a /pin) changes it anyway. They sit in the system message,
which no compactor folds, so no strategy can drop them.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness9.context.prompts import prompt
from harness9.context.tokens import BYTES_PER_TOKEN, utf8_len
from harness9.schema import ROLE_SYSTEM, ROLE_USER, Message

# Codex's COMPACT_USER_MESSAGE_MAX_TOKENS, and the share of its 272K window that is.
MAX_INSTRUCTION_TOKENS = 20_000
INSTRUCTION_SHARE = 0.075
# One message may take at most this share of the budget; a longer one (a pasted log,
# most likely) is kept by its head, and history_search finds the rest.
MESSAGE_SHARE = 0.25

INSTRUCTIONS_HEADER = prompt("earlier_instructions")
PINS_HEADER = prompt("pinned_notes")


def instruction_budget(context_window: int) -> int:
    """Tokens the kept user messages may take in a window of ``context_window``."""
    return max(0, min(MAX_INSTRUCTION_TOKENS, int(context_window * INSTRUCTION_SHARE)))


def _capped(text: str, cap: int) -> str:
    """``text``, or its head with a note when it is over ``cap`` tokens."""
    if utf8_len(text) // BYTES_PER_TOKEN <= cap:
        return text
    head = text.encode("utf-8")[: max(0, cap * BYTES_PER_TOKEN - 120)].decode("utf-8", "ignore")
    rest = len(text) - len(head)
    return f"{head} [… {rest} more characters; history_search finds the whole message]"


def carry_instructions(
    previous: Sequence[str], folded: Sequence[Message], budget: int
) -> list[str]:
    """The user messages a new checkpoint keeps, oldest first.

    ``previous``: what the previous checkpoint kept; ``folded``: the messages this
    compaction folds (only the user's own are kept). The newest are kept whole while
    they fit ``budget``; the first that does not fit ends the list, so what is kept is
    always the most recent run of instructions. Since ``previous`` was chosen the same
    way, carrying it forward equals choosing from every folded message of the session.
    """
    if budget <= 0:
        return []
    cap = max(1, int(budget * MESSAGE_SHARE))
    candidates = [*previous]
    candidates += [
        _capped(m.content, cap)
        for m in folded
        if m.role == ROLE_USER and not m.is_summary and m.content.strip()
    ]
    kept: list[str] = []
    room = budget
    for text in reversed(candidates):
        room -= utf8_len(text) // BYTES_PER_TOKEN
        if room < 0:
            break
        kept.append(text)
    return kept[::-1]


def render_instructions(messages: Sequence[str]) -> str:
    """The earlier-instructions note ("" for none)."""
    if not messages:
        return ""
    body = "\n\n".join(f"[user message {i}]\n{m}" for i, m in enumerate(messages, 1))
    return f"{INSTRUCTIONS_HEADER}\n\n{body}"


def with_notes(system: Message, pins: Sequence[str], instructions: Sequence[str]) -> Message:
    """The system message followed by the pins, then the earlier instructions.

    Pins change only when the user pins, instructions only at a compaction: the most
    stable part comes first, so the cached prefix reaches as far as it can.
    """
    if not pins and not instructions:
        return system
    pinned = PINS_HEADER + "".join(f"\n{i}. {p}" for i, p in enumerate(pins, 1)) if pins else ""
    parts = (system.content, pinned, render_instructions(instructions))
    content = "\n\n".join(p for p in parts if p)
    return Message(ROLE_SYSTEM, content, system.tool_calls, system.tool_call_id)
