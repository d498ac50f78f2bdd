"""What compaction does: one ``Pipeline`` of ordered, pure steps (gate, reduce, cut, fold,
fallback; ``Steps`` configures them) and ``STRATEGIES``, the one table from a strategy's
name to its pipeline. Also the ``Compactor`` seam, its plan and result.
docs/architecture.md, 'The compaction pipeline', walks the steps.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Protocol, runtime_checkable

from harness9.context.facts import (
    error_lines,
    extract_fingerprint,
    find_declarations,
    find_paths,
    has_decision,
    has_error,
    has_path,
    keep_facts,
)
from harness9.context.stubs import (
    HANDLE_ALLOWANCE_BYTES,
    awaits_handle,
    evicted_stub,
    is_offloaded,
    is_stub,
    is_summary,
    is_valid_tool_sequence,
    match_tool_results,
    repair_orphaned_tool_pairs,
    stub_arguments,
    stub_for,
    stub_message,
    summary_message,
    summary_of,
)
from harness9.context.summarize import (
    SUMMARY_ESTIMATE_CAP,
    SUMMARY_ROOM_DIVISOR,
    ProgressCallback,
    SpanSummarizer,
    Summarizer,
    clipped,
    marker_summarizer,
    structured_summary,
    summary_estimate,
)
from harness9.context.topics import TopicDetector, TopicSegment
from harness9.schema import (
    ROLE_ASSISTANT,
    ROLE_SYSTEM,
    ROLE_TOOL,
    ROLE_USER,
    SUMMARY_PREFIX,
    TRUNCATED_STUB,
    Message,
)
from harness9.tokens import BYTES_PER_TOKEN, estimate_tokens, message_bytes, utf8_len
from harness9.tool_output import GREP_LINE_RE, stats_of, summarize_output

# -- the Compactor seam, its plan and result, the cut rule ---------------------------------


@dataclass(slots=True)
class CompactionPlan:
    would_compact: bool
    strategy: str
    cut: int  # msgs[1:cut] are folded/dropped, msgs[cut:] kept (before repair); 1: nothing folds
    tokens_before: int  # estimate_tokens(msgs) + fixed
    tokens_after: int  # estimate of the result, + fixed (a summary's is estimated by ``plan``)
    threshold: int  # the compactor's threshold_tokens
    too_small: bool = False  # it would save too little (the policy's rule): nothing is made


@dataclass(slots=True)
class CompactionResult:
    messages: list[Message]  # the new view, repaired
    plan: CompactionPlan
    summary: str | None  # summary text without SUMMARY_PREFIX when one was produced
    strategy: str  # what actually ran ("budget" when summarize fell back)
    error: str | None = None  # why a fallback happened, if it did
    kept_previous_summary: bool = False  # msgs[1], an earlier summary, kept (a fallback)
    # A summary made but larger than its input: kept for a caller that cuts further anyway.
    declined: CompactionResult | None = None
    # The facts ``summary`` keeps, as its checkpoint stores them (facts.keep_facts).
    facts: list[str] | None = None


@runtime_checkable
class Compactor(Protocol):
    """The one compaction seam; pure. ``threshold_tokens``: compacts unforced over it (0:
    not gated by tokens). ``plan``: what ``compact`` would fold, no model call. ``compact``:
    ``instructions`` focus a summary, ``on_progress`` hears each summariser call. An input
    not starting with the system message is returned unchanged, any other output repaired.
    ``fixed``: tokens beyond ``msgs`` (tools, framing; may be < 0), counted as system tokens.
    """

    strategy: str
    threshold_tokens: int

    def plan(
        self, msgs: Sequence[Message], *, force: bool = False, fixed: int = 0
    ) -> CompactionPlan: ...

    def compact(
        self,
        msgs: Sequence[Message],
        *,
        force: bool = False,
        fixed: int = 0,
        instructions: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> CompactionResult: ...


def starts_with_system(msgs: Sequence[Message]) -> bool:
    return bool(msgs) and msgs[0].role == ROLE_SYSTEM


def find_cut(msgs: Sequence[Message], tail_len: int) -> int:
    """Where the kept part begins when keeping the newest ``tail_len`` messages (>= 1)."""
    return extend_cut(msgs, max(1, len(msgs) - max(tail_len, 0)))


def extend_cut(msgs: Sequence[Message], cut: int) -> int:
    """``cut`` moved back over the tool results it would begin with, to their call."""
    if cut >= len(msgs) or msgs[cut].role != ROLE_TOOL:
        return cut
    first = cut
    while first > 1 and msgs[first - 1].role == ROLE_TOOL:
        first -= 1
    caller = first - 1
    if caller >= 1 and msgs[caller].role == ROLE_ASSISTANT and msgs[caller].tool_calls:
        return caller
    return cut


class KeptSizer:
    """Exact token estimate of ``repair([msgs[0]] + msgs[cut:])`` for any cut >= start, in
    O(1) after one pass (a difference array counts the results a cut separates from calls)."""

    __slots__ = ("_start", "_straddle", "_suffix", "_system_bytes")

    def __init__(self, msgs: Sequence[Message], sizes: Sequence[int], start: int = 1) -> None:
        part = msgs[start:]
        result = match_tool_results(part)
        stub_bytes = len(TRUNCATED_STUB.encode("utf-8"))
        # What each message adds to a repaired suffix: results count with their call.
        eff = [0 if m.role == ROLE_TOOL else sizes[start + j] for j, m in enumerate(part)]
        # A result whose call lies before the cut is dropped: for cuts in (i, r].
        diff = [0] * (len(part) + 1)
        slot = 0  # calls are numbered in history order, as match_tool_results does
        for i, m in enumerate(part):
            if m.role != ROLE_ASSISTANT or not m.tool_calls:
                continue
            for tc in m.tool_calls:
                r = result[slot]
                slot += 1
                if r < 0:
                    eff[i] += stub_bytes + len(tc.id.encode("utf-8", "surrogatepass"))
                else:
                    eff[r] = b = sizes[start + r]
                    diff[i + 1] += b
                    diff[r + 1] -= b
        self._start = start
        self._suffix = [*accumulate(reversed(eff), initial=0)][::-1]
        self._straddle = [*accumulate(diff)]
        self._system_bytes = sizes[0]

    def kept_bytes(self, cut: int) -> int:
        j = cut - self._start
        if j < 0:
            raise ValueError(f"cut {cut} is before the measured part (from {self._start})")
        return self._system_bytes + self._suffix[j] - self._straddle[j]

    def kept_tokens(self, cut: int) -> int:
        return self.kept_bytes(cut) // BYTES_PER_TOKEN


# -- step 2: eviction of old tool results by density ---------------------------------------

EVICTED_ERROR_LINES = 3  # the last error lines of a result are kept in its stub
# Bytes of names and paths a stub may list (~80 tokens): small next to what is evicted.
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
    """What a result is worth keeping: errors, decisions and paths up, bulk down."""
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


def tool_groups(msgs: Sequence[Message], keep_newest: int = 0) -> list[ToolGroup]:
    """Assistant-with-calls messages and their results as the repair matches them, oldest
    first, but for the newest ``keep_newest``."""
    slots = match_tool_results(msgs)
    groups: list[ToolGroup] = []
    s = 0
    for i, m in enumerate(msgs):
        if m.role == ROLE_ASSISTANT and m.tool_calls:
            n = len(m.tool_calls)
            groups.append(ToolGroup(i, sorted(r for r in slots[s : s + n] if r >= 0)))
            s += n
    return groups[: max(0, len(groups) - keep_newest)]


def _fact_lines(content: str, body: str) -> list[str]:
    """What the rule summary ``body`` lacks: the last error lines, then names and paths."""
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
    messages: Sequence[Message], keep_groups: int = 3, target_tokens: int = 0, fixed: int = 0
) -> list[Message]:
    """A copy in which, outside the newest ``keep_groups`` tool groups, calls' long arguments
    are stubbed, then results replaced by eviction stubs, lowest score (then oldest) first,
    until the estimate (+ ``fixed``) is at most ``target_tokens``. Roles, ids and order stay."""
    out = list(messages)
    total = sum(message_bytes(m) for m in out) + fixed * BYTES_PER_TOKEN
    if total // BYTES_PER_TOKEN <= target_tokens:
        return out
    old = tool_groups(out, keep_groups)
    # Arguments first: what a write_file wrote is on disk, the stub keeps the handle.
    for g in old:
        if total // BYTES_PER_TOKEN <= target_tokens:
            return out
        msg = out[g.call_index]
        out[g.call_index] = stub_arguments(msg)
        total -= message_bytes(msg) - message_bytes(out[g.call_index])
    # Each old result's own call (ids may be reused across turns).
    call_of = {
        i: tc
        for g in old
        for i in g.result_indices
        for tc in out[g.call_index].tool_calls
        if tc.id == out[i].tool_call_id
    }
    candidates = sorted(
        (density_score(out[i]), i) for i in call_of if not (is_offloaded(out[i]) or is_stub(out[i]))
    )
    for _, i in candidates:
        if total // BYTES_PER_TOKEN <= target_tokens:
            break
        msg, call = out[i], call_of[i]
        stats = stats_of(msg.content)
        # The run's facts as stored with the result (its exit code); None for a row stored
        # before they were kept, whose summary then reads its text.
        body = summarize_output(call.name, call.arguments, stats, metadata=msg.metadata, brief=True)
        body = "\n".join([body, *_fact_lines(msg.content, body)])
        stub = stub_message(evicted_stub(body, stats.tokens), msg)
        if message_bytes(stub) >= message_bytes(msg):  # a short result: no smaller as a stub
            continue
        total -= message_bytes(msg) - message_bytes(stub)
        out[i] = stub
    return out


# -- the pipeline --------------------------------------------------------------------------

DEFAULT_MIN_TAIL = 6
# The window share the ``*_for_window`` helpers compact at (``compaction.threshold``'s
# default); the rest is for tool schemas, output and estimate error.
BUDGET_PERCENT = 80
DEFAULT_THRESHOLD = BUDGET_PERCENT / 100
DEFAULT_TARGET = 0.4  # the ``compaction.target`` option's default
STRATEGY_HYBRID = "hybrid"
STRATEGY_STUBS = "hybrid:stubs"  # what ran when stubbing alone was enough
STRATEGY_TOPIC = "topic"
# A compaction (or a reduction) saving less than this share is not worth the cache it breaks.
MIN_COMPACTION_GAIN = 0.05
# What an API adds per message beyond its text (role, call ids, separators).
MESSAGE_OVERHEAD_TOKENS = 8
# Window shares of the summary's "Preserved facts" and of the recall index: small beside
# the target, room for ~100 lines each on a 128K window.
PRESERVED_SHARE_HYBRID = 0.06
RECALL_SHARE = 0.06
EVICT_SHARE = 0.7  # eviction evicts down to this share of its threshold
# When eviction is not enough, ``evict`` folds to this share of its threshold (hybrid's
# target at the default threshold); the folded head's facts take the room up to EVICT_SHARE.
EVICT_FOLD_SHARE = 0.5
# Topic isolation folds when the history has more than TOPIC_MIN_HISTORY messages and the
# newest topic at most NEW_TOPIC_MESSAGES: a new topic has just begun.
TOPIC_MIN_HISTORY = 10
NEW_TOPIC_MESSAGES = 2
FOLDED_HEADING = "## Earlier messages (tool calls folded into the recall index)"
ASSISTANT_CHARS = 400  # a folded assistant message keeps this many characters


@dataclass(frozen=True, slots=True)
class Steps:  # a pipeline's configuration (docs/architecture.md, 'The compaction pipeline')
    strategy: str  # what a plan and a result that folds say ran
    threshold: int  # the gate in tokens (0: none); ``max_messages`` gates too, unforceable
    evict_to: int | None = None  # reduce: evict by density down to this (0 when forced)
    stub: bool = False  # reduce: then stub the old tool results
    keep_groups: int = 3  # reduce: the newest tool groups stay whole
    enough_at: int = 0  # the reduction alone is the result at or under this load
    # Where the kept tail begins: "fit" (the newest messages ``target`` holds), "tail" (all
    # but ``min_tail``), "budget" (the largest suffix under ``target``), "window" (the newest
    # ``max_messages - 1``), "topic" (the newest topic) or "fallback" (step 5 at once).
    cut: str = "tail"
    target: int = 0  # tokens the cut aims for ("fit", "budget")
    min_tail: int = DEFAULT_MIN_TAIL  # newest messages always kept, by step 5 too
    max_messages: int = 0  # a gate when set; "window": the window
    # The head is dropped (""), or becomes a "plain" summary (the five-section template), a
    # "structured" one (the marker prompt, its facts fingerprinted before step 2) or a
    # "folded" one (the user's and assistant's words, no model call).
    summary: str = ""
    preserved_budget: int | None = None  # tokens of the summary's "Preserved facts"
    words_budget: int | None = None  # tokens of a "folded" summary's words (None: all)
    fallback_to: int = 0  # step 5: a failed summary truncates to this (0: nothing folds)


class Pipeline:
    """The one ``Compactor``: runs ``steps``, summarising in chunks that fit ``window``."""

    def __init__(
        self,
        steps: Steps,
        summarizer: Summarizer | None = None,
        *,
        window: int | None = None,
        fallback: Compactor | None = None,
        detector: TopicDetector | None = None,
    ) -> None:
        self.steps, self.strategy, self.threshold_tokens = steps, steps.strategy, steps.threshold
        self.window, self.detector = window, detector
        self.span: SpanSummarizer | None = None
        if summarizer is not None and steps.summary == "structured":
            self.span = marker_summarizer(summarizer, window=window)
        elif summarizer is not None and steps.summary == "plain":
            self.span = SpanSummarizer(summarizer, window=window)
        if fallback is None and steps.fallback_to:
            fallback = TokenBudgetCompactor(steps.fallback_to, steps.min_tail)
        self.fallback = fallback

    def plan(
        self, msgs: Sequence[Message], *, force: bool = False, fixed: int = 0
    ) -> CompactionPlan:
        return self._plan(msgs, force, fixed)[0]

    def compact(
        self,
        msgs: Sequence[Message],
        *,
        force: bool = False,
        fixed: int = 0,
        instructions: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> CompactionResult:
        plan, reduced = self._plan(msgs, force, fixed)
        s = self.steps
        if not plan.would_compact:
            out = repair_orphaned_tool_pairs(msgs) if starts_with_system(msgs) else list(msgs)
            return CompactionResult(out, plan, None, s.strategy)
        if s.cut == "fallback":  # the fallback's truncation, reported as this strategy
            res = self._failed(reduced, plan, False, None, fixed)
            res.plan.strategy = res.strategy = s.strategy
            res.plan.tokens_before = plan.tokens_before
            res.plan.tokens_after = estimate_tokens(res.messages) + fixed
            res.plan.would_compact = res.plan.tokens_after < plan.tokens_before
            return res
        if plan.cut > 1 and s.summary:
            res = self._fold(msgs, reduced, plan, force, fixed, instructions, on_progress)
            return settled(msgs, res, fixed)
        out = repair_orphaned_tool_pairs([reduced[0], *reduced[plan.cut :]])
        return CompactionResult(out, plan, None, plan.strategy)

    def _plan(
        self, msgs: Sequence[Message], force: bool, fixed: int
    ) -> tuple[CompactionPlan, list[Message]]:
        s = self.steps  # the plan, and the history as step 2 leaves it; ``fixed``: sizes[0]
        history = msgs if isinstance(msgs, list) else list(msgs)
        sizes = [message_bytes(m) for m in msgs]
        before = (sum(sizes) + fixed * BYTES_PER_TOKEN) // BYTES_PER_TOKEN
        if not starts_with_system(msgs):
            return CompactionPlan(False, s.strategy, 1, before, before, s.threshold), history
        force = force and not s.max_messages  # a bound in messages is the promise
        if not (force or self._due(msgs, before, fixed)):
            return self._unchanged(msgs, before, fixed), history
        sizes[0] += fixed * BYTES_PER_TOKEN
        reduced, after, name = history, before, s.strategy
        if s.evict_to is not None or s.stub:
            reduced = self._reduce(history, force, fixed)
            sizes = [message_bytes(m) for m in reduced]
            sizes[0] += fixed * BYTES_PER_TOKEN
            after = (sum(sizes) + _new_stubs(reduced) * HANDLE_ALLOWANCE_BYTES) // BYTES_PER_TOKEN
            name = f"{s.strategy}:stubs" if s.stub else s.strategy
        if s.cut == "fallback":
            return CompactionPlan(True, s.strategy, 1, before, after, s.threshold), reduced
        # The reduction alone is the result when its load (with each message's framing:
        # stubs make messages small and many) is under ``enough_at`` and it saves enough.
        load = after + MESSAGE_OVERHEAD_TOKENS * len(reduced)
        enough = load <= s.enough_at and after < before * (1 - MIN_COMPACTION_GAIN)
        cut = 1 if enough else self._cut(reduced, sizes, before, force)
        if cut <= 1 and reduced is history:
            return self._unchanged(msgs, before, fixed), reduced
        if cut <= 1:
            return CompactionPlan(after < before, name, 1, before, after, s.threshold), reduced
        kept = KeptSizer(reduced, sizes, cut).kept_tokens(cut)
        kept += _new_stubs(reduced[cut:]) * HANDLE_ALLOWANCE_BYTES // BYTES_PER_TOKEN
        if s.summary:
            head = estimate_tokens(reduced[1:cut])
            folded = s.summary == "folded"  # at most the head's words, no model call
            kept += min(head, SUMMARY_ESTIMATE_CAP) if folded else summary_estimate(head)
            kept += len(SUMMARY_PREFIX) // BYTES_PER_TOKEN
        return CompactionPlan(True, s.strategy, cut, before, kept, s.threshold), reduced

    def _unchanged(self, msgs: Sequence[Message], before: int, fixed: int) -> CompactionPlan:
        s, after = self.steps, _repaired(msgs, before, fixed)
        return CompactionPlan(False, s.strategy, 1, before, after, s.threshold)

    def _due(self, msgs: Sequence[Message], before: int, fixed: int) -> bool:
        """Step 1: a new topic, over ``max_messages``, or over the threshold (or repaired)."""
        s = self.steps
        if s.cut == "topic":
            segments = self._segments(msgs)
            new_topic = len(segments) >= 2 and segments[-1].message_count <= NEW_TOPIC_MESSAGES
            return new_topic and len(msgs) - 1 > TOPIC_MIN_HISTORY
        if s.max_messages and len(msgs) > s.max_messages:
            return True
        return before > s.threshold > 0 or _repaired(msgs, before, fixed) > s.threshold > 0

    def _reduce(self, msgs: list[Message], force: bool, fixed: int) -> list[Message]:
        s, out = self.steps, msgs
        if s.evict_to is not None:
            out = evict_by_density(out, s.keep_groups, 0 if force else s.evict_to, fixed)
            # Eviction alone brought the load under ``enough_at``: nothing more is stubbed.
            if estimate_tokens(out) + fixed + MESSAGE_OVERHEAD_TOKENS * len(out) <= s.enough_at:
                return out
        return stub_old_results(out, s.keep_groups) if s.stub else out

    def _cut(self, msgs: Sequence[Message], sizes: list[int], before: int, force: bool) -> int:
        """Step 3: where the kept tail begins in ``msgs`` (1: nothing is cut)."""
        s = self.steps
        if s.cut == "budget":
            target = min(s.target, before // 2) if force else s.target
            return budget_cut(msgs, sizes, target, s.min_tail)
        if s.cut == "window":
            return window_cut(msgs, s.max_messages, s.min_tail, before > s.threshold > 0)
        if s.cut == "topic":
            segments = self._segments(msgs)
            return segments[-1].start_idx if len(segments) >= 2 else 1
        cut = find_cut(msgs, s.min_tail)
        if s.cut == "fit":
            fit = fit_cut(msgs, sizes, s.target, s.min_tail)
            cut = fit if fit > 1 or not force else cut
        # A head of nothing but earlier summaries: folding it is a model call for nothing.
        return 1 if all(map(is_summary, msgs[1:cut])) else cut

    def _segments(self, msgs: Sequence[Message]) -> list[TopicSegment]:
        return self.detector.detect(msgs) if self.detector is not None else []

    def _fold(
        self,
        msgs: Sequence[Message],
        reduced: list[Message],
        plan: CompactionPlan,
        force: bool,
        fixed: int,
        instructions: str | None,
        on_progress: ProgressCallback | None,
    ) -> CompactionResult:
        """Step 4: ``reduced[1:cut]`` becomes one summary; its facts are fingerprinted from
        ``msgs[1:cut]`` (step 2 keeps positions)."""
        s, cut, span, head = self.steps, plan.cut, self.span, reduced[1 : plan.cut]
        # The model's text: at most half the room the threshold leaves beside the system.
        room = s.threshold - estimate_tokens(reduced[:1]) - fixed
        text_budget = room // SUMMARY_ROOM_DIVISOR if s.threshold > 0 else None
        try:
            if s.summary == "folded" or span is None:
                # No model call: the fingerprint's facts are kept (appended within a budget).
                fp = extract_fingerprint(msgs[1:cut], reread_summaries=True)
                text, budget = folded_summary(head, s.words_budget), s.preserved_budget
                kept = keep_facts(text, fp, budget, repair=bool(budget))
            elif s.summary == "structured":
                kept = structured_summary(
                    span,
                    head,
                    fingerprint_from=msgs[1:cut],
                    on_progress=on_progress,
                    preserved_budget=s.preserved_budget,
                    instructions=instructions,
                    text_budget=text_budget,
                )
            else:
                text = span.summarize(head, focus=instructions, on_progress=on_progress)
                text = clipped(text, text_budget)
                fp = extract_fingerprint(msgs[1:cut])
                kept = keep_facts(text, fp, None, repair=False, reply=text)
        except Exception as exc:  # any provider failure: compaction must not fail
            return self._failed(reduced, plan, force, f"{type(exc).__name__}: {exc}", fixed)
        summary, facts = kept[0].strip(), kept[1]
        if not summary and s.summary != "folded":
            error = "the summariser returned an empty summary"
            return self._failed(reduced, plan, force, error, fixed)
        if s.cut == "topic":
            done = "; ".join(f"{t.id} ({', '.join(t.keywords)})" for t in self._segments(msgs)[:-1])
            summary = f"Finished topics: {done}\n{summary}"
        folded = [summary_message(summary, facts=facts)] if summary else []
        out = repair_orphaned_tool_pairs([reduced[0], *folded, *reduced[cut:]])
        plan.tokens_after = estimate_tokens(out) + fixed
        return CompactionResult(out, plan, summary, s.strategy, facts=facts)

    def _failed(
        self, msgs: list[Message], plan: CompactionPlan, force: bool, error: str | None, fixed: int
    ) -> CompactionResult:
        """Step 5: the fallback's truncation of ``msgs`` (step 2's; without one, nothing folds);
        an earlier summary at ``msgs[1]`` stays, one fixed head with the system message."""
        if self.fallback is None:
            plan = replace(plan, would_compact=False, cut=1, tokens_after=plan.tokens_before)
            out = repair_orphaned_tool_pairs(msgs)
            return CompactionResult(out, plan, None, self.strategy, error)
        if len(msgs) < 2 or not is_summary(msgs[1]):
            res = self.fallback.compact(msgs, force=force, fixed=fixed)
            return CompactionResult(res.messages, res.plan, None, res.strategy, error)
        system, previous = msgs[0], msgs[1]
        head = Message(system.role, system.content + previous.content)
        res = self.fallback.compact([head, *msgs[2:]], force=force, fixed=fixed)
        if res.plan.would_compact:
            res.plan.cut += 1  # in ``msgs``'s positions: the summary stays, [2:cut] go
        kept = [system, previous, *res.messages[1:]]
        return CompactionResult(
            kept, res.plan, None, res.strategy, error, kept_previous_summary=True
        )


def _repaired(msgs: Sequence[Message], before: int, fixed: int = 0) -> int:
    if is_valid_tool_sequence(msgs):
        return before
    return estimate_tokens(repair_orphaned_tool_pairs(msgs)) + fixed


def settled(msgs: Sequence[Message], res: CompactionResult, fixed: int = 0) -> CompactionResult:
    """``res``, unless larger than its input repaired (both beside ``fixed``): then that
    input, folding nothing, with ``res`` as its ``declined``. No compaction grows the context."""
    if not res.plan.would_compact:
        return res
    original = repair_orphaned_tool_pairs(msgs)
    size = estimate_tokens(original)
    if estimate_tokens(res.messages) <= size:
        return res
    plan = replace(res.plan, would_compact=False, cut=1, tokens_after=size + fixed)
    return CompactionResult(original, plan, None, res.strategy, res.error, declined=res)


# -- the reductions, cuts and folded text, as pure functions --------------------------------


def stub_old_results(msgs: Sequence[Message], keep_groups: int) -> list[Message]:
    """Results and long arguments stubbed outside the newest ``keep_groups`` tool groups."""
    out = list(msgs)
    for g in tool_groups(out, keep_groups):
        out[g.call_index] = stub_arguments(out[g.call_index])

        for i in g.result_indices:
            m = out[i]
            if is_stub(m):
                continue
            stub = stub_for(m)
            if message_bytes(stub) + HANDLE_ALLOWANCE_BYTES < message_bytes(m):
                out[i] = stub
    return out


def _new_stubs(msgs: Sequence[Message]) -> int:
    """Stubs still without the handle the checkpoint adds."""
    return sum(1 for m in msgs if m.role == ROLE_TOOL and awaits_handle(m))


def fit_cut(msgs: Sequence[Message], sizes: Sequence[int], room_tokens: int, min_tail: int) -> int:
    """Where the newest messages ``room_tokens`` holds begin (``sizes``: their bytes; each
    with its framing and a new stub's handle), at least ``min_tail`` of them; 1: all fit."""
    room_bytes = max(0, room_tokens) * BYTES_PER_TOKEN - sizes[0]
    start, used = len(msgs), 0
    while start > 1:
        m = msgs[start - 1]
        cost = sizes[start - 1] + MESSAGE_OVERHEAD_TOKENS * BYTES_PER_TOKEN
        cost += HANDLE_ALLOWANCE_BYTES * _new_stubs([m])
        if used + cost > room_bytes and len(msgs) - start >= min_tail:
            break
        used += cost
        start -= 1
    return max(1, extend_cut(msgs, start))


def budget_cut(msgs: Sequence[Message], sizes: Sequence[int], target: int, min_tail: int) -> int:
    """Where the largest newest suffix (at least ``min_tail``) fitting ``target`` repaired
    begins (1: none). Only the part after where non-tool messages alone exceed the target
    is measured; the kept size grows with the tail: bisect on it."""
    n = len(msgs)
    if n - 1 <= min_tail:
        return 1
    limit = target * BYTES_PER_TOKEN + BYTES_PER_TOKEN - 1 - sizes[0]
    floor, acc = n, 0
    while floor > 1:
        if msgs[floor - 1].role != ROLE_TOOL:
            acc += sizes[floor - 1]
            if acc > limit:
                break
        floor -= 1
    start = min(extend_cut(msgs, floor), find_cut(msgs, min_tail))
    sizer = KeptSizer(msgs, sizes, start)
    lo, hi, best = min_tail, n - start, min_tail
    while lo <= hi:
        mid = (lo + hi) // 2
        if sizer.kept_tokens(find_cut(msgs, mid)) <= target:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return find_cut(msgs, best)


def window_cut(msgs: Sequence[Message], max_messages: int, min_tail: int, over: bool) -> int:
    """Where the newest ``max_messages - 1`` begin (``over`` the threshold: at most
    max(``min_tail``, half the history)), moved back before tool results."""
    tail = max_messages - 1
    if over:
        tail = min(tail, max(min_tail, len(msgs) // 2))
    elif len(msgs) <= max_messages:
        return 1
    cut = max(1, len(msgs) - tail)
    while 1 < cut < len(msgs) and msgs[cut].role == ROLE_TOOL:
        cut -= 1
    return cut


def folded_summary(head: Sequence[Message], budget_tokens: int | None = None) -> str:
    """The previous summary, then the user's words in ``head`` and the assistant's
    (clipped). Within ``budget_tokens``: the newest words that fit, no previous summary
    (the fingerprint carries its facts)."""
    previous = ""
    lines: list[str] = []
    for m in head:
        if is_summary(m):
            previous = summary_of(m).strip()
        elif m.role == ROLE_USER and m.content.strip():
            lines.append(f"User: {m.content.strip()}")
        elif m.role == ROLE_ASSISTANT and m.content.strip():
            text = " ".join(m.content.split())
            if len(text) > ASSISTANT_CHARS:
                text = text[: ASSISTANT_CHARS - 1] + "…"
            lines.append(f"Assistant: {text}")
    if budget_tokens is not None:
        room, left = budget_tokens * BYTES_PER_TOKEN - len(FOLDED_HEADING) - 80, len(lines)
        for line in reversed(lines):  # 80: room for the "… N earlier" line
            room -= utf8_len(line) + 1
            if room < 0:
                break
            left -= 1
        more = [f"… {left} earlier messages not shown: history_search finds them"] if left else []
        return "\n".join([FOLDED_HEADING, *more, *lines[left:]]) if lines else ""
    if not lines:
        return previous
    if FOLDED_HEADING in previous:
        return previous + "\n" + "\n".join(lines)
    return "\n\n".join(p for p in (previous, FOLDED_HEADING + "\n" + "\n".join(lines)) if p)


# -- the strategies: their constructors (named as the classes they once were), and one
# table from a name to its pipeline --------------------------------------------------------


def TokenBudgetCompactor(max_tokens: int, min_tail_messages: int = DEFAULT_MIN_TAIL) -> Pipeline:
    """The newest messages (at least ``min_tail_messages``) that fit ``max_tokens``."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    if min_tail_messages < 0:
        raise ValueError(f"min_tail_messages must be >= 0, got {min_tail_messages}")
    steps = Steps("budget", max_tokens, cut="budget", target=max_tokens, min_tail=min_tail_messages)
    return Pipeline(steps)


def SlidingWindowCompactor(max_messages: int = 100, *, max_tokens: int | None = None) -> Pipeline:
    """The newest ``max_messages - 1``; over ``max_tokens`` at most the newer half."""
    if max_messages < 1:
        raise ValueError(f"max_messages must be >= 1 (the system message), got {max_messages}")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    return Pipeline(Steps("window", max_tokens or 0, cut="window", max_messages=max_messages))


def SummarizationCompactor(
    summarizer: Summarizer | None,
    max_tokens: int,
    min_tail_messages: int = DEFAULT_MIN_TAIL,
    fallback: Compactor | None = None,
    *,
    summarizer_window: int | None = None,
) -> Pipeline:
    """The head summarised by the five-section template; a failed summary truncates."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    steps = Steps(
        "summarize", max_tokens, min_tail=min_tail_messages, summary="plain", fallback_to=max_tokens
    )
    return Pipeline(steps, summarizer, window=summarizer_window, fallback=fallback)


def HybridCompactor(
    summarizer: Summarizer | None,
    context_window: int,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    target: float = DEFAULT_TARGET,
    evict: bool = False,
) -> Pipeline:
    """Past ``threshold`` of the window: stubs, then a structured summary, down to
    ``target`` of it. ``evict``: old results are first evicted by density."""
    if context_window < 1:
        raise ValueError(f"context_window must be positive, got {context_window}")
    goal = max(1, int(context_window * min(target, threshold)))
    preserved = max(1, int(context_window * PRESERVED_SHARE_HYBRID))
    recall = max(1, int(context_window * RECALL_SHARE))
    reserve = preserved + recall + min(SUMMARY_ESTIMATE_CAP, goal // 8)
    steps = Steps(
        STRATEGY_HYBRID,
        max(1, int(context_window * threshold)),
        evict_to=goal if evict else None,
        stub=True,
        enough_at=goal,
        cut="fit",
        target=goal - reserve,
        summary="structured",
        preserved_budget=preserved,
        fallback_to=goal,
    )
    return Pipeline(steps, summarizer, window=context_window)


def budget_for_window(context_window: int) -> Pipeline:
    return TokenBudgetCompactor(context_window * BUDGET_PERCENT // 100)


def summary_for_window(summarizer: Summarizer, context_window: int) -> Pipeline:
    budget = context_window * BUDGET_PERCENT // 100
    return SummarizationCompactor(summarizer, budget, summarizer_window=context_window)


def eviction_compactor(
    max_tokens: int, target_ratio: float = EVICT_SHARE, keep_groups: int = 3
) -> Pipeline:
    """Old results evicted by density down to ``target_ratio`` of ``max_tokens``; when
    that is not enough, the head folds without a model call."""
    evict_to, fold_to = int(max_tokens * target_ratio), int(max_tokens * EVICT_FOLD_SHARE)
    words = min(SUMMARY_ESTIMATE_CAP, max_tokens // 8)
    steps = Steps(
        "evict",
        max_tokens,
        evict_to=evict_to,
        keep_groups=keep_groups,
        enough_at=evict_to,
        cut="fit",
        target=fold_to - words,
        summary="folded",
        preserved_budget=max(1, evict_to - fold_to),
        words_budget=words,
    )
    return Pipeline(steps)


def MessageBound(max_messages: int, keep_messages: int) -> Pipeline:
    """Over ``max_messages``, all but the newest ``keep_messages`` fold (no model call)."""
    if not 1 <= keep_messages < max_messages:
        raise ValueError(
            f"keep_messages must be between 1 and max_messages - 1, got {keep_messages}"
        )
    steps = Steps("fold", 0, min_tail=keep_messages, max_messages=max_messages, summary="folded")
    return Pipeline(steps)


def tail_compactor(max_tokens: int) -> Pipeline:
    """``/compact``'s last resort: all results stubbed, then truncated to ``max_tokens``."""
    tail = Steps("protected-tail", max_tokens, stub=True, keep_groups=0, cut="fallback")
    return Pipeline(replace(tail, min_tail=1, fallback_to=max_tokens))


class OverPrefix:
    """``inner``'s compaction of a view's first ``length`` messages (the prefix a preparation
    froze; the summariser is asked what the preparation asked), with the messages after them
    reduced as ``inner`` reduces what it keeps (old tool results stubbed), figures over all
    (and ``fixed``)."""

    def __init__(self, inner: Compactor, length: int) -> None:
        self.inner, self.length = inner, length
        self.strategy, self.threshold_tokens = inner.strategy, inner.threshold_tokens

    def plan(
        self, msgs: Sequence[Message], *, force: bool = False, fixed: int = 0
    ) -> CompactionPlan:
        plan = self.inner.plan(msgs[: self.length], force=force, fixed=fixed)
        return replace(plan, tokens_before=estimate_tokens(msgs) + fixed)

    def compact(
        self,
        msgs: Sequence[Message],
        *,
        force: bool = False,
        fixed: int = 0,
        instructions: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> CompactionResult:
        part = msgs[: self.length]
        head = self.inner.compact(
            part, force=force, fixed=fixed, instructions=instructions, on_progress=on_progress
        )
        before = estimate_tokens(msgs) + fixed
        if not head.plan.would_compact:
            plan = replace(head.plan, tokens_before=before, tokens_after=before)
            return CompactionResult(list(msgs), plan, None, head.strategy, head.error)
        out = [*head.messages, *msgs[self.length :]]
        if isinstance(self.inner, Pipeline) and self.inner.steps.stub:
            out = stub_old_results(out, self.inner.steps.keep_groups)
        out = repair_orphaned_tool_pairs(out)
        plan = replace(head.plan, tokens_before=before, tokens_after=estimate_tokens(out) + fixed)
        return replace(head, messages=out, plan=plan)


def topic_compactor(
    detector: TopicDetector, summarizer: Summarizer, *, summarizer_window: int | None = None
) -> Pipeline:
    """Topic isolation: when a new topic begins, the finished ones are summarised."""
    steps = Steps(STRATEGY_TOPIC, 0, cut="topic", min_tail=0, summary="structured")
    return Pipeline(steps, summarizer, window=summarizer_window, detector=detector)


@dataclass(frozen=True, slots=True)
class Strategy:
    help: str  # what ``--help`` says of it
    # Its pipeline for a summariser, a window, a threshold in tokens and hybrid's target.
    pipeline: Callable[[Summarizer | None, int, int, float], Pipeline]

    def steps(self, window: int, threshold: int, target: float) -> Steps:
        return self.pipeline(None, window, threshold, target).steps


STRATEGIES: dict[str, Strategy] = {
    STRATEGY_HYBRID: Strategy(
        "the default: stub old tool results, then summarise; alias phase2",
        lambda s, window, threshold, target: HybridCompactor(
            s, window, threshold=threshold / window, target=target
        ),
    ),
    "summarize": Strategy(
        "LLM summary",
        lambda s, window, threshold, _t: SummarizationCompactor(
            s, threshold, summarizer_window=window
        ),
    ),
    "budget": Strategy(
        "drop oldest", lambda _s, _w, threshold, _t: TokenBudgetCompactor(threshold)
    ),
    "window": Strategy(
        "last 100 messages",
        lambda _s, _w, threshold, _t: SlidingWindowCompactor(max_tokens=threshold),
    ),
    "evict": Strategy(
        "replace old low-value tool results; when that is not enough, fold old messages "
        "without a model call",
        lambda _s, _w, threshold, _t: eviction_compactor(threshold),
    ),
}
# Older names a config file may still hold, and the strategy they mean now.
STRATEGY_ALIASES = {"phase2": STRATEGY_HYBRID}
# What ran, for the strategies whose result calls no model (a dry run computes it exactly;
# one left over the threshold is made again with a larger cut), and for those that ask one.
MODEL_FREE_STRATEGIES = frozenset(
    {
        n
        for n, s in STRATEGIES.items()
        if s.steps(1000, 800, DEFAULT_TARGET).summary in ("", "folded")
    }
    | {STRATEGY_STUBS}
)
SUMMARY_STRATEGIES = frozenset(set(STRATEGIES) - MODEL_FREE_STRATEGIES | {STRATEGY_TOPIC})


def strategy_help() -> str:
    """Every strategy with what it does, for ``--help``."""
    return ", ".join(f"{name} ({s.help})" for name, s in STRATEGIES.items())


def strategy_pipeline(
    strategy: str, summarizer: Summarizer, context_window: int, threshold: int, target: float
) -> Pipeline:
    return STRATEGIES[strategy].pipeline(summarizer, context_window, threshold, target)


CompactorFactory = Callable[[Summarizer, int, int], Compactor]
