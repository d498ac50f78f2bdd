"""A server that counts framing beyond the estimate (roles, content blocks, call ids: a
fixed number of tokens a message, as the scripted servers of the wire tests do with bytes
/ 4 of each message's JSON) is counted message by message: a view of a few large messages
carries the framing of those few, not the framing a view of that size had while it was made
of many small ones.
"""

from __future__ import annotations

import pytest

from harness9.config import ContextOptions, db_path
from harness9.context.policy import ContextPolicy, Request
from harness9.schema import Message
from harness9.store import Manager
from tests.support.history import ScriptedSummarizer, call, result

SYSTEM = Message("system", "you are a test agent")
WINDOW, THRESHOLD, FRAMING = 10_000, 8_000, 40
# The small results of the first calls, in bytes (varied, as a session's are).
SMALL = (120, 400, 60, 900, 250, 700, 180, 520, 90, 1100, 300, 640)


def served(request: Request) -> int:
    """The scripted server's count of ``request``: its estimate and 40 tokens a message."""
    return request.estimated + FRAMING * len(request.messages)


@pytest.mark.parametrize("strategy", ["window", "evict", "hybrid"])
def test_a_large_result_after_many_small_ones_is_counted_with_its_own_framing(strategy):
    # Twelve calls of small results teach the server's count; framing is most of it (a
    # ratio alone would read it as 2.5 times the estimate). Then one 5,000-token result:
    # the server counts about 7,400, under the 8,000-token threshold, and nothing folds.
    policy = ContextPolicy(ContextOptions(strategy=strategy), ScriptedSummarizer(), WINDOW)
    with Manager(db_path()) as m:
        session = m.new_session()
        session.add_messages([Message("user", "read the logs")])
        for i, size in enumerate(SMALL):
            session.add_messages([call(f"c{i}"), result(f"c{i}", "x" * size)])
            request = policy.prepare(session, SYSTEM, [], ["bash"])
            policy.observe_usage(request, served(request))
        session.add_messages([call("big"), result("big", "y" * 20_000)])

        request = policy.prepare(session, SYSTEM, [], ["bash"])

        assert session.latest_checkpoint() is None
        assert served(request) < THRESHOLD
        assert request.messages[-1].content == "y" * 20_000
