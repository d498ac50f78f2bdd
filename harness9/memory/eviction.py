"""Layer 2 of phase 2: evict the least informative old tool results first.

Each old tool result gets a density score (seed rules):

* +3 error text, +2.5 a decision, +1 a file path, +1.5 shorter than 500 characters;
* -2 a large code dump, -1.5 repetitive grep output, -2 a tool result over 3,000 characters;
* an offload marker (``📂 [offload:``) scores a neutral 1.0 and is never evicted: it is
  already a summary, and its id is what ``offload_recall`` needs.

``evict_by_density`` keeps the newest ``keep_groups`` tool groups (an assistant
message with tool calls plus its results) intact and, lowest score first (ties:
oldest first), replaces older results with ``[evicted] <rule summary> (N tokens
evicted)`` until the estimate is at or under the target. Roles, ids and order
never change, so the call/result sequence stays valid; the input is not mutated.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness9.memory.compaction import CompactionPlan, CompactionResult, starts_with_system
from harness9.memory.fingerprint import error_lines
from harness9.memory.patterns import (
    GREP_LINE_RE,
    has_decision,
    has_error,
    has_path,
    is_offload_marker,
)
from harness9.memory.repair import match_tool_results, repair_orphaned_tool_pairs
from harness9.memory.rule_summary import stats_of, summarize_output
from harness9.memory.tokens import BYTES_PER_TOKEN, message_bytes
from harness9.schema import ROLE_ASSISTANT, ROLE_TOOL, TRUNCATED_STUB, Message

EVICTED_PREFIX = "[evicted] "
EVICTED_ERROR_LINES = 3  # the last error lines of a result are kept in its eviction stub
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
    content = msg.content
    if is_offload_marker(content):
        return 1.0
    score = 0.0
    if has_error(content):
        score += 3.0
    if has_decision(content):
        score += 2.5
    if has_path(content):
        score += 1.0
    if len(content) < 500:
        score += 1.5
    if is_large_code_dump(content):
        score -= 2.0
    if is_repetitive_grep(content):
        score -= 1.5
    if msg.role == ROLE_TOOL and len(content) > 3000:
        score -= 2.0
    return score


@dataclass(slots=True)
class ToolGroup:
    call_index: int  # the assistant message carrying the calls
    result_indices: list[int]


def tool_groups(msgs: Sequence[Message]) -> list[ToolGroup]:
    """Assistant-with-calls messages and the results answering them, oldest first.

    Results are matched to calls exactly as the repair matches them, so a reused
    call id binds to the nearest call and a stray result belongs to no group.
    """
    slots = match_tool_results(msgs)
    groups: list[ToolGroup] = []
    s = 0
    for i, m in enumerate(msgs):
        if m.role == ROLE_ASSISTANT and m.tool_calls:
            n = len(m.tool_calls)
            groups.append(ToolGroup(i, sorted(r for r in slots[s : s + n] if r >= 0)))
            s += n
    return groups


def _evictable(content: str) -> bool:
    return not (
        is_offload_marker(content)
        or content.startswith(EVICTED_PREFIX)
        or content == TRUNCATED_STUB
    )


def evict_by_density(
    messages: Sequence[Message], keep_groups: int = 3, target_tokens: int = 0
) -> list[Message]:
    """Replace low-density old tool results until ``estimate_tokens(result) <= target_tokens``."""
    out = list(messages)
    total = sum(message_bytes(m) for m in out)
    if total // BYTES_PER_TOKEN <= target_tokens:
        return out
    groups = tool_groups(out)
    old = groups[: max(0, len(groups) - keep_groups)]
    # Each result's own call (ids may be reused across turns, so not a global id map).
    call_of = {
        i: tc
        for g in old
        for i in g.result_indices
        for tc in out[g.call_index].tool_calls
        if tc.id == out[i].tool_call_id
    }
    candidates = [
        (density_score(out[i]), i)
        for g in old
        for i in g.result_indices
        if _evictable(out[i].content)
    ]
    candidates.sort()
    for _, i in candidates:
        if total // BYTES_PER_TOKEN <= target_tokens:
            break
        msg = out[i]
        tc = call_of.get(i)
        name, args = (tc.name, tc.arguments) if tc else ("tool", "{}")
        stats = stats_of(msg.content)
        body = summarize_output(name, args, stats, brief=True)
        # A failing run's error line is what a later step (or summary) needs most,
        # and the brief summary's last lines often miss it.
        errors = [e for e in error_lines(msg.content) if e not in body][-EVICTED_ERROR_LINES:]
        if errors:
            body += "\nerrors:\n" + "\n".join("  " + e for e in errors)
        replacement = Message(
            ROLE_TOOL,
            f"{EVICTED_PREFIX}{body} ({stats.tokens} tokens evicted)",
            tool_call_id=msg.tool_call_id,
        )
        saved = message_bytes(msg) - message_bytes(replacement)
        if saved <= 0:  # a short result: its summary would not be smaller
            continue
        out[i] = replacement
        total -= saved
    return out


class EvictionCompactor:
    """Compacts by eviction alone when over ``max_tokens``, down to ``target_ratio`` of it.

    ``force`` evicts every evictable result outside the newest ``keep_groups`` groups.
    Nothing is folded, so ``plan.cut`` is always 1; the output is repaired like
    every compactor's.
    """

    strategy = "evict"

    def __init__(self, max_tokens: int, target_ratio: float = 0.7, keep_groups: int = 3) -> None:
        self.max_tokens = max_tokens
        self.target_ratio = target_ratio
        self.keep_groups = keep_groups

    @property
    def target_tokens(self) -> int:
        return int(self.max_tokens * self.target_ratio)

    def plan(self, msgs: list[Message], *, force: bool = False) -> CompactionPlan:
        return self._run(msgs, force)[0]

    def compact_detailed(self, msgs: list[Message], *, force: bool = False) -> CompactionResult:
        plan, out = self._run(msgs, force)
        if starts_with_system(msgs):
            out = repair_orphaned_tool_pairs(out)
        return CompactionResult(messages=out, plan=plan, summary=None, strategy=self.strategy)

    def compact(self, msgs: list[Message]) -> list[Message]:
        return self.compact_detailed(msgs).messages

    def _run(self, msgs: list[Message], force: bool) -> tuple[CompactionPlan, list[Message]]:
        before = sum(message_bytes(m) for m in msgs) // BYTES_PER_TOKEN
        plan = CompactionPlan(False, self.strategy, 1, before, before, self.max_tokens)
        if not starts_with_system(msgs) or (not force and before <= self.max_tokens):
            return plan, list(msgs)
        # Forced (a manual /compact): evict every old result that can go.
        target = 0 if force else self.target_tokens
        out = evict_by_density(msgs, self.keep_groups, target)
        after = sum(message_bytes(m) for m in out) // BYTES_PER_TOKEN
        plan.tokens_after = after
        plan.would_compact = after < before
        return plan, out
