"""Compaction prepared ahead: the summary of a frozen prefix, made while the session goes on.

The context policy decides what to prepare and when (past an early mark it hands over the
view, which is frozen as the prefix, and the compaction to run on it); this module runs it
and times it. A ``Preparer`` (``BackgroundPreparer``, harness9.engine.background) runs the
compaction on a worker thread, each summariser answer recorded by its request. At the
threshold the same compaction runs again over the same prefix, served those answers, so it
stores the checkpoint a compaction at the threshold would; a digest of the prefix
(``harness9.context.view.prefix_digest``) tells whether it is still the one summarised
(docs/prepared-summaries.md).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import operator
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from harness9.config import ContextOptions
from harness9.context.policy import ApplyPrepared
from harness9.context.summarize import Summarizer
from harness9.context.view import ModelView, prefix_digest, prefix_of
from harness9.context_events import (
    Compaction,
    CompactionStarted,
    ContextEventSink,
    SummaryPreparing,
)
from harness9.schema import Message, ToolDefinition, Usage
from harness9.tokens import estimate_tokens

__all__ = [
    "CALL_TIMES",
    "AheadOfThreshold",
    "PreparedAnswers",
    "PreparedCall",
    "PreparedRun",
    "Preparer",
    "prepared_ahead",
    "request_key",
]

CALL_TIMES = 11  # the recent model calls whose interval paces the early mark
# A summariser call made in the background: the reply (its usage already reported).
PreparedCall = Callable[[list[Message], list[ToolDefinition]], Message]


class Preparer(Protocol):
    def start(self, prepared: PreparedRun) -> bool:
        """Starts ``prepared.run`` on a worker thread with a cancellable summariser call,
        setting ``prepared.cancel_hook`` and ``join_hook``; False: not started."""
        ...


def request_key(messages: Sequence[Message], tools: Sequence[ToolDefinition]) -> str:
    """What identifies a summariser request: its messages and tools, byte for byte."""
    body = [[m.role, m.content, m.tool_call_id] for m in messages]
    payload = json.dumps([body, [t.name for t in tools]], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


def prepared_ahead(
    opts: ContextOptions, summarizer: Summarizer, preparer: Preparer | None
) -> tuple[PreparedAnswers, AheadOfThreshold | None]:
    """A context policy's summariser (``summarizer``, served prepared answers on the threads
    that apply them) and its preparations (None: ``preparer`` is None or ``prepare_ahead``
    is off), which ``ContextPolicy(summarizer=..., ahead=...)`` takes."""
    answers = PreparedAnswers(summarizer)
    if preparer is None or not opts.prepare_ahead:
        return answers, None
    ahead = AheadOfThreshold(
        preparer,
        answers,
        lookahead=opts.prepare_lookahead,
        share=opts.prepare_at,
        trigger_lookahead=opts.lookahead_iterations if opts.smart_triggers else 0,
    )
    return answers, ahead


@dataclass(eq=False)
class PreparedRun:
    """One preparation: the compaction of the prefix ending at ``last_id`` (``digest``),
    counting ``framing``, made by ``work``; the summariser's answers kept in ``replies``."""

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
    verified: tuple[object, ModelView] | None = None  # the prefix last found unchanged

    def run(self, call: PreparedCall) -> None:
        """``work`` with every summariser call going to ``call`` (on the worker thread)."""
        try:
            with self.answers.using(self, call):
                self.work()
        except Exception as exc:  # noqa: BLE001 - kept, and the threshold goes on without it
            self.error = self.error or f"{type(exc).__name__}: {exc}"
        finally:
            self.finished = time.monotonic()
            self.done.set()

    def cancel(self, *, wait: bool = False) -> None:
        """Ends its model call (the connection closes) and, with ``wait``, its thread."""
        self.cancelled = True
        if self.cancel_hook is not None:
            self.cancel_hook()
        if wait and self.join_hook is not None:
            self.join_hook()


class PreparedAnswers:
    """The policy's summariser: ``inner``, but on a thread ``using`` a preparation, its calls
    go to the preparation's call and are recorded (``call`` given), or (none) a recorded
    answer to the same request is returned without a model call."""

    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner
        self._local = threading.local()

    def generate(
        self, messages: list[Message], tools: list[ToolDefinition]
    ) -> tuple[Message, Usage | None]:
        run: PreparedRun | None = getattr(self._local, "run", None)
        call: PreparedCall | None = getattr(self._local, "call", None)
        if run is not None and call is not None:
            try:
                reply = call(messages, tools)
            except Exception as exc:
                run.error = run.error or f"{type(exc).__name__}: {exc}"
                raise
            run.replies[request_key(messages, tools)] = reply
            return reply, None  # its usage went to the session when it was billed
        answer = run.replies.get(request_key(messages, tools)) if run is not None else None
        if answer is not None:
            return answer, None
        return self.inner.generate(messages, tools)

    @contextmanager
    def using(self, run: PreparedRun, call: PreparedCall | None = None) -> Iterator[None]:
        self._local.run, self._local.call = run, call
        try:
            yield
        finally:
            self._local.run = self._local.call = None


