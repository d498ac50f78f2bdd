"""Make a history a valid tool-call sequence, as the chat APIs require.

The OpenAI and Anthropic APIs reject (HTTP 400) a history in which an assistant message
with tool calls is not followed *immediately* by exactly one result per call, or in which
a tool message stands anywhere else. Truncation, an interrupted tool run or a crash
between two writes can all produce one, so the repair runs after every compaction and
before every request. Unlike the reference design's (quadratic, drops and stubs only),
it is linear, moves a late result up into its block, and drops second answers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from harness9.schema import ROLE_ASSISTANT, ROLE_TOOL, TRUNCATED_STUB, Message


def match_tool_results(msgs: Sequence[Message]) -> list[int]:
    """One slot per tool call, in history order (message by message, call by call): the
    index of the result answering it, or -1.

    A result answers the most recent assistant message that made a call with its id still
    unanswered; one that finds none is dropped by the repair. Reused ids (some local models
    number calls ``call_0`` every turn) thus bind to the nearest call, and a newer call with
    the same id supersedes an older unanswered one.
    """
    # Plain ints and no per-message containers, on purpose: on long histories the cyclic
    # garbage collector's full passes over every live message would otherwise make the
    # run time grow faster than linearly. A deque only for an id repeated in one message.
    result: list[int] = []
    open_calls: dict[str, int | deque[int]] = {}
    for i, msg in enumerate(msgs):
        if msg.role == ROLE_TOOL:
            slot = open_calls.pop(msg.tool_call_id, None)
            if isinstance(slot, deque):
                if len(slot) > 1:
                    open_calls[msg.tool_call_id] = slot
                slot = slot.popleft()
            if slot is not None:
                result[slot] = i
        elif msg.role == ROLE_ASSISTANT and msg.tool_calls:
            fresh: dict[str, int | deque[int]] = {}
            for tc in msg.tool_calls:
                prev = fresh.get(tc.id)
                if prev is None:
                    fresh[tc.id] = len(result)
                elif isinstance(prev, int):
                    fresh[tc.id] = deque((prev, len(result)))
                else:
                    prev.append(len(result))
                result.append(-1)
            open_calls.update(fresh)
    return result


def repair_orphaned_tool_pairs(
    msgs: Sequence[Message], *, stub: str = TRUNCATED_STUB
) -> list[Message]:
    """A new list in which every call is answered in its block and no result stands alone.

    A result whose call is absent or already answered is dropped; a late one is moved up
    into its block (messages that stood between stay after it); a call still without a
    result gets a tool message ``stub`` (``UNFINISHED_STUB`` where ``msgs`` is the stored
    log, whose calls lack a result only when none ever came). Results follow the order of
    the calls. Linear, idempotent; the input is not modified (kept messages are the same
    objects).
    """
    result = match_tool_results(msgs)
    slots = iter(result)
    out: list[Message] = []
    for msg in msgs:
        if msg.role == ROLE_TOOL:
            continue  # every kept result is emitted inside its call's block
        out.append(msg)
        if msg.role == ROLE_ASSISTANT:
            for tc in msg.tool_calls:
                r = next(slots)
                out.append(msgs[r] if r >= 0 else Message(ROLE_TOOL, stub, tool_call_id=tc.id))
    return out


def is_valid_tool_sequence(msgs: Sequence[Message]) -> bool:
    """True when every call is answered exactly once, immediately (in any order within its
    block, as the APIs accept), and no tool message stands elsewhere."""
    result = match_tool_results(msgs)
    tools = slot = 0
    for i, msg in enumerate(msgs):
        if msg.role == ROLE_TOOL:
            tools += 1
        elif msg.role == ROLE_ASSISTANT and msg.tool_calls:
            n = len(msg.tool_calls)
            if sorted(result[slot : slot + n]) != list(range(i + 1, i + n + 1)):
                return False
            slot += n
    return tools == len(result)
