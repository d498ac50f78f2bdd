"""What the next request would carry, by part: ``/context``'s table and the reason ``/compact``
gives when nothing is left to fold.

A report, not a decision: it measures the request the policy would build now if nothing were
compacted (``ContextPolicy.uncompacted_request``) and adds the engine's own counts of the
summaries prepared ahead (harness9.engine.prepared), which the policy never reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness9.context.policy import ContextPolicy
from harness9.context.stubs import is_summary
from harness9.engine.prepared import AheadOfThreshold
from harness9.request import Request
from harness9.tokens import estimate_tokens, estimate_tool_tokens

__all__ = ["ContextBreakdown", "measure"]


@dataclass(slots=True)
class ContextBreakdown:
    """What one request would carry, by part (for /context)."""

    system: int
    tools: int
    summary: int
    messages: int
    message_count: int
    context_window: int
    threshold: int
    served: int | None = None  # the server's expected count (None: none reported yet)
    prepared_applied: int = 0  # summaries prepared in the background: applied, thrown away
    prepared_discarded: int = 0
    preparing: bool = False

    @property
    def total(self) -> int:
        return self.system + self.tools + self.summary + self.messages

    @property
    def shown(self) -> int:
        """The size the token lines show: the server's count once known, else the estimate."""
        return self.total if self.served is None else self.served


def measure(
    request: Request,
    policy: ContextPolicy,
    prepared: AheadOfThreshold | None,
    session_id: str,
) -> ContextBreakdown:
    """``request`` (the system message first) by part, against ``policy``'s window, threshold
    and model of the server's count; with ``prepared``'s counts for ``session_id``."""
    msgs = request.messages
    system = estimate_tokens(msgs[:1])
    summary = sum(estimate_tokens([m]) for m in request.history if is_summary(m))
    rest = max(estimate_tokens(msgs) - system - summary, 0)
    tools = estimate_tool_tokens(request.tools)
    window, threshold, n = policy.context_window, policy.threshold_tokens, len(msgs) - 1
    b = ContextBreakdown(system, tools, summary, rest, n, window, threshold)
    b.served = policy.count.count(b.total) if policy.count.known else None
    if prepared is not None:
        b.prepared_applied = prepared.applied.get(session_id, 0)
        b.prepared_discarded = prepared.discarded.get(session_id, 0)
        b.preparing = prepared.preparing(session_id)
    return b
