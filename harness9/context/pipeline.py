"""What compaction does: one function of ordered, pure steps; every strategy a configuration.

``Pipeline.compact`` (and its dry run, ``plan``) runs, cheap to expensive, stopping as
soon as the history fits:

1. **gate**: the history starts with its system message and is over the threshold
   (tokens, or the window's message count; a topic change for topic isolation), or
   the compaction is forced. Offloaded results (``📂 [offload:``) are already small:
   no step ever rewrites them.
2. **reduce**, keeping every message's position (no model call): old tool results are
   evicted by density, least informative first, each keeping its rule summary and
   facts (``evict_to``), then stubbed (``stub_groups``: all but the newest tool groups,
   each stub recallable by its handle). When that alone lands under ``enough_at``, the
   reduced history is the result.
3. **cut**: where the kept tail begins: ``fit`` (as many newest messages as the target
   leaves room for), ``tail`` (all but ``min_tail``), ``budget`` (the largest suffix
   under ``target``), ``window`` (the newest ``max_messages - 1``), ``topic`` (the start
   of the topic that has just begun), ``fallback`` (straight to step 5), or none.
4. **fold** the head: a summary (``summary="plain"``: the five-section template;
   ``"structured"``: the marker prompt, its facts fingerprinted from the messages as
   they were before step 2 and repaired into it), or nothing (the head is dropped).
5. **fallback**: a summariser that fails (an error, an empty reply) hands the reduced
   history to a truncating compactor, an earlier summary kept; the error is recorded.

Every output is repaired and never larger than its input repaired (``settled``).
The configurations: ``hybrid`` (the default; ``HybridCompactor``), ``summarize``
(``SummarizationCompactor``), ``budget`` (``TokenBudgetCompactor``), ``window``
(``SlidingWindowCompactor``), ``evict`` (``eviction_compactor``); beside them
``evict_summary_compactor`` (eviction then a structured summary, benchmarked),
``tail_compactor`` (the last resort of an asked-for compaction) and
``topic_compactor`` (experimental topic isolation).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness9.context.compaction import (
    BUDGET_PERCENT,
    DEFAULT_MIN_TAIL,
    CompactionPlan,
    CompactionResult,
    Compactor,
    KeptSizer,
    ProgressCallback,
    extend_cut,
    find_cut,
    nothing_new,
    run_fallback,
    settled,
    starts_with_system,
    unchanged_plan,
)
from harness9.context.eviction import evict_by_density, tool_groups
from harness9.context.fingerprint import PRESERVED_SHARE, marker_summarizer, structured_summary
from harness9.context.offload import OffloadError, OffloadStore, valid_session_id
from harness9.context.patterns import OFFLOAD_MARKER
from harness9.context.recall import stub_for, summary_message
from harness9.context.repair import is_valid_tool_sequence, repair_orphaned_tool_pairs
from harness9.context.stubs import HANDLE_ALLOWANCE_BYTES, awaits_handle, is_stub
from harness9.context.summarize import SUMMARY_ESTIMATE_CAP, SpanSummarizer, Summarizer
from harness9.context.tokens import BYTES_PER_TOKEN, estimate_tokens, message_bytes
from harness9.context.topics import TopicDetector, TopicSegment
from harness9.schema import ROLE_TOOL, SUMMARY_PREFIX, Message

__all__ = [
    "DEFAULT_TARGET",
    "RECALL_SHARE",
    "STRATEGY_HYBRID",
    "STRATEGY_STUBS",
    "HybridCompactor",
    "Pipeline",
    "SlidingWindowCompactor",
    "Steps",
    "SummarizationCompactor",
    "TokenBudgetCompactor",
    "eviction_compactor",
    "evict_summary_compactor",
    "stub_old_results",
    "tail_compactor",
    "topic_compactor",
]

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
EVICT_SHARE = 0.7  # eviction evicts down to this share of its threshold (or window)
# Topic isolation folds once the history has more than this many messages and the newest
# topic segment has at most NEW_TOPIC_MESSAGES: a new topic has just begun.
TOPIC_MIN_HISTORY = 10
NEW_TOPIC_MESSAGES = 2


@dataclass(frozen=True, slots=True)
class Steps:
    """One configuration of the pipeline (see the module docstring for each step)."""

    strategy: str  # what a plan and a result that folds say ran
    threshold: int  # the gate, in tokens (0: not gated by tokens)
    evict_to: int | None = None  # reduce: evict by density down to this (0 when forced)
    stub_groups: int | None = None  # reduce: then stub all but this many newest tool groups
    keep_groups: int = 3  # eviction leaves the newest tool groups whole
    enough_at: int = 0  # the reduction alone is the result at or under this load
    framing: int = MESSAGE_OVERHEAD_TOKENS  # tokens per message the load adds to the estimate
    reduced_strategy: str = ""  # what a result of the reduction alone says ran
    cut: str = "tail"  # "fit" | "tail" | "budget" | "window" | "topic" | "fallback" | ""
    target: int = 0  # tokens the cut aims for ("fit", "budget")
    min_tail: int = DEFAULT_MIN_TAIL  # newest messages always kept
    max_messages: int = 0  # "window": the window; also a gate when set
    fit_reserve: int = 0  # "fit": tokens kept free for the summary's facts and index
    summary: str = ""  # "" (the head is dropped) | "plain" | "structured"
    preserved_budget: int | None = None  # tokens of the summary's "Preserved facts"


class Pipeline:
    """A ``Compactor``: ``steps`` run by the one pipeline. Pure; never mutates its input.

    ``span`` summarises (configurations with a summary); ``fallback`` truncates when it
    fails; ``detector`` finds topics (``cut="topic"``); with ``offload`` (and the
    session's id) evicted results and facts that do not fit are written there.
    """

    def __init__(
        self,
        steps: Steps,
        span: SpanSummarizer | None = None,
        *,
        fallback: Compactor | None = None,
        detector: TopicDetector | None = None,
        offload: OffloadStore | None = None,
        session_id: str = "",
    ) -> None:
        if offload is not None and not valid_session_id(session_id):
            raise ValueError(f"offload needs a valid session id, got {session_id!r}")
        self.steps = steps
        self.span = span
        self.fallback = fallback
        self.detector = detector
        self.offload = offload
        self.session_id = session_id

    @property
    def strategy(self) -> str:
        return self.steps.strategy

    @property
    def threshold_tokens(self) -> int:
        return self.steps.threshold

    @property
    def preserved_budget(self) -> int | None:
        """Tokens the summary's "Preserved facts" section may take (None: unbounded)."""
        return self.steps.preserved_budget

    @property
    def summarizer(self) -> Summarizer | None:
        return self.span.summarizer if self.span is not None else None

    def plan(self, msgs: Sequence[Message], *, force: bool = False) -> CompactionPlan:
        """What ``compact`` would do, without a model call or a write (a summary's size
        is estimated)."""
        return self._plan(msgs, force, write=False)[0]

    def compact(
        self,
        msgs: Sequence[Message],
        *,
        force: bool = False,
        instructions: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> CompactionResult:
        """The compacted history; ``instructions`` is the focus of a summary."""
        plan, reduced = self._plan(msgs, force, write=True)
        if not starts_with_system(msgs):
            return CompactionResult(list(msgs), plan, None, self.strategy)
        if not plan.would_compact:
            return CompactionResult(repair_orphaned_tool_pairs(msgs), plan, None, self.strategy)
        s = self.steps
        if s.cut == "fallback":
            res = self._truncated(reduced, force=False, error="")
            res.plan.strategy = res.strategy = s.strategy
            res.plan.tokens_before = plan.tokens_before
            res.plan.tokens_after = estimate_tokens(res.messages)
            res.plan.would_compact = res.plan.tokens_after < plan.tokens_before
            res.error = None
        elif plan.cut <= 1:
            out = repair_orphaned_tool_pairs(reduced)
            res = CompactionResult(out, plan, None, plan.strategy)
        elif not s.summary:
            out = repair_orphaned_tool_pairs([reduced[0], *reduced[plan.cut :]])
            res = CompactionResult(out, plan, None, plan.strategy)
        else:  # a summary can be longer than what it replaces: then nothing folds
            return settled(msgs, self._fold(msgs, reduced, plan, force, instructions, on_progress))
        return res

    # -- the steps ------------------------------------------------------------------------

    def _plan(
        self, msgs: Sequence[Message], force: bool, *, write: bool
    ) -> tuple[CompactionPlan, list[Message]]:
        s = self.steps
        if not starts_with_system(msgs):
            return unchanged_plan(s.strategy, msgs, s.threshold), list(msgs)
        sizes = [message_bytes(m) for m in msgs]
        before = sum(sizes) // BYTES_PER_TOKEN
        if not (force or self._over(msgs, before)):
            repaired = _repaired_tokens(msgs, sizes, before)
            if not self._over(msgs, repaired):
                return CompactionPlan(False, s.strategy, 1, before, repaired, s.threshold), list(
                    msgs
                )
        reduced = self._reduce(msgs, force, write)
        after, rsizes = before, sizes
        if reduced is not msgs:
            rsizes = [message_bytes(m) for m in reduced]
            after = (sum(rsizes) + _new_stubs(reduced) * HANDLE_ALLOWANCE_BYTES) // BYTES_PER_TOKEN
        name = s.reduced_strategy or s.strategy
        if reduced is not msgs and (not s.cut or self._enough(reduced, before, after)):
            return CompactionPlan(after < before, name, 1, before, after, s.threshold), reduced
        if s.cut == "fallback":
            return CompactionPlan(True, s.strategy, 1, before, after, s.threshold), reduced
        cut = self._cut(reduced, rsizes, before, force)
        if cut <= 1 and reduced is msgs:
            repaired = _repaired_tokens(msgs, sizes, before)
            return CompactionPlan(False, s.strategy, 1, before, repaired, s.threshold), reduced
        if cut <= 1:
            return CompactionPlan(after < before, name, 1, before, after, s.threshold), reduced
        kept = KeptSizer(reduced, rsizes, cut).kept_tokens(cut)
        kept += _new_stubs(reduced[cut:]) * HANDLE_ALLOWANCE_BYTES // BYTES_PER_TOKEN
        if s.summary:
            head = estimate_tokens(reduced[1:cut])
            kept += min(head, SUMMARY_ESTIMATE_CAP) + len(SUMMARY_PREFIX) // BYTES_PER_TOKEN
        return CompactionPlan(True, s.strategy, cut, before, kept, s.threshold), reduced

    def _over(self, msgs: Sequence[Message], tokens: int) -> bool:
        """The gate: over the token threshold (``tokens``: the estimate, or what the
        repaired history measures), over the message window, or (topics) a new topic."""
        s = self.steps
        if s.cut == "topic":
            segments = self._segments(msgs)
            new_topic = len(segments) >= 2 and segments[-1].message_count <= NEW_TOPIC_MESSAGES
            return new_topic and len(msgs) - 1 > TOPIC_MIN_HISTORY
        if s.max_messages and len(msgs) > s.max_messages:
            return True
        if s.threshold <= 0:
            return False
        return tokens > s.threshold

    def _reduce(self, msgs: Sequence[Message], force: bool, write: bool) -> list[Message]:
        """Step 2: stubs or eviction (``msgs`` itself, as a list, when neither is set)."""
        s = self.steps
        out = msgs if isinstance(msgs, list) else list(msgs)
        if s.evict_to is not None:
            out = evict_by_density(
                out,
                s.keep_groups,
                0 if force else s.evict_to,
                offload=self.offload if write else None,
                session_id=self.session_id,
            )
        if s.stub_groups is not None and not (s.evict_to is not None and self._enough_now(out)):
            out = stub_old_results(out, s.stub_groups)
        return out

    def _enough_now(self, reduced: list[Message]) -> bool:
        """Eviction alone brought the load under ``enough_at``: nothing more is stubbed."""
        load = estimate_tokens(reduced) + self.steps.framing * len(reduced)
        return load <= self.steps.enough_at

    def _enough(self, reduced: Sequence[Message], before: int, after: int) -> bool:
        """The reduction alone lands under ``enough_at`` (counting each message's framing:
        stubs make messages small and many) and saves enough to break the cache for."""
        load = after + self.steps.framing * len(reduced)
        return load <= self.steps.enough_at and after < before * (1 - MIN_GAIN)

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
            fit = fit_cut(msgs, s.target - s.fit_reserve, s.min_tail)
            cut = fit if fit > 1 or not force else cut
        return 1 if nothing_new(msgs, cut) else cut

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
        """Step 4, and 5 when the summariser fails: ``reduced[1:cut]`` becomes one summary.

        The reduction keeps positions, so ``msgs[1:cut]`` are the same messages before
        it: a structured summary's fingerprint is taken from those."""
        s, cut, span = self.steps, plan.cut, self.span
        assert span is not None  # a configuration with a summary has its summariser
        try:
            if s.summary == "structured":
                summary = structured_summary(
                    span,
                    reduced[1:cut],
                    fingerprint_from=msgs[1:cut],
                    on_progress=on_progress,
                    preserved_budget=s.preserved_budget,
                    spill=self._spill if self.offload is not None else None,
                    instructions=instructions,
                )
            else:
                summary = span.summarize(
                    reduced[1:cut], focus=instructions, on_progress=on_progress
                )
        except Exception as exc:  # any provider failure: compaction must not fail
            return self._truncated(reduced, force=force, error=_failure_text(exc), plan=plan)
        if not summary:
            error = "the summariser returned an empty summary"
            return self._truncated(reduced, force=force, error=error, plan=plan)
        if s.cut == "topic":
            summary = f"Finished topics: {self._finished_topics(msgs)}\n{summary}"
        out = repair_orphaned_tool_pairs([reduced[0], summary_message(summary), *reduced[cut:]])
        plan.tokens_after = estimate_tokens(out)
        return CompactionResult(out, plan, summary, s.strategy)

    def _truncated(
        self,
        reduced: list[Message],
        *,
        force: bool,
        error: str,
        plan: CompactionPlan | None = None,
    ) -> CompactionResult:
        """Step 5: the fallback's truncation of ``reduced`` (without one: nothing folds)."""
        if self.fallback is None:
            assert plan is not None
            plan.would_compact, plan.cut, plan.tokens_after = False, 1, plan.tokens_before
            out = repair_orphaned_tool_pairs(reduced)
            return CompactionResult(out, plan, None, self.strategy, error)
        return run_fallback(self.fallback, reduced, force=force, error=error)

    def _finished_topics(self, msgs: Sequence[Message]) -> str:
        segments = self._segments(msgs)[:-1]
        return "; ".join(f"{s.id} ({', '.join(s.keywords)})" for s in segments)

    def _spill(self, facts: str) -> str:
        """Writes facts left out of the summary to the offload store; the line naming them."""
        assert self.offload is not None
        try:
            writer = self.offload.open_stream(self.session_id, "preserved_facts", "{}")
            writer.write(facts + "\n")
            oid = writer.finish().id
        except (OSError, OffloadError):  # an unwritable store must not fail compaction
            return ""
        return f'{OFFLOAD_MARKER}{oid}] the facts not shown, in full: offload_recall(id="{oid}")'


def _repaired_tokens(msgs: Sequence[Message], sizes: list[int], before: int) -> int:
    """The estimate of ``msgs`` as repaired, what is sent if nothing folds (``before``,
    the estimate as they are, when they need no repair)."""
    return before if is_valid_tool_sequence(msgs) else KeptSizer(msgs, sizes).kept_tokens(1)


def _failure_text(exc: BaseException) -> str:
    """How a summariser's failure is recorded in ``CompactionResult.error``."""
    return f"{type(exc).__name__}: {exc}"


# -- the reductions and cuts, as pure functions ---------------------------------------------


def stub_old_results(msgs: Sequence[Message], keep_groups: int) -> list[Message]:
    """Old tool results replaced by stubs (the newest ``keep_groups`` groups stay whole)."""
    out = list(msgs)
    groups = tool_groups(out)
    for g in groups[: max(0, len(groups) - keep_groups)]:
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


def _stubbed_bytes(msgs: Sequence[Message]) -> int:
    """Bytes of ``msgs`` with room for the handles the checkpoint adds to new stubs."""
    return sum(message_bytes(m) for m in msgs) + _new_stubs(msgs) * HANDLE_ALLOWANCE_BYTES


def fit_cut(msgs: Sequence[Message], room_tokens: int, min_tail: int) -> int:
    """Where a tail of as many newest messages as ``room_tokens`` holds begins (each
    counted with its framing), at least ``min_tail`` of them; 1 when all fit."""
    room_bytes = max(0, room_tokens) * BYTES_PER_TOKEN - message_bytes(msgs[0])
    n = len(msgs)
    start, used = n, 0
    while start > 1:
        cost = _stubbed_bytes([msgs[start - 1]]) + MESSAGE_OVERHEAD_TOKENS * BYTES_PER_TOKEN
        if used + cost > room_bytes and n - start >= min_tail:
            break
        used += cost
        start -= 1
    cut = extend_cut(msgs, start)
    return cut if cut > 1 else 1


def budget_cut(msgs: Sequence[Message], sizes: Sequence[int], target: int, min_tail: int) -> int:
    """Where the largest newest suffix (at least ``min_tail`` messages) whose repaired
    history fits ``target`` tokens begins; 1 when nothing can be cut.

    Every non-tool message of a kept suffix is sent, so once those alone exceed the
    target no earlier cut can fit: only the part after that point needs the exact
    (repair-aware) measure, which keeps a long history's work proportional to what is
    kept. ``KeptSizer.kept_tokens(find_cut(t))`` never decreases as t grows: bisect on t.
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
    """Keep the system message and the newest ``max_messages - 1`` messages.

    Where the window would begin on tool results, its start moves back over them to the
    message before (the backtrack). ``force`` keeps the same window: the window is the
    promise ("the last 100 messages"). With ``max_tokens``, a history over that many
    tokens keeps max(``min_tail_messages``, half the history), never more than the
    window; without it the compactor is blind to tokens (``threshold_tokens`` 0).
    """

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
        steps = Steps(
            "window",
            max_tokens or 0,
            cut="window",
            max_messages=max_messages,
            min_tail=min_tail_messages,
        )
        super().__init__(steps)
        self.max_messages = max_messages
        self.min_tail_messages = min_tail_messages
        self.max_tokens = max_tokens


class SummarizationCompactor(Pipeline):
    """Replace the head with ``Message("user", SUMMARY_PREFIX + summary)`` (the five-section
    template), keeping the newest ``min_tail_messages``; on any failure ``fallback`` runs
    (default: a ``TokenBudgetCompactor`` with the same budget)."""

    def __init__(
        self,
        summarizer: Summarizer,
        max_tokens: int,
        min_tail_messages: int = DEFAULT_MIN_TAIL,
        fallback: Compactor | None = None,
        *,
        summarizer_window: int | None = None,
        span: SpanSummarizer | None = None,
    ) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        steps = Steps("summarize", max_tokens, min_tail=min_tail_messages, summary="plain")
        super().__init__(
            steps,
            span or SpanSummarizer(summarizer, window=summarizer_window),
            fallback=fallback or TokenBudgetCompactor(max_tokens, min_tail_messages),
        )
        self.max_tokens = max_tokens
        self.min_tail_messages = min_tail_messages

    @classmethod
    def for_context_window(
        cls, summarizer: Summarizer, context_window: int
    ) -> SummarizationCompactor:
        return cls(
            summarizer, context_window * BUDGET_PERCENT // 100, summarizer_window=context_window
        )

    @property
    def summarizer_window(self) -> int | None:
        assert self.span is not None
        return self.span.window


class HybridCompactor(Pipeline):
    """The default: offload → stub → structured summary with a recall index.

    When the context passes the trigger (``threshold`` × the window, 80 %), one
    compaction brings it down to ``target`` × the window (40 %), well below the trigger,
    so compactions are rare and each one buys many appended requests (ARCHITECTURE
    decision 7). Stubbing every tool result older than the newest ``keep_groups`` groups
    comes first; if that lands under the target no model is called. Otherwise the head
    before a tail sized to the target is folded into one structured summary, its facts
    fingerprinted from the messages as they were; the checkpoint indexes what it folds
    (decision 6). A failing summariser truncates the stubbed history to the target.
    """

    def __init__(
        self,
        summarizer: Summarizer,
        context_window: int,
        *,
        threshold: float = 0.8,
        target: float = DEFAULT_TARGET,
        keep_groups: int = 3,
        min_tail_messages: int = DEFAULT_MIN_TAIL,
        summarizer_window: int | None = None,
        preserved_share: float = PRESERVED_SHARE_HYBRID,
        recall_share: float = RECALL_SHARE,
        fallback: Compactor | None = None,
        evict: bool = False,
    ) -> None:
        """``evict``: old tool results are evicted by density down to the target (each
        keeping its rule summary, error lines, names and paths) before the rest are
        stubbed, instead of all being stubbed at once."""
        if context_window < 1:
            raise ValueError(f"context_window must be positive, got {context_window}")
        self.context_window = context_window
        target_tokens = max(1, int(context_window * min(target, threshold)))
        preserved = max(1, int(context_window * preserved_share))
        self.recall_budget = max(1, int(context_window * recall_share))
        reserve = preserved + self.recall_budget
        reserve += min(SUMMARY_ESTIMATE_CAP, target_tokens // 8)
        steps = Steps(
            STRATEGY_HYBRID,
            max(1, int(context_window * threshold)),
            stub_groups=keep_groups,
            evict_to=target_tokens if evict else None,
            keep_groups=keep_groups,
            enough_at=target_tokens,
            reduced_strategy=STRATEGY_STUBS,
            cut="fit",
            target=target_tokens,
            min_tail=min_tail_messages,
            fit_reserve=reserve,
            summary="structured",
            preserved_budget=preserved,
        )
        span = marker_summarizer(summarizer, window=summarizer_window or context_window)
        super().__init__(
            steps, span, fallback=fallback or TokenBudgetCompactor(target_tokens, min_tail_messages)
        )

    @property
    def target_tokens(self) -> int:
        return self.steps.target


def eviction_compactor(
    max_tokens: int,
    target_ratio: float = EVICT_SHARE,
    keep_groups: int = 3,
    *,
    offload: OffloadStore | None = None,
    session_id: str = "",
) -> Pipeline:
    """``evict``: eviction alone over ``max_tokens``, down to ``target_ratio`` of it (forced:
    every evictable result outside the newest ``keep_groups`` groups). Nothing is folded."""
    steps = Steps(
        "evict",
        max_tokens,
        evict_to=int(max_tokens * target_ratio),
        keep_groups=keep_groups,
        cut="",
    )
    return Pipeline(steps, offload=offload, session_id=session_id)


def evict_summary_compactor(
    summarizer: Summarizer,
    context_window: int,
    *,
    max_tokens: int | None = None,
    keep_groups: int = 3,
    min_tail_messages: int = DEFAULT_MIN_TAIL,
    summarizer_window: int | None = None,
    preserved_share: float = PRESERVED_SHARE,
    fallback: Compactor | None = None,
    offload: OffloadStore | None = None,
    session_id: str = "",
) -> Pipeline:
    """Over ``max_tokens`` (default 80 % of the window): density eviction down to 70 % of
    the window; if that is not under the threshold, all but the newest
    ``min_tail_messages`` fold into a structured summary whose "Preserved facts" may take
    ``preserved_share`` of the window (with ``offload``, the facts that do not fit are
    written there, recallable). The fallback truncates to the threshold."""
    if max_tokens is None:
        max_tokens = max(1, context_window * BUDGET_PERCENT // 100)
    steps = Steps(
        "evict+summary",
        max_tokens,
        evict_to=int(context_window * EVICT_SHARE),
        keep_groups=keep_groups,
        enough_at=max_tokens - 1,
        framing=0,
        reduced_strategy="evict",
        min_tail=min_tail_messages,
        summary="structured",
        preserved_budget=int(context_window * preserved_share),
    )
    return Pipeline(
        steps,
        marker_summarizer(summarizer, window=summarizer_window or context_window),
        fallback=fallback or TokenBudgetCompactor(max_tokens, min_tail_messages),
        offload=offload,
        session_id=session_id,
    )


def tail_compactor(max_tokens: int) -> Pipeline:
    """The last resort of a compaction the user asked for (``/compact``) when the strategy
    folded nothing and the request is still over ``max_tokens``: every tool result is
    stubbed (recallable by its handle), then the history is truncated to what fits,
    down to its newest message; an earlier summary is kept."""
    steps = Steps("protected-tail", max_tokens, stub_groups=0, cut="fallback")
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
