"""The smart trigger: compact a little *before* the fixed threshold is crossed.

Per model call the policy asks ``trigger.should_compress_dynamic(state.info(...))``
and, when it compacted, calls ``state.compacted()``. The rule, with the defaults
lookahead 2 calls (3 when the recent tools mostly read) and cooldown 3 calls:

1. At the window (``max_tokens``) -> True, even in cooldown (a hard overflow).
2. In cooldown -> False: compacted at call 5, no compaction at 6 or 7 below the
   window, allowed at 8.
3. ``current + growth * lookahead >= threshold_tokens`` -> True: the threshold, or
   its predicted crossing. Window 50K (threshold 40K), calls at 10K, 20K, 30K:
   growth 10K a call, and 30K + 2 * 10K = 50K >= 40K, so it compacts at 30K.

Growth is the average over the last 10 calls, restarted by a drop. Calls count up
for the whole session; one numbered below the last compaction ends the cooldown.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

READ_TOOLS = frozenset(
    {"read_file", "grep", "glob", "ls", "list_dir", "list_files", "search", "offload_recall"}
)
SUB_AGENT_TOOLS = frozenset({"task", "sub_agent", "spawn_agent", "delegate", "agent"})
GROWTH_WINDOW = 10  # model calls
RECENT_TOOLS = 5  # the calls whose tools decide "read-heavy"


def read_heavy(recent_tools: Sequence[str]) -> bool:
    """More than half of the calls read, and none is a sub-agent's (the seed's sub-agent
    pattern outranks read-heavy and looks no further ahead than the default)."""
    if any(t in SUB_AGENT_TOOLS for t in recent_tools):
        return False
    return sum(t in READ_TOOLS for t in recent_tools) * 2 > len(recent_tools)


@dataclass(slots=True)
class TriggerInfo:
    max_tokens: int  # the hard limit (the context window)
    threshold_tokens: int  # the compactor's threshold
    current_tokens: int
    growth_rate: float = 0.0  # tokens added per call, over the calls before this one
    read_heavy: bool = False
    in_cooldown: bool = False


@dataclass(slots=True)
class SessionTriggerState:
    """What the trigger remembers about one session (the policy drops it on /new)."""

    cooldown_iterations: int = 3
    iterations: int = 0  # model calls so far
    last_compaction: int | None = None  # the call that compacted last
    tokens: deque[int] = field(default_factory=lambda: deque(maxlen=GROWTH_WINDOW))

    def in_cooldown(self, iteration: int) -> bool:
        if self.last_compaction is None:
            return False
        return 0 <= iteration - self.last_compaction < self.cooldown_iterations

    def info(
        self, tokens: int, recent_tools: Sequence[str], *, max_tokens: int, threshold_tokens: int
    ) -> TriggerInfo:
        """Counts one model call and records ``tokens``; the trigger's view of this call."""
        self.iterations += 1
        seen = self.tokens
        growth = (seen[-1] - seen[0]) / (len(seen) - 1) if len(seen) >= 2 else 0.0
        info = TriggerInfo(
            max_tokens,
            threshold_tokens,
            tokens,
            growth,
            read_heavy(recent_tools[-RECENT_TOOLS:]),
            self.in_cooldown(self.iterations),
        )
        if seen and tokens < seen[-1]:
            # A drop means a compaction happened: growth before it says nothing about after.
            seen.clear()
        seen.append(tokens)
        return info

    def compacted(self) -> None:
        """A compaction happened at the current model call: the cooldown starts."""
        self.last_compaction = self.iterations


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
        ahead = self.read_heavy_lookahead if info.read_heavy else self.lookahead_iterations
        # A shrinking context predicts no crossing: only the threshold itself counts then.
        predicted = info.current_tokens + max(0.0, info.growth_rate) * ahead
        return predicted >= info.threshold_tokens
