"""Invariants of repair and of every compactor over generated histories.

Histories mix plain turns, single and parallel tool calls, results in shuffled
order, missing results (interrupted calls), late results after an interrupt,
duplicate and orphan results, reused call ids, earlier summaries and CJK text.

What "keeps the newest messages verbatim" means here, precisely: let T be the
newest k input messages, k = min(min tail, len - 1) (for the window: the
window's own size, max_messages - 1, is the protected tail). Then
(1) every non-tool message of T is in the output, as the same object, in the
    same order, and they are the output's last non-tool messages;
(2) every tool message of T that answers a call standing right before its
    block of results in the input (the normal case) is in the output.
Tool messages of T that the repair would drop from any suffix (orphans,
duplicates, late results whose call was folded) are exempt: that is the
"modulo orphans removed by repair".
"""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from harness9.context import (
    SlidingWindowCompactor,
    SummarizationCompactor,
    TokenBudgetCompactor,
    estimate_tokens,
    find_cut,
    is_valid_tool_sequence,
    repair_orphaned_tool_pairs,
)
from harness9.context.pipeline import KeptSizer, MessageBound, tail_compactor, topic_compactor
from harness9.context.policy import build_compactor
from harness9.context.stubs import match_tool_results, summary_message
from harness9.context.topics import TopicDetector
from harness9.schema import SUMMARY_PREFIX, Message
from harness9.tokens import message_bytes
from tests.support.history import SYSTEM, ScriptedSummarizer, asst, call, result, user