class AheadOfThreshold:
    """A policy's preparations, at most one per session: started past the early mark,
    applied (or thrown away) at the threshold, or cancelled."""

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
        self.applied: Counter[str] = Counter()
        self.discarded: Counter[str] = Counter()  # thrown away: prefix changed, late, failed
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
        """Starts preparing ``compact`` of ``view``'s messages when it is past the
        early mark (``forecast`` of ``calls_ahead``, or of 0 with a share), none is under way
        for this prefix and it calls a model (``needs_model``; one that does not costs nothing
        at the threshold). True: started."""
        with self._lock:
            self._seen.setdefault(session_id, deque(maxlen=CALL_TIMES)).append(time.monotonic())
            current = self._runs.get(session_id)
        if current is not None:
            if self._prefix(current, view, checkpoint_key) is not None:
                return False
            self._discard(session_id, current, drop=True)
            emit(SummaryPreparing(False))
        last = view.ids[-1] if view.ids else None
        if last is None or not forecast(0 if self.share > 0 else self.calls_ahead(session_id)):
            return False
        msgs = list(view.messages)  # the view grows in place; the worker gets this prefix
        if not needs_model(msgs):
            return False
        digest = prefix_digest(view, checkpoint_key)
        run = PreparedRun(session_id, last, digest, framing, lambda: compact(msgs), self.answers)
        run.verified = (checkpoint_key, ModelView(list(view.messages), list(view.ids)))
        with self._lock:
            self._runs[session_id] = run
        if not self.preparer.start(run):
            with self._lock:
                self._runs.pop(session_id, None)
            return False
        emit(SummaryPreparing(True))
        return True

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

    @staticmethod
    def _prefix(run: PreparedRun, view: ModelView, checkpoint_key: object) -> ModelView | None:
        """The prefix of ``view`` that ``run`` froze, while it is still the one summarised.
        Messages are never changed in place, so the message objects last verified under the
        same checkpoint need no digest: hashing the prefix on every call cost milliseconds."""
        prefix = prefix_of(view, run.last_id)
        if prefix is None:
            return None
        if run.verified is not None and run.verified[0] == checkpoint_key:
            seen = run.verified[1].messages[1:]  # the system message is made anew each call
            if run.verified[1].ids == prefix.ids and all(
                map(operator.is_, seen, prefix.messages[1:])
            ):
                return prefix
        if prefix_digest(prefix, checkpoint_key) != run.digest:
            return None
        run.verified = (checkpoint_key, prefix)
        return prefix

    def pending(self, session_id: str, view: ModelView, checkpoint_key: object) -> bool:
        """A preparation of a prefix of ``view`` is still running (neither ended nor stale)."""
        with self._lock:
            run = self._runs.get(session_id)
        if run is None or run.done.is_set() or run.cancelled:
            return False
        return self._prefix(run, view, checkpoint_key) is not None

    def apply(
        self,
        session_id: str,
        view: ModelView,
        checkpoint_key: object,
        compact: ApplyPrepared,
        emit: ContextEventSink,
    ) -> Compaction | None:
        """At the threshold: ``compact(framing, prefix, waited)`` (the framing the preparation
        counted) served the prepared answers,
        when the log's prefix is still the one summarised (after waiting for it while that
        is cheaper than summarising again); None: nothing prepared, or thrown away."""
        with self._lock:
            run = self._runs.pop(session_id, None)
        if run is None:
            return None
        emit(SummaryPreparing(False))
        prefix = self._prefix(run, view, checkpoint_key)
        start = time.monotonic()
        if prefix is not None and not run.done.is_set():
            emit(CompactionStarted("prepared ahead", estimate_tokens(view.messages)))
            try:
                # Cheaper than a new summary while under the last one's time; unmeasured, a
                # new one would be the same request from scratch: wait until it ends.
                run.done.wait(self.expected)
            except BaseException:  # Ctrl-C while waiting: its request ends too
                self._discard(session_id, run)
                raise
        waited = time.monotonic() - start
        notice = None
        if prefix is not None and run.done.is_set() and run.error is None and not run.cancelled:
            if run.finished is not None:
                self.expected = run.finished - run.started
            with self.answers.using(run):
                notice = compact(run.framing, prefix, waited)
        if notice is None:
            self._discard(session_id, run)
            return None
        with self._lock:
            self.applied[session_id] += 1
        return notice

    def _discard(self, session_id: str, run: PreparedRun, *, drop: bool = False) -> None:
        """Cancels ``run``, counted as thrown away (``drop``: no longer the session's)."""
        run.cancel()
        with self._lock:
            if drop and self._runs.get(session_id) is run:
                del self._runs[session_id]
            self.discarded[session_id] += 1

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
