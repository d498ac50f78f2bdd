"""Smart compaction triggers: compact a little *before* the fixed threshold is crossed.

The rule (``SmartTrigger.should_compress_dynamic``), with the defaults
lookahead 2 iterations (3 when the recent tools are read-heavy), cooldown 3
iterations, and ``threshold_tokens`` the compactor's threshold:

1. ``current >= max_tokens`` (the window) -> True, always (a hard overflow
   compacts even in cooldown).
2. In cooldown (a compaction happened fewer than 3 iterations ago) -> False.
   Compacted at iteration 5: no compaction at 6 or 7 below the hard limit, allowed at 8.
3. ``current >= threshold_tokens`` -> True (the fixed threshold).
4. ``current + growth_rate * lookahead >= threshold_tokens`` -> True (predicted crossing).
   max 50K (threshold 40K), snapshots 10K, 20K, 30K: growth 10K/iteration, and
   30K + 2 * 10K = 50K >= 40K, so it compacts at 30K although 30K < 40K.
5. Otherwise False.

The rule is stateless; the state it reads (growth tracker, cooldown, iteration
count) lives per session in a ``SessionTriggerState``, which the context policy
keeps and drops on ``/new``. Per model call (``ContextPolicy`` does this)::

    info = state.info(tokens, recent_tools, max_tokens=window, threshold_tokens=t)
    if trigger.should_compress_dynamic(info):
        ...compact...
        state.cooldown.record_compress(state.iterations)
    # (state.info also records the tokens in the growth tracker, compacted or not)

Iterations count up for the whole session; a smaller number than the last
compaction's is taken as a new numbering and ends the cooldown.
"""

from __future__ import annotations

import json
import shlex
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from harness9.schema import ToolCall


class ToolCallPattern(Enum):
    CONVERSATION = "conversation"
    READ_HEAVY = "read_heavy"
    WRITE_HEAVY = "write_heavy"
    MIXED = "mixed"
    SUB_AGENT = "sub_agent"


READ_TOOLS = frozenset(
    {"read_file", "grep", "glob", "ls", "list_dir", "list_files", "search", "offload_recall"}
)
WRITE_TOOLS = frozenset({"write_file", "edit_file", "apply_patch", "write_todos", "delete_file"})
SUB_AGENT_TOOLS = frozenset({"task", "sub_agent", "spawn_agent", "delegate", "agent"})
SHELL_TOOLS = frozenset({"bash", "shell", "sh"})
# Shell commands that only look at things; such a bash call counts as a read.
_READ_COMMANDS = frozenset(
    {
        "cat",
        "ls",
        "grep",
        "rg",
        "find",
        "head",
        "tail",
        "less",
        "wc",
        "tree",
        "stat",
        "file",
        "pwd",
        "du",
        "df",
        "which",
        "echo",
        "sed",
        "awk",
        "diff",
        "git",
    }
)
_GIT_READS = frozenset({"log", "status", "diff", "show", "blame", "branch", "grep", "ls-files"})


def classify_tool(name: str, arguments: str = "") -> str:
    """'read' | 'write' | 'sub_agent' | 'exec' | 'other' for one tool call."""
    if name in READ_TOOLS:
        return "read"
    if name in WRITE_TOOLS:
        return "write"
    if name in SUB_AGENT_TOOLS:
        return "sub_agent"
    if name in SHELL_TOOLS:
        return "read" if _is_read_command(arguments) else "exec"
    return "other"


def _is_read_command(arguments: str) -> bool:
    try:
        data = json.loads(arguments) if arguments else {}
        command = data.get("command", "") if isinstance(data, dict) else ""
        words = shlex.split(command) if isinstance(command, str) else []
    except (ValueError, AttributeError):
        return False
    if not words or words[0] not in _READ_COMMANDS:
        return False
    if words[0] == "git":
        return len(words) > 1 and words[1] in _GIT_READS
    if words[0] == "sed":
        return "-i" not in words and not any(w.startswith("-i") for w in words[1:])
    return not any(ch in command for ch in (">", "| tee"))


def classify_pattern(calls: Sequence[ToolCall | str]) -> ToolCallPattern:
    """Pattern of the recent calls: any sub-agent call -> SUB_AGENT; more than half
    reads -> READ_HEAVY; more than half writes -> WRITE_HEAVY; none -> CONVERSATION;
    else MIXED."""
    kinds = [
        classify_tool(c.name, c.arguments) if isinstance(c, ToolCall) else classify_tool(c)
        for c in calls
    ]
    if not kinds:
        return ToolCallPattern.CONVERSATION
    if "sub_agent" in kinds:
        return ToolCallPattern.SUB_AGENT
    if kinds.count("read") * 2 > len(kinds):
        return ToolCallPattern.READ_HEAVY
    if kinds.count("write") * 2 > len(kinds):
        return ToolCallPattern.WRITE_HEAVY
    return ToolCallPattern.MIXED


