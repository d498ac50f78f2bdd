"""The tokens a request carries beyond its messages (tool definitions, the server's
framing) are a number a compactor is given, ``fixed``: it counts them exactly as if the
system message were that many tokens larger, and never sees padded text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness9.config import ContextOptions, db_path
from harness9.context.pipeline import (
    DEFAULT_TARGET,
    STRATEGIES,
    Compactor,
    HybridCompactor,
    MessageBound,
    TokenBudgetCompactor,
    tail_compactor,
)
from harness9.context.policy import ContextPolicy
from harness9.context.view import load_view
from harness9.schema import Message, ToolDefinition
from harness9.store import Manager
from harness9.tokens import BYTES_PER_TOKEN, estimate_tokens, estimate_tool_tokens
from tests.context.test_compaction_properties import histories, texts
from tests.support.history import (
    SYSTEM,
    ScriptedSummarizer,
    call,
    exchanges,
    result,
    user,
    users,
)

# The strategies a user selects, then the pipeline's other configurations.
CONFIGURATIONS = [*STRATEGIES, "hybrid+evict", "message-bound", "protected-tail"]
OUTPUT = "\n".join(f"src/m{i}.py:{i}: def f{i}(x): return x" for i in range(40))


def output(size: int) -> str:
    """A tool's output of ``size`` bytes: grep-like lines of code."""
    return (OUTPUT * (1 + size // len(OUTPUT)))[:size]


@st.composite
def tool_sessions(draw) -> list[Message]:
    """A coding session: asks, then tool calls with outputs up to a few thousand tokens
    (what eviction and stubbing measure)."""
    msgs = [SYSTEM]
    for i in range(draw(st.integers(1, 30))):
        if draw(st.booleans()):
            msgs.append(user(draw(texts)))
        size = draw(st.integers(0, 12_000))
        msgs += [call(f"c{i}"), result(f"c{i}", output(size))]
    return msgs


def configuration(name: str, summarizer: ScriptedSummarizer, window: int, threshold: int):
    if name == "message-bound":
        return MessageBound(max_messages=12, keep_messages=4)
    if name == "protected-tail":
        return tail_compactor(threshold)
    if name == "hybrid+evict":
        return HybridCompactor(summarizer, window, threshold=threshold / window, evict=True)
    return STRATEGIES[name].pipeline(summarizer, window, threshold, DEFAULT_TARGET)


def with_system_tokens(msgs: list[Message], tokens: int) -> list[Message]:
    """``msgs`` whose system message carries ``tokens`` more tokens of text."""
    system = msgs[0]
    return [Message(system.role, system.content + " " * (tokens * BYTES_PER_TOKEN)), *msgs[1:]]


def run(comp: Compactor, msgs: list[Message], force: bool, fixed: int = 0):
    return comp.plan(msgs, force=force, fixed=fixed), comp.compact(msgs, force=force, fixed=fixed)


@pytest.mark.parametrize("name", CONFIGURATIONS)
@given(
    msgs=st.one_of(histories, tool_sessions()),
    window=st.integers(200, 20_000),
    share=st.floats(0.3, 0.95),
    force=st.booleans(),
    fails=st.booleans(),
    summary=texts,
    extra=st.integers(0, 400),
    data=st.data(),
)
def test_fixed_tokens_cut_where_as_many_system_tokens_would(
    name, msgs, window, share, force, fails, summary, extra, data
):
    """Given a system message ``extra`` tokens long beside ``fixed`` tokens (negative down
    to -``extra``), every compactor plans, folds, asks its summariser and reports exactly
    what it does for a system message ``extra + fixed`` tokens long; its messages keep the
    system message it was given."""
    fixed = data.draw(st.integers(-extra, window), label="fixed")
    given_msgs = with_system_tokens(msgs, extra)
    as_text = with_system_tokens(msgs, extra + fixed)

    def make():
        error = RuntimeError("down") if fails else None
        s = ScriptedSummarizer("**Goal:** " + summary, error=error)
        return configuration(name, s, window, max(1, int(window * share))), s

    comp, asked = make()
    plan, res = run(comp, given_msgs, force, fixed)
    comp_text, asked_text = make()
    plan_text, res_text = run(comp_text, as_text, force)

    assert plan == plan_text
    assert res.plan == res_text.plan
    assert (res.summary, res.strategy, res.error) == (
        res_text.summary,
        res_text.strategy,
        res_text.error,
    )
    declined, declined_text = res.declined, res_text.declined
    assert (declined and declined.plan) == (declined_text and declined_text.plan)
    assert res.messages[0] is given_msgs[0]
    assert res.messages[1:] == res_text.messages[1:]
    assert asked.calls == asked_text.calls


def test_a_negative_fixed_part_larger_than_the_system_message_is_counted_exactly():
    """A server that counts 500 tokens less than the estimate (its template drops the tool
    definitions): a 10-token system message cannot shrink by 500, the count can."""
    system = Message("system", "s" * 40)  # 10 tokens
    msgs = [system, *users(20)]  # 20 users of 100 tokens: 2010 tokens

    res = TokenBudgetCompactor(1000, min_tail_messages=1).compact(msgs, fixed=-500)

    assert res.plan.tokens_before == 2010 - 500
    # 10 + 14 * 100 - 500 = 910 fits 1000; a fifteenth message would make it 1010.
    assert res.messages == [system, *msgs[-14:]]
    assert res.plan.tokens_after == 910


def test_fixed_tokens_decide_whether_eviction_alone_is_enough():
    """Eviction brings the request under its target, but with each message's framing the
    load is still over it only when the fixed tokens count: then the results eviction left
    are stubbed too, as for a system message carrying those tokens as text."""
    msgs = [SYSTEM, user("fix it")]
    for i, size in enumerate([6000] * 4 + [800] * 3):
        msgs += [call(f"c{i}"), result(f"c{i}", output(size))]
    comp = HybridCompactor(None, 10_000, evict=True)

    res = comp.compact(msgs, fixed=1407)

    assert res.strategy == "hybrid:stubs"
    assert [m.content.split(" ")[0] for m in res.messages[3:11:2]] == ["[evicted]"] * 3 + [
        "[stubbed]"
    ]
    assert res.messages[1:] == comp.compact(with_system_tokens(msgs, 1407)).messages[1:]


class Recording:
    """A real compactor, recording the system message and the fixed tokens each of its
    ``plan`` and ``compact`` calls is handed."""

    def __init__(self, inner: Compactor) -> None:
        self.inner, self.strategy, self.threshold_tokens = inner, inner.strategy, 0
        self.seen: list[tuple[str, Message, int]] = []

    def plan(self, msgs, *, force=False, fixed=0):
        self.seen.append(("plan", msgs[0], fixed))
        return self.inner.plan(msgs, force=force, fixed=fixed)

    def compact(self, msgs, *, force=False, fixed=0, instructions=None, on_progress=None):
        self.seen.append(("compact", msgs[0], fixed))
        return self.inner.compact(msgs, force=force, fixed=fixed)


TOOLS = [ToolDefinition("bash", "Runs a shell command. " * 40)]


@pytest.mark.parametrize("served", [None, 1300, 600])  # per 1000 estimated tokens
def test_the_policy_hands_its_compactor_the_view_and_the_fixed_tokens_as_a_number(served):
    """The compactor gets the view's own system message, and as ``fixed`` the tool
    definitions' estimate; its compaction also what the server counts beyond the estimate
    (the framing, fewer tokens when the server counts less)."""
    recording = Recording(TokenBudgetCompactor(3000))
    opts = ContextOptions(strategy="budget", smart_triggers=False, offload=False)
    policy = ContextPolicy(
        opts, ScriptedSummarizer(), 8000, compactor_factory=lambda s, w, t: recording
    )
    if served is not None:
        policy.count.observe(1000, served)
    with Manager(db_path()) as m:
        session = m.new_session()
        session.add_messages(exchanges(12, 400))
        view = load_view(session, SYSTEM).messages
        estimate = estimate_tokens(view) + estimate_tool_tokens(TOOLS)
        framing = policy.count.count(estimate) - estimate

        assert policy.compact(session, SYSTEM, tools=TOOLS, force=True) is not None

    tools = estimate_tool_tokens(TOOLS)
    assert [f for kind, _, f in recording.seen if kind == "plan"] == [tools]
    assert [f for kind, _, f in recording.seen if kind == "compact"] == [tools + framing]
    assert all(system == view[0] for _, system, _ in recording.seen)
    assert framing == {None: 0, 1300: estimate * 3 // 10, 600: -400}[served]
