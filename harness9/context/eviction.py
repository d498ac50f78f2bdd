"""Eviction: old tool results replaced by stubs, the least informative first.

A result's density score: +3 error text, +2.5 a decision, +1 a file path, +1.5 under 500
characters; -2 a large code dump, -1.5 repetitive grep output, -2 a tool result over 3,000
characters. An offload marker or a stub is never evicted: it is already a summary.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness9.context.patterns import (
    GREP_LINE_RE,
    error_lines,
    find_declarations,
    find_paths,
    has_decision,
    has_error,
    has_path,
)
from harness9.context.repair import match_tool_results
from harness9.context.rule_summary import stats_of, summarize_output
from harness9.context.stubs import (
    evicted_stub,
    is_offload_marker,
    is_stub,
    stub_arguments,
    stub_message,
)
from harness9.schema import ROLE_ASSISTANT, ROLE_TOOL, Message
from harness9.tokens import BYTES_PER_TOKEN, message_bytes

EVICTED_ERROR_LINES = 3  # the last error lines of a result are kept in its stub
# Bytes of declared names and paths a stub may list beyond its rule summary (~80 tokens,
# room for 15-20 names): small next to the results worth evicting (thousands of bytes).
EVICTED_FACT_BYTES = 320
_CODE_LINE_RE = re.compile(
    r"^(?:[ \t]+\S|\s*(?:def|class|func|fn|import|from|return|if|for|while|const|let|var|"
    r"public|private|package|#include|@)\b|.*[{};:]\s*$|\s*[}\])]\s*$)"
)


def is_large_code_dump(content: str) -> bool:
    """2,000+ characters over 30+ lines, at least half of them code-shaped."""
    if len(content) < 2000:
        return False
    lines = [x for x in content.splitlines() if x.strip()]
    if len(lines) < 30:
        return False
    code = sum(1 for x in lines if _CODE_LINE_RE.match(x))
    return code * 2 >= len(lines)


def is_repetitive_grep(content: str) -> bool:
    """At least 10 ``path:line:`` matches making up most of the lines."""
    nonempty = sum(1 for x in content.splitlines() if x.strip())
    matches = len(GREP_LINE_RE.findall(content))
    return matches >= 10 and matches * 2 > nonempty


def density_score(msg: Message) -> float:
    """The rules in the module docstring (booleans count 1 or 0)."""
    c = msg.content
    return (
        3.0 * has_error(c)
        + 2.5 * has_decision(c)
        + 1.0 * has_path(c)
        + 1.5 * (len(c) < 500)
        - 2.0 * is_large_code_dump(c)
        - 1.5 * is_repetitive_grep(c)
        - 2.0 * (msg.role == ROLE_TOOL and len(c) > 3000)
    )


@dataclass(slots=True)
class ToolGroup:
    call_index: int  # the assistant message carrying the calls
    result_indices: list[int]


def tool_groups(msgs: Sequence[Message]) -> list[ToolGroup]:
    """Assistant-with-calls messages and their results, oldest first, matched as the repair
    matches them (a reused call id binds to the nearest call; a stray result to none)."""
    slots = match_tool_results(msgs)
    groups: list[ToolGroup] = []
    s = 0
    for i, m in enumerate(msgs):
        if m.role == ROLE_ASSISTANT and m.tool_calls:
            n = len(m.tool_calls)
            groups.append(ToolGroup(i, sorted(r for r in slots[s : s + n] if r >= 0)))
            s += n
    return groups


def _fact_lines(content: str, body: str) -> list[str]:
    """What the rule summary ``body`` lacks: the last error lines (what a later step needs
    most), then declared names and paths while they fit, and a count of the rest."""
    lines: list[str] = []
    errors = [e for e in error_lines(content) if e not in body][-EVICTED_ERROR_LINES:]
    if errors:
        lines += ["errors:", *("  " + e for e in errors)]
    words = set(re.findall(r"[\w./-]+", body))
    room = EVICTED_FACT_BYTES
    for label, found in (("names", find_declarations(content)), ("paths", find_paths(content))):
        items = [x for x in found if x not in words]
        shown: list[str] = []
        for item in items:
            cost = len(item.encode()) + 2
            if cost > room:
                break
            room -= cost
            shown.append(item)
        more = len(items) - len(shown)
        if shown or more:
            line = f"{label}: " + ", ".join(shown)
            lines.append(line + (f" … and {more} more not shown" if more else ""))
    return lines


def evict_by_density(
    messages: Sequence[Message], keep_groups: int = 3, target_tokens: int = 0
) -> list[Message]:
    """A copy in which the long arguments of the calls of all but the newest ``keep_groups``
    tool groups are stubbed, then their results replaced by eviction stubs (rule summary, last error lines, declared names and paths),
    lowest score first (ties: oldest first), until the estimate is at most
    ``target_tokens``. Roles, ids and order stay, so the tool-call sequence stays valid."""
    out = list(messages)
    total = sum(message_bytes(m) for m in out)
    if total // BYTES_PER_TOKEN <= target_tokens:
        return out
    groups = tool_groups(out)
    # Old calls' long arguments go first: the file a write_file wrote is on disk, and the
    # stub keeps the call's handle.
    for g in groups[: max(0, len(groups) - keep_groups)]:
        if total // BYTES_PER_TOKEN <= target_tokens:
            return out
        msg = out[g.call_index]
        out[g.call_index] = stub_arguments(msg)
        total -= message_bytes(msg) - message_bytes(out[g.call_index])
    # Each old result's own call (ids may be reused across turns, so not a global id map).
    call_of = {
        i: tc
        for g in groups[: max(0, len(groups) - keep_groups)]
        for i in g.result_indices
        for tc in out[g.call_index].tool_calls
        if tc.id == out[i].tool_call_id
    }
    candidates = sorted(
        (density_score(out[i]), i)
        for i in call_of
        if not (is_offload_marker(out[i].content) or is_stub(out[i].content))
    )
    for _, i in candidates:
        if total // BYTES_PER_TOKEN <= target_tokens:
            break
        msg, call = out[i], call_of[i]
        stats = stats_of(msg.content)
        body = summarize_output(call.name, call.arguments, stats, brief=True)
        body = "\n".join([body, *_fact_lines(msg.content, body)])
        stub = stub_message(evicted_stub(body, stats.tokens), msg)
        if message_bytes(stub) >= message_bytes(msg):  # a short result: no smaller as a stub
            continue
        total -= message_bytes(msg) - message_bytes(stub)
        out[i] = stub
    return out