@dataclass(slots=True)
class TokenSnapshot:
    iteration: int
    tokens: int


class TokenGrowthTracker:
    """Sliding window (default 10) of token counts, one per model call."""

    def __init__(self, window: int = 10) -> None:
        self.window = window
        self._snaps: deque[TokenSnapshot] = deque(maxlen=window)

    def record(self, iteration: int, tokens: int) -> None:
        # A drop means a compaction happened: growth before it says nothing about after.
        if self._snaps and tokens < self._snaps[-1].tokens:
            self._snaps.clear()
        self._snaps.append(TokenSnapshot(iteration, tokens))

    def history(self) -> list[int]:
        return [s.tokens for s in self._snaps]

    def growth_rate(self) -> float:
        """Average tokens added per recorded iteration over the window (0.0 with < 2)."""
        if len(self._snaps) < 2:
            return 0.0
        return (self._snaps[-1].tokens - self._snaps[0].tokens) / (len(self._snaps) - 1)

    def reset(self) -> None:
        self._snaps.clear()


class CompressCooldown:
    """No dynamic compaction within ``cooldown_iterations`` (3) after the last one."""

    def __init__(self, cooldown_iterations: int = 3) -> None:
        self.cooldown_iterations = cooldown_iterations
        self.last_compress_iteration: int | None = None

    def record_compress(self, iteration: int) -> None:
        self.last_compress_iteration = iteration

    def in_cooldown(self, iteration: int) -> bool:
        if self.last_compress_iteration is None:
            return False
        return 0 <= iteration - self.last_compress_iteration < self.cooldown_iterations

    def reset(self) -> None:
        self.last_compress_iteration = None


@dataclass(slots=True)
class TriggerInfo:
    max_tokens: int  # the hard limit (the context window)
    threshold_tokens: int  # the compactor's threshold
    current_tokens: int
    iteration_count: int = 0
    tool_call_count: int = 0  # calls since the last user message (this run)
    token_history: list[int] = field(default_factory=list)
    growth_rate: float = 0.0
    recent_tools: list[str] = field(default_factory=list)  # last 5 names, oldest first
    tool_pattern: ToolCallPattern = ToolCallPattern.CONVERSATION
    in_cooldown: bool = False


@dataclass(slots=True)
class SessionTriggerState:
    """What the trigger remembers about one session: growth, cooldown, model calls so far."""

    growth_tracker: TokenGrowthTracker = field(default_factory=TokenGrowthTracker)
    cooldown: CompressCooldown = field(default_factory=CompressCooldown)
    iterations: int = 0

    def info(
        self,
        tokens: int,
        recent_tools: Sequence[str],
        *,
        max_tokens: int,
        threshold_tokens: int,
    ) -> TriggerInfo:
        """Counts one model call and records ``tokens``; the trigger's view of this call."""
        self.iterations += 1
        i = self.iterations
        recent = list(recent_tools[-5:])
        info = TriggerInfo(
            max_tokens=max_tokens,
            threshold_tokens=threshold_tokens,
            current_tokens=tokens,
            iteration_count=i,
            tool_call_count=len(recent_tools),
            token_history=self.growth_tracker.history(),
            growth_rate=self.growth_tracker.growth_rate(),
            recent_tools=recent,
            tool_pattern=classify_pattern(recent),
            in_cooldown=self.cooldown.in_cooldown(i),
        )
        self.growth_tracker.record(i, tokens)
        return info

    def compacted(self) -> None:
        """A compaction happened at the current model call: the cooldown starts."""
        # (The growth tracker restarts by itself when it sees the compaction's drop.)
        self.cooldown.record_compress(self.iterations)

    def reset(self) -> None:
        self.growth_tracker.reset()
        self.cooldown.reset()
        self.iterations = 0


@dataclass(slots=True)
class SmartTrigger:
    """The rule in the module docstring; stateless, so one instance serves every session."""

    lookahead_iterations: int = 2
    read_heavy_lookahead: int = 3

    def should_compress_dynamic(self, info: TriggerInfo) -> bool:
        if info.current_tokens >= info.max_tokens:
            return True
        if info.in_cooldown:
            return False
        limit = info.threshold_tokens
        if info.current_tokens >= limit:
            return True
        if info.growth_rate <= 0:
            return False
        lookahead = (
            self.read_heavy_lookahead
            if info.tool_pattern is ToolCallPattern.READ_HEAVY
            else self.lookahead_iterations
        )
        return info.current_tokens + info.growth_rate * lookahead >= limit
