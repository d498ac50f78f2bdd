"""Make a history a valid tool-call sequence, as the chat APIs require.

The OpenAI and Anthropic APIs reject (HTTP 400) an assistant message with tool calls not
followed *immediately* by one result per call, and a tool message anywhere else. Truncation,
an interrupted tool run or a crash between two writes produce such histories, so the repair
runs after every compaction and before every request. Unlike the reference design's
quadratic scan, it is linear, moves a late result up into its block and drops second answers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from harness9.schema import ROLE_ASSISTANT, ROLE_TOOL, TRUNCATED_STUB, Message


def match_tool_results(msgs: Sequence[Message]) -> list[int]:
    """One slot per tool call, in history order: the index of the result answering it, or -1.

    A result answers the newest still-unanswered call with its id, so reused ids (local
    models that number calls ``call_0`` every turn) bind to the nearest call; a result
    that finds none is dropped by the repair.
    """
    # Plain ints, no per-message containers: on long histories the garbage collector's
    # full passes over them would make the run time grow faster than linearly.
    result: list[int] = []
    # id -> slot of the newest unanswered call (a deque when one message repeats an id).
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


def repair_orphaned_tool_pairs(
    msgs: Sequence[Message], *, stub: str = TRUNCATED_STUB
) -> list[Message]:
    """A new list in which every call is answered in its block, in call order: a result
    without an open call is dropped, a late one moved up (what stood between stays after
    the block), a missing one stubbed with ``stub`` (``UNFINISHED_STUB`` for the stored
    log, where a call lacks a result only when none came). Idempotent; the input and its
    messages are not modified (kept messages are the same objects).
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
                append(msgs[r] if r >= 0 else Message(ROLE_TOOL, stub, tool_call_id=tc.id))
                s += 1
    return out


def is_valid_tool_sequence(msgs: Sequence[Message]) -> bool:
    """Every call answered exactly once, immediately (in any order within its block, as the
    APIs accept), and no tool message elsewhere."""
    i, n = 0, len(msgs)
    while i < n:
        msg = msgs[i]
        if msg.role == ROLE_TOOL:
            return False
        i += 1
        if msg.role != ROLE_ASSISTANT or not msg.tool_calls:
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