texts = st.one_of(
    st.text(alphabet="abcdefgh \n", max_size=300),
    st.text(alphabet="上下文压缩", max_size=60),
    st.integers(0, 4000).map(lambda n: "big " * (n // 4)),  # tool output, pasted files
)
ids = st.sampled_from(["call_0", "call_1", "a", "b", "c", "d", "e", "f"])


@st.composite
def turns(draw) -> list[Message]:
    kind = draw(st.sampled_from(["user", "asst", "tools", "tools", "orphan", "summary"]))
    if kind == "user":
        return [user(draw(texts))]
    if kind == "asst":
        return [asst(draw(texts))]
    if kind == "orphan":
        return [result(draw(ids), draw(texts))]
    if kind == "summary":
        return [summary_message(draw(texts))]
    call_ids = draw(st.lists(ids, min_size=1, max_size=3, unique=True))
    msgs = [call(*call_ids)]
    answered = draw(st.permutations(call_ids))
    answered = answered[: draw(st.integers(0, len(answered)))]
    results = [result(i, draw(texts)) for i in answered]
    if draw(st.booleans()) and results:  # an interrupt before some results
        at = draw(st.integers(0, len(results)))
        results.insert(at, user("interrupt: " + draw(texts)))
    if draw(st.booleans()) and answered:  # a duplicate answer
        results.append(result(answered[0], "dup"))
    return msgs + results


histories = st.lists(turns(), max_size=25).map(lambda ts: [SYSTEM] + [m for t in ts for m in t])


def protected(msgs: list[Message], k: int) -> tuple[list[Message], list[Message]]:
    """(non-tool messages, in-block results) among the newest k messages."""
    start = len(msgs) - k
    slots = iter(match_tool_results(msgs))
    in_block: set[int] = set()
    for owner, m in enumerate(msgs):
        if m.role != "assistant":
            continue
        for r in [next(slots) for _ in m.tool_calls]:
            if r >= 0 and all(x.role == "tool" for x in msgs[owner + 1 : r]):
                in_block.add(r)
    tail = range(start, len(msgs))
    plain = [msgs[i] for i in tail if msgs[i].role != "tool"]
    results = [msgs[i] for i in tail if i in in_block]
    return plain, results


def assert_invariants(msgs: list[Message], out: list[Message], k: int) -> None:
    assert out[0] is msgs[0]
    assert is_valid_tool_sequence(out)
    plain, results = protected(msgs, min(k, len(msgs) - 1))
    out_plain = [m for m in out if m.role != "tool"]
    if plain:
        assert all(a is b for a, b in zip(out_plain[-len(plain) :], plain, strict=True))
    out_ids = {id(m) for m in out}
    assert all(id(r) in out_ids for r in results)


def protected_tail_tokens(msgs: list[Message], k: int) -> int:
    return estimate_tokens(repair_orphaned_tool_pairs([msgs[0], *msgs[find_cut(msgs, k) :]]))


@given(histories)
def test_repair_output_is_valid_and_idempotent(msgs):
    snapshot = copy.deepcopy(msgs)
    once = repair_orphaned_tool_pairs(msgs)
    assert is_valid_tool_sequence(once)
    assert repair_orphaned_tool_pairs(once) == once
    assert msgs == snapshot


@given(histories)
def test_repair_keeps_every_non_tool_message_in_order(msgs):
    out = repair_orphaned_tool_pairs(msgs)
    assert [m for m in out if m.role != "tool"] == [m for m in msgs if m.role != "tool"]


@given(histories, st.integers(1, 3000), st.integers(0, 8), st.booleans())
def test_token_budget_invariants(msgs, max_tokens, min_tail, force):
    snapshot = copy.deepcopy(msgs)
    compactor = TokenBudgetCompactor(max_tokens, min_tail_messages=min_tail)
    res = compactor.compact(msgs, force=force)
    assert msgs == snapshot
    assert_invariants(msgs, res.messages, min_tail)
    assert res.plan.tokens_after == estimate_tokens(res.messages)
    if protected_tail_tokens(msgs, min_tail) <= max_tokens:
        assert estimate_tokens(res.messages) <= max_tokens


@given(histories, st.integers(1, 40), st.booleans())
def test_sliding_window_invariants(msgs, max_messages, force):
    snapshot = copy.deepcopy(msgs)
    compactor = SlidingWindowCompactor(max_messages)
    res = compactor.compact(msgs, force=force)
    assert msgs == snapshot
    k = max_messages - 1  # forcing keeps the same window
    assert_invariants(msgs, res.messages, k)
    assert res.plan.tokens_after == estimate_tokens(res.messages)
    # Only messages the cut rule pulls in to keep a results block whole exceed the window.
    assert sum(m.role != "tool" for m in res.messages) <= max(max_messages, 1 + k + 1)


@given(histories, st.integers(1, 3000), st.integers(0, 8), st.booleans(), st.booleans())
def test_summarization_invariants(msgs, max_tokens, min_tail, force, fails):
    snapshot = copy.deepcopy(msgs)
    fake = ScriptedSummarizer("**Goal:** g.", error=RuntimeError("down") if fails else None)
    compactor = SummarizationCompactor(fake, max_tokens, min_tail_messages=min_tail)
    res = compactor.compact(msgs, force=force)
    assert msgs == snapshot
    assert_invariants(msgs, res.messages, min_tail)
    tail = protected_tail_tokens(msgs, min_tail)
    if res.summary is not None:
        assert res.messages[1] == Message("user", SUMMARY_PREFIX + "**Goal:** g.")
        tail += estimate_tokens([res.messages[1]]) + 1  # + 1: a second rounding
    else:
        # An earlier summary is never dropped (it is all that is left of what it folded),
        # and a head of nothing else is not summarised again: it counts like the tail.
        earlier = [m for m in res.messages[1:] if m.content.startswith(SUMMARY_PREFIX)]
        assert all(m in msgs for m in earlier)
        tail += estimate_tokens(earlier) + 1 if earlier else 0
    if tail <= max_tokens:
        assert estimate_tokens(res.messages) <= max_tokens


@given(histories, st.integers(0, 8))
def test_chunked_summarization_stays_within_the_summariser_window(msgs, min_tail):
    window = 1200
    fake = ScriptedSummarizer(lambda p, n: f"**Goal:** part {n}.", window=window * 60 // 100)
    compactor = SummarizationCompactor(
        fake, 50, min_tail_messages=min_tail, summarizer_window=window
    )
    res = compactor.compact(msgs, force=True)
    assert res.error is None  # the fake would refuse an oversized prompt
    assert_invariants(msgs, res.messages, min_tail)


@given(histories, st.data())
def test_kept_sizer_is_exact_for_every_cut_from_its_start(msgs, data):
    sizes = [message_bytes(m) for m in msgs]
    start = data.draw(st.integers(1, max(1, len(msgs) - 1)))
    sizer = KeptSizer(msgs, sizes, start)
    for cut in range(start, len(msgs) + 1):
        kept = repair_orphaned_tool_pairs([msgs[0], *msgs[cut:]])
        assert sizer.kept_bytes(cut) == sum(message_bytes(m) for m in kept)


# The strategies a user can select, then the pipeline's other configurations.
CONFIGURATIONS = ["hybrid", "summarize", "budget", "window", "evict", "fold", "topic"]


def configuration(name: str, summarizer, window: int, threshold: int):
    if name == "fold":
        return MessageBound(max_messages=12, keep_messages=4)
    if name == "topic":
        return topic_compactor(TopicDetector(min_segment_size=2), summarizer)
    return build_compactor(name, summarizer, window, threshold_tokens=threshold)


@given(
    histories,
    st.sampled_from(CONFIGURATIONS),
    st.integers(200, 20_000),
    st.floats(0.3, 0.95),
    st.booleans(),
    st.booleans(),
    texts,
)
def test_every_configuration_returns_a_valid_sequence_no_larger_than_its_input(
    msgs, strategy, window, share, force, fails, summary
):
    """The default compactor and every configuration of the pipeline: whatever they
    fold, the output is a valid tool sequence, the input is untouched, and the
    result is never larger than the input (repaired, as it would be sent)."""
    snapshot = copy.deepcopy(msgs)
    fake = ScriptedSummarizer("**Goal:** " + summary, error=RuntimeError("down") if fails else None)
    compactor = configuration(strategy, fake, window, int(window * share))

    res = compactor.compact(msgs, force=force)

    assert msgs == snapshot
    assert res.messages[0] is msgs[0]
    assert is_valid_tool_sequence(res.messages)
    assert estimate_tokens(res.messages) <= estimate_tokens(repair_orphaned_tool_pairs(msgs))


@given(histories, st.integers(1, 3000))
def test_the_last_resort_keeps_a_valid_sequence_and_never_grows(msgs, max_tokens):
    snapshot = copy.deepcopy(msgs)

    res = tail_compactor(max_tokens).compact(msgs)

    assert msgs == snapshot
    assert is_valid_tool_sequence(res.messages)
    assert estimate_tokens(res.messages) <= estimate_tokens(repair_orphaned_tool_pairs(msgs))
