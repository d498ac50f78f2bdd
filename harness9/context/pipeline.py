"""What compaction does: one function of ordered, pure steps; every strategy a configuration.

``Pipeline.compact`` (and its dry run, ``plan``) runs, cheap to expensive, stopping as soon
as the history fits: 1. **gate** (over the threshold, or forced); 2. **reduce**, no message
moving and no model call: old tool results evicted by density, then stubbed; 3. **cut**
where the kept tail begins; 4. **fold** the head into a summary, or drop it; 5. **fallback**:
a failing summariser hands the reduced history to a truncating compactor. ``Steps`` says
what each step does. Every output is repaired and never larger than its input repaired.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from harness9.context.compaction import (
    CompactionPlan,
    CompactionResult,
    Compactor,
    KeptSizer,
    ProgressCallback,
    extend_cut,
    find_cut,
    starts_with_system,
)
from harness9.context.eviction import evict_by_density, tool_groups
from harness9.context.fingerprint import (
    extract_fingerprint,
    marker_summarizer,
    repair_summary,
    structured_summary,
)
from harness9.context.repair import is_valid_tool_sequence, repair_orphaned_tool_pairs
from harness9.context.stubs import (
    HANDLE_ALLOWANCE_BYTES,
    awaits_handle,
    is_stub,
    stub_arguments,
    stub_for,
    summary_message,
    summary_of,
)
from harness9.context.summarize import (
    SUMMARY_ESTIMATE_CAP,
    SUMMARY_ROOM_DIVISOR,
    SpanSummarizer,
    Summarizer,
    clipped,
    summary_estimate,
)
from harness9.context.topics import TopicDetector, TopicSegment
from harness9.schema import ROLE_ASSISTANT, ROLE_TOOL, ROLE_USER, SUMMARY_PREFIX, Message
from harness9.tokens import BYTES_PER_TOKEN, estimate_tokens, message_bytes, utf8_len

DEFAULT_MIN_TAIL = 6
# The ``for_context_window`` helpers' share of the window (the default of the
# ``compaction.threshold`` option); the rest is for tool schemas, output and estimate error.
BUDGET_PERCENT = 80
STRATEGY_HYBRID = "hybrid"
STRATEGY_STUBS = "hybrid:stubs"  # what ran when stubbing alone was enough
MIN_GAIN = 0.05  # a reduction that saves less than this share is not worth a cache break
# What an API adds per message beyond its text (role, call ids, separators): about 8
# tokens for the call/result pairs of a tool-heavy session.
MESSAGE_OVERHEAD_TOKENS = 8
DEFAULT_TARGET = 0.4
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


class Pipeline:
    """A ``Compactor`` running ``steps``: ``span`` summarises, ``fallback`` truncates when it
    fails (an earlier summary kept), ``detector`` finds topics (``cut="topic"``)."""

    def __init__(
        self,
        steps: Steps,
        span: SpanSummarizer | None = None,
        *,
        fallback: Compactor | None = None,
        detector: TopicDetector | None = None,
    ) -> None:
        self.steps = steps
        self.strategy = steps.strategy
        self.threshold_tokens = steps.threshold
        self.span = span
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
        enough = load <= s.enough_at and after < before * (1 - MIN_GAIN)
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
            if is_stub(m.content):
                continue
            stub = stub_for(m)
            if message_bytes(stub) + HANDLE_ALLOWANCE_BYTES < message_bytes(m):
                out[i] = stub
    return out


def _new_stubs(msgs: Sequence[Message]) -> int:
    """Stubs without a handle yet (the checkpoint adds one to each)."""
    return sum(1 for m in msgs if m.role == ROLE_TOOL and awaits_handle(m.content))


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


# -- the configurations ---------------------------------------------------------------------


class TokenBudgetCompactor(Pipeline):
    """Keep the largest newest suffix (at least ``min_tail_messages``) that fits ``max_tokens``;
    forced, down to half the history."""

    def __init__(self, max_tokens: int, min_tail_messages: int = DEFAULT_MIN_TAIL) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        if min_tail_messages < 0:
            raise ValueError(f"min_tail_messages must be >= 0, got {min_tail_messages}")
        super().__init__(
            Steps("budget", max_tokens, cut="budget", target=max_tokens, min_tail=min_tail_messages)
        )
        self.max_tokens = max_tokens
        self.min_tail_messages = min_tail_messages

    @classmethod
    def for_context_window(cls, context_window: int) -> TokenBudgetCompactor:
        return cls(context_window * BUDGET_PERCENT // 100)


class SlidingWindowCompactor(Pipeline):
    """Keep the system message and the newest ``max_messages - 1`` (``force`` keeps the same
    window: the window is the promise). With ``max_tokens``, a history over that many tokens
    keeps max(``min_tail_messages``, half the history), never more than the window; without
    it the compactor is blind to tokens (``threshold_tokens`` 0)."""

    def __init__(
        self,
        max_messages: int = 100,
        *,
        min_tail_messages: int = DEFAULT_MIN_TAIL,
        max_tokens: int | None = None,
    ) -> None:
        if max_messages < 1:
            raise ValueError(f"max_messages must be >= 1 (the system message), got {max_messages}")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        super().__init__(
            Steps(
                "window",
                max_tokens or 0,
                cut="window",
                min_tail=min_tail_messages,
                max_messages=max_messages,
            )
        )
        self.max_messages = max_messages
        self.min_tail_messages = min_tail_messages
        self.max_tokens = max_tokens


class MessageBound(Pipeline):
    """Over ``max_messages``, everything before the newest ``keep_messages`` folds without a
    model call, whatever the window (the ``max_messages`` option).

    Stubs keep every old call and result as two messages, so on a 1M window a long session's
    view grows to thousands of messages that every request pays for walking. The folded
    results go into the checkpoint's recall index, the user's and assistant's words into the
    summary, so no instruction is lost. The option's 400, folded to half, is far more than a
    turn needs, few enough that call 10,000 costs what call 100 does, and one fold (one cache
    break) per ~100 calls.
    """

    def __init__(self, max_messages: int, keep_messages: int) -> None:
        if not 1 <= keep_messages < max_messages:
            raise ValueError(
                f"keep_messages must be between 1 and max_messages - 1, got {keep_messages}"
            )
        super().__init__(
            Steps("fold", 0, min_tail=keep_messages, max_messages=max_messages, summary="folded")
        )
        self.max_messages = max_messages


class SummarizationCompactor(Pipeline):
    """Replace the head with one summary (the five-section template), keeping the newest
    ``min_tail_messages``; on any failure ``fallback`` runs (default: a
    ``TokenBudgetCompactor`` with the same budget)."""

    def __init__(
        self,
        summarizer: Summarizer,
        max_tokens: int,
        min_tail_messages: int = DEFAULT_MIN_TAIL,
        fallback: Compactor | None = None,
        *,
        summarizer_window: int | None = None,
    ) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        super().__init__(
            Steps("summarize", max_tokens, min_tail=min_tail_messages, summary="plain"),
            SpanSummarizer(summarizer, window=summarizer_window),
            fallback=fallback or TokenBudgetCompactor(max_tokens, min_tail_messages),
        )
        self.max_tokens = max_tokens
        self.min_tail_messages = min_tail_messages
        self.summarizer_window = summarizer_window

    @classmethod
    def for_context_window(
        cls, summarizer: Summarizer, context_window: int
    ) -> SummarizationCompactor:
        return cls(
            summarizer, context_window * BUDGET_PERCENT // 100, summarizer_window=context_window
        )


class HybridCompactor(Pipeline):
    """The default: stubs, then a structured summary with a recall index.

    Past ``threshold`` × the window (80 %), one compaction brings the context down to
    ``target`` × the window (40 %), so compactions are rare and each buys many appended
    requests (see docs/architecture.md, 'Cache-stable requests'). Tool results older than
    the newest three groups are
    stubbed first; when that lands under the target no model is called. Otherwise the head
    before a tail sized to the target, less room for the summary's facts and the recall
    index, folds into one structured summary. A failing summariser truncates to the target.
    ``evict``: old results are first evicted by density down to the target.
    """

    def __init__(
        self,
        summarizer: Summarizer,
        context_window: int,
        *,
        threshold: float = 0.8,
        target: float = DEFAULT_TARGET,
        evict: bool = False,
    ) -> None:
        if context_window < 1:
            raise ValueError(f"context_window must be positive, got {context_window}")
        self.target_tokens = goal = max(1, int(context_window * min(target, threshold)))
        preserved = max(1, int(context_window * PRESERVED_SHARE_HYBRID))
        self.recall_budget = max(1, int(context_window * RECALL_SHARE))
        reserve = preserved + self.recall_budget + min(SUMMARY_ESTIMATE_CAP, goal // 8)
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
        )
        span = marker_summarizer(summarizer, window=context_window)
        super().__init__(steps, span, fallback=TokenBudgetCompactor(goal))


def eviction_compactor(
    max_tokens: int, target_ratio: float = EVICT_SHARE, keep_groups: int = 3
) -> Pipeline:
    """``evict``: over ``max_tokens``, old results are evicted by density down to
    ``target_ratio`` of it (forced: every evictable result outside the newest ``keep_groups``
    groups). When that does not land there (every old result already evicted, the
    conversation grown), the head folds without a model call into the newest of its user's
    and assistant's words (an eighth of ``max_tokens``, at most 1,500 tokens) with the facts
    the fingerprint finds (the room between the two shares); with the kept tail that is
    ``EVICT_FOLD_SHARE`` of ``max_tokens``. Its tool results go into the recall index."""
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


def tail_compactor(max_tokens: int) -> Pipeline:
    """The last resort of a compaction the user asked for (``/compact``) when the strategy
    folded nothing and the request is still over ``max_tokens``: every tool result is
    stubbed (recallable by its handle), then the history is truncated to what fits,
    down to its newest message; an earlier summary is kept."""
    steps = Steps("protected-tail", max_tokens, stub=True, keep_groups=0, cut="fallback")
    return Pipeline(steps, fallback=TokenBudgetCompactor(max_tokens, min_tail_messages=1))


def topic_compactor(
    detector: TopicDetector, summarizer: Summarizer, *, summarizer_window: int | None = None
) -> Pipeline:
    """Topic isolation (experimental): when the history has more than 10 messages and the
    newest topic segment is new (2 messages or fewer), everything before it becomes one
    structured summary. Not gated by tokens (``threshold_tokens`` 0); a failing
    summariser leaves the history as it is."""
    steps = Steps("topic", 0, cut="topic", min_tail=0, summary="structured")
    return Pipeline(
        steps, marker_summarizer(summarizer, window=summarizer_window), detector=detector
    )


CompactorFactory = Callable[[Summarizer, int, int], Compactor]
