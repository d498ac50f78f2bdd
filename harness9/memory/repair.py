"""Make a history a valid tool-call sequence, as the chat APIs require.

Both the OpenAI and the Anthropic APIs reject (HTTP 400) a history in which an
assistant message with tool calls is not followed *immediately* by exactly one
result per call, or in which a tool message stands anywhere else. Truncation,
an interrupted tool run or a crash between two writes can all produce such a
history, so the repair runs after every compaction and before every request.

The seed's version (§6.4) only drops results without a call and stubs calls
without a result, with a nested scan (quadratic). This one is linear, also
moves a late result (one written after an interrupt, say) up into its block,
and drops second answers to the same call.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from harness9.schema import ROLE_ASSISTANT, ROLE_TOOL, TRUNCATED_STUB, Message

__all__ = ["is_valid_tool_sequence", "match_tool_results", "repair_orphaned_tool_pairs"]


def _has_calls(msg: Message) -> bool:
    # Only assistant messages carry tool calls on the wire (Message.to_dict).
    return msg.role == ROLE_ASSISTANT and bool(msg.tool_calls)


def match_tool_results(msgs: Sequence[Message]) -> list[list[int]]:
    """For each message, the index of the result answering each of its calls (-1: none).

    Non-assistant messages and assistant messages without calls get ``[]``.
    A result answers the most recent assistant message that made a call with
    its id and whose call is still unanswered; a result that finds no such
    call is dropped by the repair. Reused ids (some local models number calls
    ``call_0`` every turn) therefore bind to the nearest call, and a newer call
    with the same id supersedes an older unanswered one.
    """
    answers: list[list[int]] = [[] for _ in msgs]
    # id -> positions (owner index, call position) of the newest assistant
    # message with that id, still unanswered, oldest first.
    open_calls: dict[str, deque[tuple[int, int]]] = {}
    for i, msg in enumerate(msgs):
        if msg.role == ROLE_TOOL:
            pending = open_calls.get(msg.tool_call_id)
            if pending:
                owner, pos = pending.popleft()
                answers[owner][pos] = i
        elif _has_calls(msg):
            answers[i] = [-1] * len(msg.tool_calls)
            fresh: dict[str, deque[tuple[int, int]]] = {}
            for pos, tc in enumerate(msg.tool_calls):
                fresh.setdefault(tc.id, deque()).append((i, pos))
            open_calls.update(fresh)
    return answers


def stub_for(call_id: str) -> Message:
    return Message(ROLE_TOOL, TRUNCATED_STUB, tool_call_id=call_id)


def repair_orphaned_tool_pairs(msgs: Sequence[Message]) -> list[Message]:
    """A new list in which every call is answered in its block and no result stands alone.

    - a result whose call is absent, or already answered, is dropped;
    - a result that appears later than its block is moved up into it;
    - a call still without a result gets a stub (role tool, ``TRUNCATED_STUB``).
    Results in a block follow the order of the calls. Messages that stood
    between a call and its late result stay where they were, after the block.
    Linear time, idempotent; the input list and its messages are not modified
    (kept messages are the same objects).
    """
    answers = match_tool_results(msgs)
    out: list[Message] = []
    for i, msg in enumerate(msgs):
        if msg.role == ROLE_TOOL:
            continue  # every kept result is emitted inside its call's block
        out.append(msg)
        for pos, r in enumerate(answers[i]):
            out.append(msgs[r] if r >= 0 else stub_for(msg.tool_calls[pos].id))
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
