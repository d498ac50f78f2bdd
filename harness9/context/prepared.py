"""Compaction prepared ahead: the summary of a frozen prefix, made while the session goes on.

Past an early mark (the smart trigger's forecast of the threshold within
``prepare_lookahead`` calls, or the ``prepare_at`` share of the window) the policy freezes
the view as it is (the prefix) and a ``Preparer`` runs the compaction of that prefix on a
worker thread, recording each summariser answer by its request. At the threshold the same
compaction runs again over the same prefix, served those answers, so no one waits for the
model; messages added since stay after it, their old tool results stubbed as a compaction
at the threshold stubs them (``OverPrefix``). The prefix must still be the one
summarised: a digest of the checkpoint it starts from and of each message's id and content
is compared, and an ``/undo``, a rewind or another process's checkpoint throws the answers
away. Because the second run is the same function of the same input, the checkpoint it
stores (summary, preserved facts, recall index, kept instructions) is the one a compaction
at the threshold over that prefix stores; a request the answers do not cover goes to the
model, as without them.

This module holds the pure parts (digest, prefix, the decision to wait) and the record of
one preparation; the threads and the cancellable model calls are the engine's
(harness9.engine.background).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Protocol

from harness9.context.pipeline import (
    Compaction,
    CompactionPlan,
    CompactionResult,
    CompactionStarted,
    Compactor,
    ContextEventSink,
    Pipeline,
    SummaryPreparing,
    stub_old_results,
)
from harness9.context.stubs import repair_orphaned_tool_pairs
from harness9.context.summarize import ProgressCallback, Summarizer
from harness9.context.view import ModelView
from harness9.schema import Message, ToolDefinition, Usage
from harness9.tokens import BYTES_PER_TOKEN, estimate_tokens

CALL_TIMES = 11  # the recent model calls whose interval paces the early mark
# A summariser call made in the background: the reply (its usage already reported).
PreparedCall = Callable[[list[Message], list[ToolDefinition]], Message]


class SummaryCancelled(Exception):
    """A background summary call ended because its preparation was cancelled."""


class Preparer(Protocol):
    """Runs a preparation off the caller's thread (the engine's ``BackgroundPreparer``)."""

    def start(self, prepared: PreparedRun) -> bool:
        """Starts ``prepared.run`` on a worker thread with a cancellable summariser call,
        setting ``prepared.cancel_hook`` and ``join_hook``; False: not started."""
        ...


def steered(messages: Sequence[Message], framing: int) -> list[Message]:
    """``messages`` with ``framing`` tokens of padding on the system message (negative:
    that much taken off it): what a compaction counting the server's framing is run on
    (the pad steers the cut only)."""
    pad = framing * BYTES_PER_TOKEN
    if not pad or not messages:
        return list(messages)
    head = messages[0]
    if pad > 0:
        return [Message(head.role, head.content + " " * pad), *messages[1:]]
    # A server that counts less than the estimate: the head weighs less for the cut.
    return [Message(head.role, head.content[: max(0, len(head.content) + pad)]), *messages[1:]]


def prefix_digest(view: ModelView, checkpoint_key: object) -> str:
    """A digest of the checkpoint ``view`` starts from and of each stored message in it (id,
    role, content, tool calls): equal only when the log's prefix is the one ``view`` shows."""
    h = hashlib.sha256(repr(checkpoint_key).encode())
    for mid, m in zip(view.ids, view.messages, strict=True):
        if mid is None:
            continue
        calls = [(c.id, c.name, c.arguments) for c in m.tool_calls]
        record = [mid, m.role, m.content, calls, m.tool_call_id]
        h.update(json.dumps(record, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def prefix_of(view: ModelView, last_id: int) -> ModelView | None:
    """``view`` up to the message stored as ``last_id`` (None: it is not in the view)."""
    try:
        end = view.ids.index(last_id) + 1
    except ValueError:
        return None
    return ModelView(view.messages[:end], view.ids[:end])


def request_key(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> str:
    """What identifies a summariser request: its messages and tools, byte for byte."""
    body = [[m.role, m.content, m.tool_call_id] for m in messages]
    payload = json.dumps([body, [t.name for t in tools]], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


def worth_waiting(elapsed_wait: float, expected: float | None) -> float | None:
    """How much longer to wait for a preparation still running (None: until it ends).

    A summary made again now would take about ``expected`` seconds (the last one's time);
    waiting for the one already running is cheaper as long as the wait stays under that.
    Without a measure, a new summary would be the same request from scratch: wait."""
    if expected is None:
        return None
    return max(0.0, expected - elapsed_wait)


class OverPrefix:
    """``inner``'s compaction of a view's first ``length`` messages (the prefix a preparation
    froze), with the messages after them reduced as ``inner`` reduces what it keeps: a
    compaction at the threshold stubs every old tool result outside the newest groups, those
    added since the mark included, so applying a prepared summary leaves no more than that.
    Its cut, summary and figures are over the whole view; it calls the summariser as
    ``inner`` does on the prefix alone (the same requests the preparation recorded)."""

    def __init__(self, inner: Compactor, length: int) -> None:
        self.inner, self.length = inner, length
        self.strategy, self.threshold_tokens = inner.strategy, inner.threshold_tokens

    def plan(self, msgs: Sequence[Message], *, force: bool = False) -> CompactionPlan:
        plan = self.inner.plan(msgs[: self.length], force=force)
        return replace(plan, tokens_before=estimate_tokens(msgs))

    def compact(
        self,
        msgs: Sequence[Message],
        *,
        force: bool = False,
        instructions: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> CompactionResult:
        head = self.inner.compact(
            msgs[: self.length], force=force, instructions=instructions, on_progress=on_progress
        )
        before = estimate_tokens(msgs)
        if not head.plan.would_compact:
            plan = replace(head.plan, tokens_before=before, tokens_after=before)
            return CompactionResult(list(msgs), plan, None, head.strategy, head.error)
        out = [*head.messages, *msgs[self.length :]]
        steps = self.inner.steps if isinstance(self.inner, Pipeline) else None
        if steps is not None and steps.stub:
            out = stub_old_results(out, steps.keep_groups)
        out = repair_orphaned_tool_pairs(out)
        plan = replace(head.plan, tokens_before=before, tokens_after=estimate_tokens(out))
        return replace(head, messages=out, plan=plan)


@dataclass(eq=False)
class PreparedRun:
    """One preparation: the compaction of the prefix ending at ``last_id`` (``digest``),
    counting ``framing``; ``work`` runs it, and the summariser answers it got are kept in
    ``replies`` by request."""

    session_id: str
    last_id: int
    digest: str
    framing: int
    work: Callable[[], object]
    answers: PreparedAnswers
    replies: dict[str, Message] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    error: str | None = None  # a summary call failed (or was cancelled)
    cancelled: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    cancel_hook: Callable[[], None] | None = None
    join_hook: Callable[[], None] | None = None

    def run(self, call: PreparedCall) -> None:
        """``work`` with every summariser call going to ``call`` (on the worker thread)."""
        try:
            with self.answers.recording(self, call):
                self.work()
        except Exception as exc:  # noqa: BLE001 - kept, and the threshold goes on without it
            self.error = self.error or f"{type(exc).__name__}: {exc}"
        finally:
            self.finished = time.monotonic()
            self.done.set()

    @property
    def usable(self) -> bool:
        """Finished with every summary call answered."""
        return self.done.is_set() and self.error is None and not self.cancelled

    def cancel(self, *, wait: bool = False) -> None:
        """Ends its model call (the connection closes) and, with ``wait``, its thread."""
        self.cancelled = True
        if self.cancel_hook is not None:
            self.cancel_hook()
        if wait and self.join_hook is not None:
            self.join_hook()


class PreparedAnswers:
    """The policy's summariser: ``inner``, but on a worker thread running a preparation its
    calls go to that preparation's call and are recorded, and on a thread serving one a
    recorded answer to the same request is returned without a model call."""

    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner
        self._local = threading.local()
        self.served = 0  # answers served from preparations (for /context and tests)

    def generate(
        self, messages: list[Message], tools: list[ToolDefinition]
    ) -> tuple[Message, Usage | None]:
        recording: tuple[PreparedRun, PreparedCall] | None = getattr(self._local, "recording", None)
        if recording is not None:
            prepared, call = recording
            try:
                reply = call(messages, tools)
            except Exception as exc:
                prepared.error = prepared.error or f"{type(exc).__name__}: {exc}"
                raise
            prepared.replies[request_key(messages, tools)] = reply
            return reply, None  # its usage went to the session when it was billed
        serving: dict[str, Message] | None = getattr(self._local, "serving", None)
        if serving is not None:
            answer = serving.get(request_key(messages, tools))
            if answer is not None:
                self.served += 1
                return answer, None
        return self.inner.generate(messages, tools)

    @contextmanager
    def recording(self, prepared: PreparedRun, call: PreparedCall) -> Iterator[None]:
        self._local.recording = (prepared, call)
        try:
            yield
        finally:
            self._local.recording = None

    @contextmanager
    def serving(self, replies: dict[str, Message]) -> Iterator[None]:
        self._local.serving = replies
        try:
            yield
        finally:
            self._local.serving = None


def early_mark(
    tokens: int,
    growth: float,
    threshold: int,
    window: int,
    *,
    lookahead: int,
    share: float,
) -> bool:
    """Whether a context of ``tokens``, growing ``growth`` a call, is past the early mark:
    ``share`` of the window when set, else the threshold forecast within ``lookahead`` calls."""
    if threshold <= 0:
        return False
    if share > 0:
        return tokens >= share * window
    return tokens + max(0.0, growth) * lookahead >= threshold


class AheadOfThreshold:
    """A policy's preparations, at most one per session: started past the early mark,
    applied (or thrown away) at the threshold, cancelled by ``forget`` and ``cancel``."""

    def __init__(
        self,
        preparer: Preparer,
        answers: PreparedAnswers,
        *,
        lookahead: int,
        share: float,
        trigger_lookahead: int = 0,
    ) -> None:
        self.preparer, self.answers = preparer, answers
        self.lookahead, self.share = lookahead, share
        self.trigger_lookahead = trigger_lookahead  # the smart trigger's own, in calls
        self._seen: dict[str, deque[float]] = {}  # when each session's recent calls began
        self._lock = threading.Lock()
        self._runs: dict[str, PreparedRun] = {}
        self.applied: dict[str, int] = {}
        self.discarded: dict[str, int] = {}  # thrown away: prefix changed, late, failed
        self.expected: float | None = None  # seconds the last prepared summary took

    def preparing(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._runs

    def consider(
        self,
        session_id: str,
        view: ModelView,
        checkpoint_key: object,
        framing: int,
        forecast: Callable[[int], bool],
        needs_model: Callable[[list[Message]], bool],
        compact: Callable[[list[Message]], object],
        emit: ContextEventSink,
    ) -> bool:
        """Starts preparing the compaction of ``view`` when it is past the early mark
        (``forecast(lookahead)``, or the share), none is prepared for this prefix yet and it
        calls a model (``needs_model``; one that does not costs nothing to make at the
        threshold). ``compact`` makes it on the steered messages. True: started."""
        self._called(session_id)
        with self._lock:
            current = self._runs.get(session_id)
        if current is not None:
            prefix = prefix_of(view, current.last_id)
            if prefix is not None and prefix_digest(prefix, checkpoint_key) == current.digest:
                return False
            self._drop(session_id, current)
            emit(SummaryPreparing(False))
        last = view.ids[-1] if view.ids else None
        if last is None or not self._past_mark(forecast, session_id):
            return False
        msgs = steered(view.messages, framing)
        if not needs_model(msgs):
            return False
        run = PreparedRun(
            session_id,
            last,
            prefix_digest(view, checkpoint_key),
            framing,
            lambda: compact(msgs),
            self.answers,
        )
        with self._lock:
            self._runs[session_id] = run
        if not self.preparer.start(run):
            with self._lock:
                self._runs.pop(session_id, None)
            return False
        emit(SummaryPreparing(True))
        return True

    def _past_mark(self, forecast: Callable[[int], bool], session_id: str) -> bool:
        if self.share > 0:
            return forecast(0)
        return forecast(self.calls_ahead(session_id))

    def calls_ahead(self, session_id: str) -> int:
        """How many calls before the threshold a preparation starts: enough for a summary
        to be ready (twice its last time over the session's recent call interval, one spare)
        before the smart trigger's own lookahead, at most ``lookahead``. Starting earlier
        would freeze a shorter prefix, leaving more after the compaction."""
        seen = self._seen.get(session_id)
        if self.expected is None or seen is None or len(seen) < 3:
            return self.lookahead
        gaps = sorted(b - a for a, b in itertools.pairwise(seen))
        interval = max(gaps[len(gaps) // 2], 1e-3)
        # Twice the calls the summary takes: growth comes in bursts (a big file read).
        needed = self.trigger_lookahead + 2 * math.ceil(self.expected / interval) + 1
        return max(1, min(self.lookahead, needed))

    def _called(self, session_id: str) -> None:
        with self._lock:
            seen = self._seen.setdefault(session_id, deque(maxlen=CALL_TIMES))
            seen.append(time.monotonic())

    def pending(self, session_id: str, view: ModelView, checkpoint_key: object) -> bool:
        """A preparation of a prefix of ``view`` is still running (neither ended nor stale)."""
        with self._lock:
            run = self._runs.get(session_id)
        if run is None or run.done.is_set() or run.cancelled:
            return False
        prefix = prefix_of(view, run.last_id)
        return prefix is not None and prefix_digest(prefix, checkpoint_key) == run.digest

    def apply(
        self,
        session_id: str,
        view: ModelView,
        checkpoint_key: object,
        compact: Callable[[PreparedRun, ModelView, float], Compaction | None],
        emit: ContextEventSink,
    ) -> Compaction | None:
        """At the threshold: ``compact(run, prefix, waited)`` served the prepared answers,
        when the log's prefix is still the one summarised (after waiting for it while that
        is cheaper than summarising again); None: nothing prepared, or thrown away."""
        with self._lock:
            run = self._runs.pop(session_id, None)
        if run is None:
            return None
        emit(SummaryPreparing(False))
        prefix = prefix_of(view, run.last_id)
        if prefix is None or prefix_digest(prefix, checkpoint_key) != run.digest:
            self._discard(session_id, run)
            return None
        start = time.monotonic()
        if not run.done.is_set():
            emit(CompactionStarted("prepared ahead", estimate_tokens(view.messages)))
            try:
                run.done.wait(worth_waiting(0.0, self.expected))
            except BaseException:  # Ctrl-C while waiting: its request ends too
                self._discard(session_id, run)
                raise
        waited = time.monotonic() - start
        if not run.usable:
            self._discard(session_id, run)
            return None
        if run.finished is not None:
            self.expected = run.finished - run.started
        with self.answers.serving(run.replies):
            notice = compact(run, prefix, waited)
        if notice is None:
            self._discard(session_id, run)
            return None
        with self._lock:
            self.applied[session_id] = self.applied.get(session_id, 0) + 1
        return notice

    def _discard(self, session_id: str, run: PreparedRun) -> None:
        run.cancel()
        with self._lock:
            self.discarded[session_id] = self.discarded.get(session_id, 0) + 1

    def _drop(self, session_id: str, run: PreparedRun) -> None:
        with self._lock:
            if self._runs.get(session_id) is run:
                del self._runs[session_id]
        self._discard(session_id, run)

    def cancel(self, session_id: str | None = None, *, wait: bool = False) -> int:
        """Cancels the preparation of ``session_id`` (None: every session's); how many."""
        with self._lock:
            ids = [session_id] if session_id is not None else list(self._runs)
            runs = [(sid, r) for sid in ids if (r := self._runs.pop(sid, None)) is not None]
        for sid, run in runs:
            self._discard(sid, run)
        if wait:
            for _, run in runs:
                run.cancel(wait=True)
        return len(runs)
