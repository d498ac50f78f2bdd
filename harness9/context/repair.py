"""Make a history a valid tool-call sequence, as the chat APIs require.

Both the OpenAI and the Anthropic APIs reject (HTTP 400) a history in which an
assistant message with tool calls is not followed *immediately* by exactly one
result per call, or in which a tool message stands anywhere else. Truncation,
an interrupted tool run or a crash between two writes can all produce such a
history, so the repair runs after every compaction and before every request.

The reference design's version only drops results without a call and stubs calls
without a result, with a nested scan (quadratic). This one is linear, also
moves a late result (one written after an interrupt, say) up into its block,
and drops second answers to the same call.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from harness9.schema import ROLE_ASSISTANT, ROLE_TOOL, TRUNCATED_STUB, Message

__all__ = [
    "is_valid_tool_sequence",
    "match_tool_results",
    "repair_orphaned_tool_pairs",
]


def _has_calls(msg: Message) -> bool:
    # Only assistant messages carry tool calls on the wire (Message.to_dict).
    return msg.role == ROLE_ASSISTANT and bool(msg.tool_calls)


def match_tool_results(msgs: Sequence[Message]) -> list[int]:
    """Match every tool result to the call it answers.

    Returns one slot per tool call, in history order (message by message,
    call by call): the index of the result answering that call, or -1.

    A result answers the most recent assistant message that made a call with
    its id and whose call is still unanswered; a result that finds no such
    call is dropped by the repair. Reused ids (some local models number calls
    ``call_0`` every turn) therefore bind to the nearest call, and a newer call
    with the same id supersedes an older unanswered one.
    """
    # Plain ints and no per-message containers, on purpose: on long histories the
    # cyclic garbage collector's full passes over every live message would
    # otherwise make the run time grow faster than linearly.
    result: list[int] = []
    # id -> slot of the newest unanswered call with that id (a deque of slots
    # when one message repeats an id).
    open_calls: dict[str, int | deque[int]] = {}
    for i, msg in enumerate(msgs):
        role = msg.role
        if role == ROLE_TOOL:
            slot = open_calls.pop(msg.tool_call_id, None)
            if slot is None:
                continue
            if not isinstance(slot, int):
                queue = slot
                slot = queue.popleft()
                if queue:
                    open_calls[msg.tool_call_id] = queue
            result[slot] = i
        elif role == ROLE_ASSISTANT and msg.tool_calls:
            calls = msg.tool_calls
            base = len(result)
            if len(calls) == 1:  # the common case, without a temporary list
                open_calls[calls[0].id] = base
                result.append(-1)
                continue
            result.extend([-1] * len(calls))
            fresh: dict[str, int | deque[int]] = {}
            for pos, tc in enumerate(calls):
                prev = fresh.get(tc.id)
                if prev is None:
                    fresh[tc.id] = base + pos
                elif isinstance(prev, int):
                    fresh[tc.id] = deque((prev, base + pos))
                else:
                    prev.append(base + pos)
            open_calls.update(fresh)
    return result


def stub_for(call_id: str, text: str = TRUNCATED_STUB) -> Message:
    return Message(ROLE_TOOL, text, tool_call_id=call_id)


def repair_orphaned_tool_pairs(
    msgs: Sequence[Message], *, stub: str = TRUNCATED_STUB
) -> list[Message]:
    """A new list in which every call is answered in its block and no result stands alone.

    - a result whose call is absent, or already answered, is dropped;
    - a result that appears later than its block is moved up into it;
    - a call still without a result gets a stub (role tool, ``stub``: ``TRUNCATED_STUB``,
      or ``UNFINISHED_STUB`` where ``msgs`` is the stored log, whose calls lack a result
      only when none ever came).
    Results in a block follow the order of the calls. Messages that stood
    between a call and its late result stay where they were, after the block.
    Linear time, idempotent; the input list and its messages are not modified
    (kept messages are the same objects).
    """
    result = match_tool_results(msgs)
    s = 0  # the slot of the next call, in the order match_tool_results numbers them
    out: list[Message] = []
    append = out.append
    for msg in msgs:
        role = msg.role
        if role == ROLE_TOOL:
            continue  # every kept result is emitted inside its call's block
        append(msg)
        if role == ROLE_ASSISTANT and msg.tool_calls:
            for tc in msg.tool_calls:
                r = result[s]
                append(msgs[r] if r >= 0 else stub_for(tc.id, stub))
                s += 1
    return out


def is_valid_tool_sequence(msgs: Sequence[Message]) -> bool:
    """True when every call is answered exactly once, immediately, and no tool message stands elsewhere.

    Results within a block may come in any order (the APIs accept that).
    """
    i, n = 0, len(msgs)
    while i < n:
        msg = msgs[i]
        if msg.role == ROLE_TOOL:
            return False
        i += 1
        if not _has_calls(msg):
            continue
        expected: dict[str, int] = {}
        for tc in msg.tool_calls:
            expected[tc.id] = expected.get(tc.id, 0) + 1
        remaining = len(msg.tool_calls)
        while remaining and i < n and msgs[i].role == ROLE_TOOL:
            left = expected.get(msgs[i].tool_call_id, 0)
            if not left:
                return False
            expected[msgs[i].tool_call_id] = left - 1
            remaining -= 1
            i += 1
        if remaining:
            return False
    return True
