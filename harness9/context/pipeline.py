"""What compaction does: one function of ordered, pure steps, and the one table from a
strategy's name to its steps (``STRATEGIES``).

``Pipeline.compact`` (and its dry run, ``plan``) runs, cheap to expensive, stopping as soon
as the history fits: 1. **gate** (over the threshold, or forced); 2. **reduce**, no message
moving and no model call: old tool results evicted by density, then stubbed; 3. **cut**
where the kept tail begins (never between tool results and their call); 4. **fold** the head
into a summary, or drop it; 5. **fallback**: a failing summariser hands the reduced history
to a truncating pipeline. ``Steps`` says what each step does. Every output is repaired and
never larger than its input repaired. Also here: the ``Compactor`` seam, its plan and
result, and the events the UI shows of a compaction.
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
    repair_summary,
)
from harness9.context.stubs import (
    HANDLE_ALLOWANCE_BYTES,
    awaits_handle,
    evicted_stub,
    is_offloaded,
    is_stub,
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

# -- the events the UI shows of a compaction -----------------------------------------------


@dataclass(slots=True)
class CompactionStarted:
    strategy: str
    tokens_before: int


@dataclass(slots=True)
class CompactionProgress:
    chunk: int
    total: int


@dataclass(slots=True)
class Compaction:
    """A compaction that cut the context by more than 5 %."""

    tokens_before: int
    tokens_after: int
    msgs_before: int
    msgs_after: int
    strategy: str
    fallback_reason: str | None = None
    # Seconds the turn waited for a summary prepared in the background (None: not one).
    waited: float | None = None


@dataclass(slots=True)
class Notice:
    """Something the user should know that is not an error (e.g. an offloaded result)."""

    text: str


@dataclass(slots=True)
class SummaryPreparing:
    """A summary is being prepared in the background (``active``), or no longer is."""

    active: bool


ContextEvent = CompactionStarted | CompactionProgress | Compaction | Notice | SummaryPreparing
ContextEventSink = Callable[[ContextEvent], None]


def discard(_event: ContextEvent) -> None:
    """The sink used when nobody listens."""


# -- the Compactor seam, its plan and result, the cut rule ---------------------------------


@dataclass(slots=True)
class CompactionPlan:
    would_compact: bool
    strategy: str
    cut: int  # msgs[1:cut] are folded/dropped, msgs[cut:] kept (before repair); 1: nothing folds
    tokens_before: int  # estimate_tokens(msgs)
    tokens_after: int  # estimate of the result (a summary's size is estimated by ``plan``)
    threshold: int  # the compactor's threshold_tokens
    # It would fold ``msgs[1:cut]`` down to ``tokens_after`` but save too little to be worth
    # it (the policy's rule): ``would_compact`` is then False, and nothing is made.
    too_small: bool = False


@dataclass(slots=True)
class CompactionResult:
    messages: list[Message]  # the new view, repaired
    plan: CompactionPlan
    summary: str | None  # summary text without SUMMARY_PREFIX when one was produced
    strategy: str  # what actually ran ("budget" when summarize fell back)
    error: str | None = None  # why a fallback happened, if it did
    # The earlier summary at msgs[1] is kept as it was (a fallback after a failed summary).
    kept_previous_summary: bool = False
    # A summary was made but not used, its result larger than its input: that result, for
    # a caller that cuts further anyway and keeps what was paid for.
    declined: CompactionResult | None = None


@runtime_checkable
class Compactor(Protocol):
    """The one compaction seam; pure: the input is never mutated.

    ``threshold_tokens``: the estimate over which ``plan`` compacts unforced (0: triggered
    otherwise, as topic isolation is). ``plan``: what ``compact`` would fold, no model call.
    ``compact``: ``instructions`` focus a summary (``/compact <focus>``), ``on_progress``
    hears each summariser call (a compactor calling no model ignores both). An input not
    starting with the system message is returned unchanged; otherwise the output is repaired.
    """

    @property
    def strategy(self) -> str: ...

    @property
    def threshold_tokens(self) -> int: ...

    def plan(self, msgs: Sequence[Message], *, force: bool = False) -> CompactionPlan: ...

    def compact(
        self,
        msgs: Sequence[Message],
        *,
        force: bool = False,
        instructions: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> CompactionResult: ...


def starts_with_system(msgs: Sequence[Message]) -> bool:
    return bool(msgs) and msgs[0].role == ROLE_SYSTEM


def find_cut(msgs: Sequence[Message], tail_len: int) -> int:
    """Where the kept part begins when keeping the newest ``tail_len`` messages (>= 1)."""
    return extend_cut(msgs, max(1, len(msgs) - max(tail_len, 0)))


def extend_cut(msgs: Sequence[Message], cut: int) -> int:
    """``cut`` moved back over the tool results it would begin with, to the assistant message
    before them if it made calls; results whose call is not adjacent are left to the repair."""
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
    """Exact token estimate of ``repair([msgs[0]] + msgs[cut:])`` for any cut >= start, in O(1).

    One pass over ``msgs[start:]``: each message's bytes, plus the stubs the repair adds to
    unanswered calls, minus results it drops. A result whose call lies before the cut is
    dropped only for cuts between the two: a difference array counts that.
    """

    __slots__ = ("_start", "_straddle", "_suffix", "_system_bytes")

    def __init__(self, msgs: Sequence[Message], sizes: Sequence[int], start: int = 1) -> None:
        """``sizes[i]`` is ``message_bytes(msgs[i])``; ``msgs[0]`` is the system message."""
        part = msgs[start:]
        # Exact for cuts inside the part: a result whose call lies before it is unmatched.
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
# The ``for_context_window`` helpers' share of the window (the default of the
# ``compaction.threshold`` option); the rest is for tool schemas, output and estimate error.
BUDGET_PERCENT = 80
DEFAULT_THRESHOLD = BUDGET_PERCENT / 100  # the ``compaction.threshold`` option's default
STRATEGY_HYBRID = "hybrid"
STRATEGY_STUBS = "hybrid:stubs"  # what ran when stubbing alone was enough
# A compaction (or a reduction) that saves less than this share is not worth the cache it
# breaks: it is neither made by the pipeline nor stored by the policy.
MIN_COMPACTION_GAIN = 0.05
# What an API adds per message beyond its text (role, call ids, separators): about 8
# tokens for the call/result pairs of a tool-heavy session.
MESSAGE_OVERHEAD_TOKENS = 8
DEFAULT_TARGET = 0.4  # the ``compaction.target`` option's default
# Shares of the window for the summary's "Preserved facts" and the recall index: small
# enough that the recent tail keeps most of the target, large enough for ~100 lines each
# on a 128K window.
PRESERVED_SHARE_HYBRID = 0.06
RECALL_SHARE = 0.06
EVICT_SHARE = 0.7  # eviction evicts down to this share of its threshold
# When eviction is not enough, ``evict`` keeps a tail of this share of its threshold (40 %
# of the window at the default 80 % threshold, hybrid's target, so a fold buys as many
# calls); the folded head's facts take the room up to ``EVICT_SHARE``.
EVICT_FOLD_SHARE = 0.5
# Topic isolation folds once the history has more than this many messages and the newest
# topic segment has at most NEW_TOPIC_MESSAGES: a new topic has just begun.
TOPIC_MIN_HISTORY = 10
NEW_TOPIC_MESSAGES = 2
FOLDED_HEADING = "## Earlier messages (tool calls folded into the recall index)"
ASSISTANT_CHARS = 400  # a folded assistant message keeps this many characters


@dataclass(frozen=True, slots=True)
class Steps:
    """One configuration of the pipeline."""

    strategy: str  # what a plan and a result that folds say ran
    # The gate, in tokens (0: not gated by tokens); ``max_messages`` gates too, and ``force``
    # does not move it; topic isolation is gated by a new topic instead.
    threshold: int
    evict_to: int | None = None  # reduce: evict by density down to this (0 when forced)
    stub: bool = False  # reduce: then stub the old tool results
    keep_groups: int = 3  # reduce: the newest tool groups stay whole
    enough_at: int = 0  # the reduction alone is the result at or under this load
    # Where the kept tail begins: "fit" (as many newest messages as ``target`` holds), "tail"
    # (all but ``min_tail``), "budget" (the largest suffix under ``target``), "window" (the
    # newest ``max_messages - 1``), "topic" (where the newest topic begins), "fallback"
    # (straight to step 5) or "" (nothing is cut).
    cut: str = "tail"
    target: int = 0  # tokens the cut aims for ("fit", "budget")
    min_tail: int = DEFAULT_MIN_TAIL  # newest messages always kept
    max_messages: int = 0  # a gate when set; "window": the window
    # The head is dropped (""), or becomes a "plain" summary (the five-section template), a
    # "structured" one (the marker prompt, its facts fingerprinted from the messages as they
    # were before step 2) or a "folded" one (the user's and assistant's words, no model call).
    summary: str = ""
    preserved_budget: int | None = None  # tokens of the summary's "Preserved facts"
    words_budget: int | None = None  # tokens of a "folded" summary's words (None: all)
    # Step 5: a failing summariser truncates to this many tokens, keeping at least
    # ``fallback_min_tail`` messages (0: nothing folds then).
    fallback_to: int = 0
    fallback_min_tail: int = DEFAULT_MIN_TAIL


class Pipeline:
    """The one ``Compactor``, running ``steps``. ``summarizer`` answers the summary requests
    (in chunks that fit ``window``), ``fallback`` replaces the steps' truncation when a
    summary fails, ``detector`` finds topics (``cut="topic"``)."""

    def __init__(
        self,
        steps: Steps,
        summarizer: Summarizer | None = None,
        *,
        window: int | None = None,
        fallback: Compactor | None = None,
        detector: TopicDetector | None = None,
    ) -> None:
        self.steps = steps
        self.strategy = steps.strategy
        self.threshold_tokens = steps.threshold
        self.window = window
        self.span: SpanSummarizer | None = None
        if summarizer is not None and steps.summary == "structured":
            self.span = marker_summarizer(summarizer, window=window)
        elif summarizer is not None and steps.summary == "plain":
            self.span = SpanSummarizer(summarizer, window=window)
        if fallback is None and steps.fallback_to:
            fallback = Pipeline(budget_steps(steps.fallback_to, steps.fallback_min_tail))
        self.fallback = fallback
        self.detector = detector

    def plan(self, msgs: Sequence[Message], *, force: bool = False) -> CompactionPlan:
        return self._plan(msgs, force)[0]

    def compact(
        self,
        msgs: Sequence[Message],
        *,
        force: bool = False,
        instructions: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> CompactionResult:
        plan, reduced = self._plan(msgs, force)
        s = self.steps
        if not plan.would_compact:
            out = repair_orphaned_tool_pairs(msgs) if starts_with_system(msgs) else list(msgs)
            return CompactionResult(out, plan, None, s.strategy)
        if s.cut == "fallback":  # the fallback's truncation, reported as this strategy
            res = self._failed(reduced, plan, False, None)
            res.plan.strategy = res.strategy = s.strategy
            res.plan.tokens_before = plan.tokens_before
            res.plan.tokens_after = estimate_tokens(res.messages)
            res.plan.would_compact = res.plan.tokens_after < plan.tokens_before
            return res
        if plan.cut > 1 and s.summary:
            return settled(msgs, self._fold(msgs, reduced, plan, force, instructions, on_progress))
        out = repair_orphaned_tool_pairs([reduced[0], *reduced[plan.cut :]])
        return CompactionResult(out, plan, None, plan.strategy)

    def _plan(self, msgs: Sequence[Message], force: bool) -> tuple[CompactionPlan, list[Message]]:
        """The plan, and the history as step 2 leaves it."""
        s = self.steps
        history = msgs if isinstance(msgs, list) else list(msgs)
        sizes = [message_bytes(m) for m in msgs]
        before = sum(sizes) // BYTES_PER_TOKEN
        if not starts_with_system(msgs):
            return CompactionPlan(False, s.strategy, 1, before, before, s.threshold), history
        force = force and not s.max_messages  # a bound in messages is the promise
        if not (force or self._due(msgs, before)):
            return self._unchanged(msgs, before), history
        reduced, after, name = history, before, s.strategy
        if s.evict_to is not None or s.stub:
            reduced = self._reduce(history, force)
            sizes = [message_bytes(m) for m in reduced]
            after = (sum(sizes) + _new_stubs(reduced) * HANDLE_ALLOWANCE_BYTES) // BYTES_PER_TOKEN
            name = f"{s.strategy}:stubs" if s.cut and s.stub else s.strategy
        if s.cut == "fallback":
            return CompactionPlan(True, s.strategy, 1, before, after, s.threshold), reduced
        # The reduction alone lands under ``enough_at`` (counting each message's framing:
        # stubs make messages small and many) and saves enough to break the cache for.
        load = after + MESSAGE_OVERHEAD_TOKENS * len(reduced)
        enough = load <= s.enough_at and after < before * (1 - MIN_COMPACTION_GAIN)
        cut = self._cut(reduced, sizes, before, force) if s.cut and not enough else 1
        if cut <= 1 and reduced is history:
            return self._unchanged(msgs, before), reduced
        if cut <= 1:
            return CompactionPlan(after < before, name, 1, before, after, s.threshold), reduced
        kept = KeptSizer(reduced, sizes, cut).kept_tokens(cut)
        kept += _new_stubs(reduced[cut:]) * HANDLE_ALLOWANCE_BYTES // BYTES_PER_TOKEN
        if s.summary == "folded":  # the words it keeps: at most the head, no model call
            head = estimate_tokens(reduced[1:cut])
            kept += min(head, SUMMARY_ESTIMATE_CAP) + len(SUMMARY_PREFIX) // BYTES_PER_TOKEN
        elif s.summary:
            head = estimate_tokens(reduced[1:cut])
            kept += summary_estimate(head) + len(SUMMARY_PREFIX) // BYTES_PER_TOKEN
        return CompactionPlan(True, s.strategy, cut, before, kept, s.threshold), reduced

    def _unchanged(self, msgs: Sequence[Message], before: int) -> CompactionPlan:
        return CompactionPlan(
            False, self.steps.strategy, 1, before, _repaired(msgs, before), self.steps.threshold
        )

    def _due(self, msgs: Sequence[Message], before: int) -> bool:
        """The gate: a new topic (topic isolation), over ``max_messages``, or over the token
        threshold as the history is (``before``) or as repaired."""
        s = self.steps
        if s.cut == "topic":
            segments = self._segments(msgs)
            new_topic = len(segments) >= 2 and segments[-1].message_count <= NEW_TOPIC_MESSAGES
            return new_topic and len(msgs) - 1 > TOPIC_MIN_HISTORY
        if s.max_messages and len(msgs) > s.max_messages:
            return True
        return before > s.threshold > 0 or _repaired(msgs, before) > s.threshold > 0

    def _reduce(self, msgs: list[Message], force: bool) -> list[Message]:
        s = self.steps
        out = msgs
        if s.evict_to is not None:
            out = evict_by_density(out, s.keep_groups, 0 if force else s.evict_to)
            # Eviction alone brought the load under ``enough_at``: nothing more is stubbed.
            if estimate_tokens(out) + MESSAGE_OVERHEAD_TOKENS * len(out) <= s.enough_at:
                return out
        return stub_old_results(out, s.keep_groups) if s.stub else out

    def _cut(self, msgs: Sequence[Message], sizes: list[int], before: int, force: bool) -> int:
        """Step 3: where the kept tail begins in ``msgs`` (1: nothing is cut)."""
        s = self.steps
        if s.cut == "budget":
            return budget_cut(
                msgs, sizes, min(s.target, before // 2) if force else s.target, s.min_tail
            )
        if s.cut == "window":
            return window_cut(msgs, s.max_messages, s.min_tail, before > s.threshold > 0)
        if s.cut == "topic":
            segments = self._segments(msgs)
            return segments[-1].start_idx if len(segments) >= 2 else 1
        cut = find_cut(msgs, s.min_tail)
        if s.cut == "fit":
            fit = fit_cut(msgs, s.target, s.min_tail)
            cut = fit if fit > 1 or not force else cut
        # A head of nothing but earlier summaries: folding it is a model call for nothing.
        return 1 if all(m.is_summary for m in msgs[1:cut]) else cut

    def _segments(self, msgs: Sequence[Message]) -> list[TopicSegment]:
        return self.detector.detect(msgs) if self.detector is not None else []

    def _fold(
        self,
        msgs: Sequence[Message],
        reduced: list[Message],
        plan: CompactionPlan,
        force: bool,
        instructions: str | None,
        on_progress: ProgressCallback | None,
    ) -> CompactionResult:
        """Steps 4 and 5: ``reduced[1:cut]`` becomes one summary. The reduction keeps
        positions, so a structured summary fingerprints the same ``msgs[1:cut]`` before it."""
        s, cut, span, head = self.steps, plan.cut, self.span, reduced[1 : plan.cut]
        # The model's text: at most half the room the threshold leaves beside the system.
        room = s.threshold - estimate_tokens(reduced[:1])
        text_budget = room // SUMMARY_ROOM_DIVISOR if s.threshold > 0 else None
        try:
            if s.summary == "folded" or span is None:
                summary = folded_summary(head, s.words_budget)
                if s.preserved_budget:  # no model call: the fingerprint's facts are kept
                    fp = extract_fingerprint(msgs[1:cut], reread_summaries=True)
                    summary = repair_summary(summary, fp, budget_tokens=s.preserved_budget).strip()
            elif s.summary == "structured":
                summary = structured_summary(
                    span,
                    head,
                    fingerprint_from=msgs[1:cut],
                    on_progress=on_progress,
                    preserved_budget=s.preserved_budget,
                    instructions=instructions,
                    text_budget=text_budget,
                )
            else:
                summary = span.summarize(head, focus=instructions, on_progress=on_progress)
                summary = clipped(summary, text_budget)
        except Exception as exc:  # any provider failure: compaction must not fail
            return self._failed(reduced, plan, force, f"{type(exc).__name__}: {exc}")
        if not summary and s.summary != "folded":
            return self._failed(reduced, plan, force, "the summariser returned an empty summary")
        if s.cut == "topic":
            done = "; ".join(f"{t.id} ({', '.join(t.keywords)})" for t in self._segments(msgs)[:-1])
            summary = f"Finished topics: {done}\n{summary}"
        folded = [summary_message(summary)] if summary else []
        out = repair_orphaned_tool_pairs([reduced[0], *folded, *reduced[cut:]])
        plan.tokens_after = estimate_tokens(out)
        return CompactionResult(out, plan, summary, s.strategy)

    def _failed(
        self, reduced: list[Message], plan: CompactionPlan, force: bool, error: str | None
    ) -> CompactionResult:
        """Step 5: the fallback's truncation of ``reduced`` (without one, nothing folds).

        An earlier summary right after the system message is kept: the fallback sees the two
        as one fixed head and truncates only what came after, so a failed summary never loses
        what earlier compactions kept."""
        if self.fallback is None:
            plan = replace(plan, would_compact=False, cut=1, tokens_after=plan.tokens_before)
            return CompactionResult(
                repair_orphaned_tool_pairs(reduced), plan, None, self.strategy, error
            )
        if len(reduced) < 2 or not reduced[1].is_summary:
            res = self.fallback.compact(reduced, force=force)
            return CompactionResult(res.messages, res.plan, None, res.strategy, error)
        system, previous = reduced[0], reduced[1]
        head = Message(system.role, system.content + previous.content)
        res = self.fallback.compact([head, *reduced[2:]], force=force)
        if res.plan.would_compact:
            res.plan.cut += 1  # in ``reduced``'s positions: the summary stays, [2:cut] go
        kept = [system, previous, *res.messages[1:]]
        return CompactionResult(
            kept, res.plan, None, res.strategy, error, kept_previous_summary=True
        )


def _repaired(msgs: Sequence[Message], before: int) -> int:
    """The estimate of ``msgs`` as repaired (``before``, their estimate, when valid)."""
    if is_valid_tool_sequence(msgs):
        return before
    return estimate_tokens(repair_orphaned_tool_pairs(msgs))


def settled(msgs: Sequence[Message], res: CompactionResult) -> CompactionResult:
    """``res``, unless it is larger than its input repaired (a summary longer than what it
    replaces): then that input, folding nothing, with ``res`` as its ``declined`` (a caller
    about to cut further keeps the summary paid for). No compaction grows the context."""
    if not res.plan.would_compact:
        return res
    original = repair_orphaned_tool_pairs(msgs)
    size = estimate_tokens(original)
    if estimate_tokens(res.messages) <= size:
        return res
    plan = replace(res.plan, would_compact=False, cut=1, tokens_after=size)
    return CompactionResult(original, plan, None, res.strategy, res.error, declined=res)


# -- the reductions, cuts and folded text, as pure functions --------------------------------


def stub_old_results(msgs: Sequence[Message], keep_groups: int) -> list[Message]:
    """Old tool results, and their calls' long arguments, replaced by stubs (the newest
    ``keep_groups`` groups stay whole)."""
    out = list(msgs)
    groups = tool_groups(out)
    for g in groups[: max(0, len(groups) - keep_groups)]:
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
    """Stubs without a handle yet (the checkpoint adds one to each)."""
    return sum(1 for m in msgs if m.role == ROLE_TOOL and awaits_handle(m))


def fit_cut(msgs: Sequence[Message], room_tokens: int, min_tail: int) -> int:
    """Where a tail of as many newest messages as ``room_tokens`` holds begins (each
    counted with its framing and room for a new stub's handle), at least ``min_tail`` of
    them; 1 when all fit."""
    room_bytes = max(0, room_tokens) * BYTES_PER_TOKEN - message_bytes(msgs[0])
    start, used = len(msgs), 0
    while start > 1:
        m = msgs[start - 1]
        cost = message_bytes(m) + MESSAGE_OVERHEAD_TOKENS * BYTES_PER_TOKEN
        cost += HANDLE_ALLOWANCE_BYTES * _new_stubs([m])
        if used + cost > room_bytes and len(msgs) - start >= min_tail:
            break
        used += cost
        start -= 1
    return max(1, extend_cut(msgs, start))


def budget_cut(msgs: Sequence[Message], sizes: Sequence[int], target: int, min_tail: int) -> int:
    """Where the largest newest suffix (at least ``min_tail`` messages) whose repaired
    history fits ``target`` tokens begins; 1 when nothing can be cut.

    Once the non-tool messages of a suffix alone exceed the target no earlier cut fits, so
    only the part after that point is measured exactly (work proportional to what is kept);
    ``KeptSizer.kept_tokens(find_cut(t))`` never decreases as t grows: bisect on t.
    """
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
    """Where the newest ``max_messages - 1`` begin (``over`` the token threshold: at most
    max(``min_tail``, half the history)); a start on tool results moves back before them."""
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
    """The previous summary, then what the user said in ``head`` (verbatim) and the
    assistant (clipped); its tool calls and results are the recall index's. Within
    ``budget_tokens``, only the newest of this head's words that fit, and no previous summary
    (the fold's fingerprint reads its words and markers again; history_search finds every
    word)."""
    previous = ""
    lines: list[str] = []
    for m in head:
        if m.is_summary:
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


# -- the strategies: one table from a name to its steps ----------------------------------


def budget_steps(max_tokens: int, min_tail: int = DEFAULT_MIN_TAIL) -> Steps:
    """Keep the largest newest suffix (at least ``min_tail`` messages) that fits
    ``max_tokens``; forced, down to half the history."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    if min_tail < 0:
        raise ValueError(f"min_tail_messages must be >= 0, got {min_tail}")
    return Steps("budget", max_tokens, cut="budget", target=max_tokens, min_tail=min_tail)


def window_steps(
    max_messages: int = 100, *, min_tail: int = DEFAULT_MIN_TAIL, max_tokens: int | None = None
) -> Steps:
    """Keep the system message and the newest ``max_messages - 1`` (``force`` keeps the same
    window: the window is the promise). With ``max_tokens``, a history over that many tokens
    keeps max(``min_tail``, half the history), never more than the window; without it the
    window is blind to tokens (``threshold_tokens`` 0)."""
    if max_messages < 1:
        raise ValueError(f"max_messages must be >= 1 (the system message), got {max_messages}")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    return Steps(
        "window", max_tokens or 0, cut="window", min_tail=min_tail, max_messages=max_messages
    )


def summary_steps(max_tokens: int, min_tail: int = DEFAULT_MIN_TAIL) -> Steps:
    """Replace the head with one summary (the five-section template), keeping the newest
    ``min_tail``; a failing summariser truncates to the same budget."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    return Steps(
        "summarize",
        max_tokens,
        min_tail=min_tail,
        summary="plain",
        fallback_to=max_tokens,
        fallback_min_tail=min_tail,
    )


def hybrid_steps(
    context_window: int,
    threshold: float = DEFAULT_THRESHOLD,
    target: float = DEFAULT_TARGET,
    evict: bool = False,
) -> Steps:
    """The default: stubs, then a structured summary with a recall index.

    Past ``threshold`` × the window (80 %), one compaction brings the context down to
    ``target`` × the window (40 %), so compactions are rare and each buys many appended
    requests (docs/architecture.md, 'Cache-stable requests'). Tool results older than the
    newest three groups are stubbed first; when that lands under the target no model is
    called. Otherwise the head before a tail sized to the target, less room for the
    summary's facts and the recall index, folds into one structured summary. A failing
    summariser truncates to the target. ``evict``: old results are first evicted by density.
    """
    if context_window < 1:
        raise ValueError(f"context_window must be positive, got {context_window}")
    goal = max(1, int(context_window * min(target, threshold)))
    preserved = max(1, int(context_window * PRESERVED_SHARE_HYBRID))
    recall = max(1, int(context_window * RECALL_SHARE))
    reserve = preserved + recall + min(SUMMARY_ESTIMATE_CAP, goal // 8)
    return Steps(
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


def evict_steps(max_tokens: int, ratio: float = EVICT_SHARE, keep_groups: int = 3) -> Steps:
    """Over ``max_tokens``, old results are evicted by density down to ``ratio`` of it
    (forced: every evictable result outside the newest ``keep_groups`` groups). When that
    does not land there, the head folds without a model call into the newest of its user's
    and assistant's words (an eighth of ``max_tokens``, at most 1,500 tokens) with the facts
    the fingerprint finds (the room between the two shares); with the kept tail that is
    ``EVICT_FOLD_SHARE`` of ``max_tokens``. Its tool results go into the recall index."""
    evict_to, fold_to = int(max_tokens * ratio), int(max_tokens * EVICT_FOLD_SHARE)
    words = min(SUMMARY_ESTIMATE_CAP, max_tokens // 8)
    return Steps(
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


def fold_steps(max_messages: int, keep_messages: int) -> Steps:
    """Over ``max_messages`` (the ``max_messages`` option), everything before the newest
    ``keep_messages`` folds without a model call, whatever the window.

    Stubs keep every old call and result as two messages, so on a 1M window a long session's
    view grows to thousands of messages that every request pays for walking. The folded
    results go into the checkpoint's recall index, the user's and assistant's words into the
    summary, so no instruction is lost. The option's 400, folded to half, is far more than a
    turn needs, few enough that call 10,000 costs what call 100 does, and one fold (one cache
    break) per ~100 calls."""
    if not 1 <= keep_messages < max_messages:
        raise ValueError(
            f"keep_messages must be between 1 and max_messages - 1, got {keep_messages}"
        )
    return Steps("fold", 0, min_tail=keep_messages, max_messages=max_messages, summary="folded")


def tail_steps(max_tokens: int) -> Steps:
    """The last resort of a compaction the user asked for (``/compact``) when the strategy
    folded nothing and the request is still over ``max_tokens``: every tool result is
    stubbed (recallable by its handle), then the history is truncated to what fits, down to
    its newest message; an earlier summary is kept."""
    return Steps(
        "protected-tail",
        max_tokens,
        stub=True,
        keep_groups=0,
        cut="fallback",
        fallback_to=max_tokens,
        fallback_min_tail=1,
    )


# Topic isolation (experimental): when the history has more than 10 messages and the newest
# topic segment is new (2 messages or fewer), everything before it becomes one structured
# summary. Not gated by tokens; a failing summariser leaves the history as it is.
TOPIC_STEPS = Steps("topic", 0, cut="topic", min_tail=0, summary="structured")


@dataclass(frozen=True, slots=True)
class Strategy:
    """A strategy a user can choose: what ``--help`` says of it, and its steps for a window,
    a threshold in tokens and hybrid's target share."""

    help: str
    steps: Callable[[int, int, float], Steps]


STRATEGIES: dict[str, Strategy] = {
    STRATEGY_HYBRID: Strategy(
        "the default: stub old tool results, then summarise; alias phase2",
        lambda window, threshold, target: hybrid_steps(window, threshold / window, target),
    ),
    "summarize": Strategy("LLM summary", lambda _w, threshold, _t: summary_steps(threshold)),
    "budget": Strategy("drop oldest", lambda _w, threshold, _t: budget_steps(threshold)),
    "window": Strategy(
        "last 100 messages", lambda _w, threshold, _t: window_steps(max_tokens=threshold)
    ),
    "evict": Strategy(
        "replace old low-value tool results; when that is not enough, fold old messages "
        "without a model call",
        lambda _w, threshold, _t: evict_steps(threshold),
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
SUMMARY_STRATEGIES = frozenset(set(STRATEGIES) - MODEL_FREE_STRATEGIES | {TOPIC_STEPS.strategy})


def strategy_help() -> str:
    """Every strategy with what it does, for ``--help``."""
    return ", ".join(f"{name} ({s.help})" for name, s in STRATEGIES.items())


def strategy_pipeline(
    strategy: str, summarizer: Summarizer, context_window: int, threshold: int, target: float
) -> Pipeline:
    """The pipeline of the strategy named ``strategy`` (a key of ``STRATEGIES``)."""
    steps = STRATEGIES[strategy].steps(context_window, threshold, target)
    return Pipeline(steps, summarizer, window=context_window)


# The compactors' public names (docs/architecture.md, 'Public API'), capitalised as the
# constructors they once were: each returns the pipeline of its steps, not a class of its own.


def TokenBudgetCompactor(max_tokens: int, min_tail_messages: int = DEFAULT_MIN_TAIL) -> Pipeline:
    return Pipeline(budget_steps(max_tokens, min_tail_messages))


def SlidingWindowCompactor(
    max_messages: int = 100,
    *,
    min_tail_messages: int = DEFAULT_MIN_TAIL,
    max_tokens: int | None = None,
) -> Pipeline:
    return Pipeline(window_steps(max_messages, min_tail=min_tail_messages, max_tokens=max_tokens))


def SummarizationCompactor(
    summarizer: Summarizer,
    max_tokens: int,
    min_tail_messages: int = DEFAULT_MIN_TAIL,
    fallback: Compactor | None = None,
    *,
    summarizer_window: int | None = None,
) -> Pipeline:
    steps = summary_steps(max_tokens, min_tail_messages)
    return Pipeline(steps, summarizer, window=summarizer_window, fallback=fallback)


def HybridCompactor(
    summarizer: Summarizer,
    context_window: int,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    target: float = DEFAULT_TARGET,
    evict: bool = False,
) -> Pipeline:
    steps = hybrid_steps(context_window, threshold, target, evict)
    return Pipeline(steps, summarizer, window=context_window)


def budget_for_window(context_window: int) -> Pipeline:
    """``budget`` at ``BUDGET_PERCENT`` of ``context_window``."""
    return TokenBudgetCompactor(context_window * BUDGET_PERCENT // 100)


def summary_for_window(summarizer: Summarizer, context_window: int) -> Pipeline:
    """``summarize`` at ``BUDGET_PERCENT`` of ``context_window``, summarising in chunks that
    fit it."""
    budget = context_window * BUDGET_PERCENT // 100
    return SummarizationCompactor(summarizer, budget, summarizer_window=context_window)


def eviction_compactor(
    max_tokens: int, target_ratio: float = EVICT_SHARE, keep_groups: int = 3
) -> Pipeline:
    return Pipeline(evict_steps(max_tokens, target_ratio, keep_groups))


def MessageBound(max_messages: int, keep_messages: int) -> Pipeline:
    return Pipeline(fold_steps(max_messages, keep_messages))


def tail_compactor(max_tokens: int) -> Pipeline:
    return Pipeline(tail_steps(max_tokens))


def topic_compactor(
    detector: TopicDetector, summarizer: Summarizer, *, summarizer_window: int | None = None
) -> Pipeline:
    return Pipeline(TOPIC_STEPS, summarizer, window=summarizer_window, detector=detector)


CompactorFactory = Callable[[Summarizer, int, int], Compactor]
