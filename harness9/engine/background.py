"""Summaries prepared in the background: the threads and the cancellable model calls.

The context policy decides what to prepare and when to apply it; harness9.engine.prepared
keeps each preparation (its answers, its timings, one per session); this module runs it.
``BackgroundSummaries`` (one per chat, shared by its sub-agents) owns an event loop on one
thread, on which every background summary call is a task, and one worker thread per
preparation running the compaction's pure steps. Cancelling a preparation cancels its
task: the HTTP connection is closed at once, whatever the server is doing, and the worker,
its call failed, ends. ``close`` cancels everything and joins every thread it started, so
a chat that ends leaves no thread or request behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from harness9.engine import events as ev
from harness9.engine.prepared import PreparedRun
from harness9.schema import Message, ToolDefinition, Usage

if TYPE_CHECKING:
    from harness9.provider import LLMProvider

__all__ = ["BackgroundPreparer", "BackgroundSummaries"]

THREAD_PREFIX = "harness9-summary"


class SummaryCancelled(Exception):
    """A background summary call ended because its preparation was cancelled."""


class BackgroundSummaries:
    """The chat's event loop and workers for summaries prepared ahead (started on first use)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._runs: set[_Run] = set()
        self._closed = False
        self._count = 0

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name=f"{THREAD_PREFIX}-loop", daemon=True
                )
                thread.start()
                self._loop, self._loop_thread = loop, thread
            return self._loop

    def start(self, work: Callable[[], None], name: str) -> _Run | None:
        """``work`` on a worker thread of its own; None once closed."""
        with self._lock:
            if self._closed:
                return None
            self._count += 1
            run = _Run(self, f"{THREAD_PREFIX}-{self._count}-{name}")
            self._runs.add(run)

        def body() -> None:
            try:
                work()
            finally:
                with self._lock:
                    self._runs.discard(run)

        run.thread = threading.Thread(target=body, name=run.name, daemon=True)
        run.thread.start()
        return run

    def call(
        self,
        run: _Run,
        provider: LLMProvider,
        messages: list[Message],
        tools: list[ToolDefinition],
    ) -> tuple[Message, Usage | None]:
        """``provider``'s reply, awaited on the event loop; ``SummaryCancelled`` when ``run``
        was (or is, meanwhile) cancelled."""
        loop = self._event_loop()
        with run.lock:
            if run.cancelled.is_set():
                raise SummaryCancelled("the prepared summary was cancelled")
            future = asyncio.run_coroutine_threadsafe(provider.agenerate(messages, tools), loop)
            run.future = future
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise SummaryCancelled("the prepared summary was cancelled") from None
        finally:
            with run.lock:
                run.future = None

    def close(self) -> None:
        """Cancel every preparation and wait for its thread; stop the event loop."""
        with self._lock:
            self._closed = True
            runs = list(self._runs)
        for run in runs:
            run.cancel()
        for run in runs:
            run.join()
        with self._lock:
            loop, thread = self._loop, self._loop_thread
            self._loop = self._loop_thread = None
        if loop is None or thread is None:
            return
        done = asyncio.run_coroutine_threadsafe(_wind_down(), loop)
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            done.result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


async def _wind_down() -> None:
    """Everything left on the loop ends: tasks litellm started there (its logging worker)
    are cancelled, and the default executor's threads (name lookups) are joined."""
    loop = asyncio.get_running_loop()
    tasks = [t for t in asyncio.all_tasks(loop) if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await loop.shutdown_asyncgens()
    await loop.shutdown_default_executor()


class _Run:
    """One preparation: its worker thread and the model call it is waiting for."""

    def __init__(self, owner: BackgroundSummaries, name: str) -> None:
        self.owner, self.name = owner, name
        self.lock = threading.Lock()
        self.cancelled = threading.Event()
        self.future: concurrent.futures.Future[tuple[Message, Usage | None]] | None = None
        self.thread: threading.Thread | None = None

    def cancel(self) -> None:
        with self.lock:
            self.cancelled.set()
            if self.future is not None:
                self.future.cancel()  # the task is cancelled: its connection closes

    def join(self) -> None:
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()


class BackgroundPreparer:
    """One context policy's ``Preparer``: its summaries go to ``provider`` through
    ``owner``'s loop, each call's usage to ``report`` (wasted ones too: they were billed)."""

    def __init__(
        self,
        owner: BackgroundSummaries,
        provider: LLMProvider,
        report: Callable[[ev.ModelUsage], None],
    ) -> None:
        self.owner, self.provider, self.report = owner, provider, report

    def start(self, prepared: PreparedRun) -> bool:
        """Runs ``prepared`` on a worker thread; False when the chat is ending."""
        holder: list[_Run] = []
        ready = threading.Event()

        def call(messages: list[Message], tools: list[ToolDefinition]) -> Message:
            reply, usage = self.owner.call(holder[0], self.provider, messages, tools)
            if usage is not None:
                self.report(ev.ModelUsage(self.provider.model, usage, summary=True))
            return reply

        def work() -> None:
            ready.wait()
            prepared.run(call)

        run = self.owner.start(work, prepared.session_id[:8])
        if run is None:
            return False
        holder.append(run)
        prepared.cancel_hook = run.cancel
        prepared.join_hook = run.join
        ready.set()
        return True
