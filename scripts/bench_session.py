"""Whole scripted coding sessions through the real ``harness9 chat``, one row per policy.

Every session runs the real CLI entry point in-process (``harness9.cli.app``: option
parsing, the engine, the SQLite store, bash, offload) against a scripted
OpenAI-compatible server on 127.0.0.1 (``tests/support/llm_server.py``), which plays the model.

The script (seeded, so every policy sees the same session): turns of ten tool calls.
Most calls ``cat`` a log file of 1-14 KB (a few of 30 KB) holding one planted fact
(``FACT-0007 ... is v1a2b3c4d``); some re-read an earlier file, some run small
commands, one per turn rewrites the todo list; every fifth user message plants a fact
of its own (``USERFACT-03``) and states a constraint. The server rejects a request
larger than the window with ``context_length_exceeded``, as hosted models do.

Two summarisers: ``adversarial`` answers every summary request with a sentence that
keeps nothing; ``faithful`` keeps every fact line it is given (and nothing it is not).

At the end a resumed turn asks for every planted fact. The scripted model acts as an
ideal agent that only uses what the request shows it: a fact whose value is in the
context counts at once; otherwise it calls ``history_search`` with the fact's key
(when offered) or ``offload_recall`` with a handle found next to the fact's file in
the context (a stub, the recall index, an offload marker), paging on through a long
result. A fact counts as reachable when its value is in the context or comes back in
one of those tool results (read from the session's log).

``--provider`` says whose wire and billing rule the run uses (every policy, harness9's and
the peers', is billed by the same rule, with the breakpoints its requests carry):
- ``anthropic``: the scripted Anthropic Messages server (``tests/support/anthropic_server.py``),
  model ``anthropic/claude-sonnet-4-5``. It caches only prefixes ending at a breakpoint
  the request carries, and its own usage report is billed: reads 0.1x, writes 1.25x
  (1-hour writes 2x), the rest 1x. harness9's adapter places the breakpoints for every
  policy (system, the previous prompt's end, the last message), which is where Claude
  Code places its own (system and tools, the last messages).
- ``openai`` (the default): the OpenAI-compatible server; OpenAI caches by itself any
  prefix of 1,024+ tokens repeated from the previous request, in 128-token steps, billed
  at its model family's discount (``--openai-family``: gpt-4o 0.5x, gpt-4.1 0.25x,
  gpt-5 0.1x), with no write premium. Codex on OpenAI relies on exactly this.
- ``gemini``: the same requests, billed by Gemini 2.5's implicit caching: a repeated
  prefix of 1,024+ tokens at 0.25x, no write premium.

Measures per policy (the main session only; the final turn is the probe):
- requests: chat requests (+ summary calls, shown separately);
- sent: tokens sent (the Anthropic server's count; else bytes/4 of each request's JSON
  messages and tools);
- billed: input billed by the provider's rule above, summary calls included; shown with
  the ratio to uncached (every token at 1x);
- append: share of chat-request transitions that only appended messages;
- compactions (checkpoints stored) and summary calls; peak: largest request / window;
- facts: planted facts reachable at the end.

Peers' policies are compactors the chat is given for this run (``POLICY_FACTORIES``),
with offload and recall off, as the peers ship them. Their published parameters:
- ``overflow``: no management until the server rejects a request, then a summary of
  everything but the last 6 messages (harness9's summariser).
- ``claude-code``: at 95 % of the window, summarise everything and keep only the
  summary (Claude Code's auto-compact).
- ``codex``: at 90 % (codex-rs ``auto_compact_token_limit``), a summary plus the most
  recent user messages up to 20K tokens (codex-rs/core/src/compact.rs,
  ``COMPACT_USER_MESSAGE_MAX_TOKENS``); the kept user messages ride in the summary
  message, since a checkpoint can only keep a suffix of the log.
- ``opencode``: at the start of each user turn, tool outputs older than the newest
  40K tokens of outputs become "[Old tool result content cleared]" when that frees at
  least 20K (packages/opencode/src/session/compaction.ts ``PRUNE_PROTECT``,
  ``PRUNE_MINIMUM``; both scaled from a 200K window to this one); at 90 % of the window
  everything is summarised and only the summary is kept.
- ``masking``: observation masking (Lindenbauer et al. 2025, "The Complexity Trap"):
  every tool result but the newest 10 becomes a placeholder; applied whenever it saves
  at least 5 % (the engine's rule), which favours it (fewer cache breaks than masking
  on every request). Ten 14 KB results overflow a small window, so on a rejected
  request it keeps only the newest 3.

    python -m scripts.bench_session                   # lengths 60,200,600; window 24K
    python -m scripts.bench_session --lengths 60 --policies hybrid,claude-code
    python -m scripts.bench_session --provider anthropic --summarisers adversarial

With ``--provider anthropic`` the targets are checked at the end (ok/NO): hybrid with the
adversarial summariser bills at most 0.25x of uncached at every length and no more than
any peer; each session's stored cost is litellm's exact price of the usage the server
reported (within 1 %); no request was rejected by the validating server; no request
of a harness9 policy exceeded 90 % of the window by the server's count.

Not part of the test suite: it takes minutes.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from typer.testing import CliRunner

from harness9.cli import app
from harness9.cli.env import Environment
from harness9.context.pipeline import (
    CompactionPlan,
    CompactionResult,
    CompactorFactory,
    HybridCompactor,
    SummarizationCompactor,
    starts_with_system,
    tool_groups,
)
from harness9.context.stubs import is_summary, repair_orphaned_tool_pairs, summary_message
from harness9.context.summarize import ProgressCallback, SpanSummarizer
from harness9.schema import ROLE_TOOL, ROLE_USER, Message
from harness9.tokens import estimate_tokens
from tests.support.anthropic_server import (
    CallUsage,
    ScriptedAnthropicServer,
    openai_view,
    prompt_tokens,
)
from tests.support.llm_server import ErrorReply, ScriptedLLMServer, TextReply, ToolCallsReply

HARNESS9_POLICIES = ("hybrid", "summarize", "budget", "window", "evict")
BASELINES = ("overflow", "claude-code", "codex", "opencode", "masking")
NO_SUMMARY = frozenset({"budget", "window", "evict", "masking"})  # summariser never called
REFERENCE_WINDOW = 200_000  # the window the peers' absolute numbers were chosen for
CALLS_PER_TURN = 10
ROUND_CALLS = 6  # tool calls per probe round (their results must fit a small window)
PROBE_TURNS = 6  # user turns the probe may take (each allows 50 model calls)

PROVIDERS = ("openai", "anthropic", "gemini")
ANTHROPIC_MODEL = "anthropic/claude-sonnet-4-5"
# Share of the input price a cached prompt token costs, and the shortest cached prefix.
OPENAI_DISCOUNTS = {"gpt-4o": 0.5, "gpt-4.1": 0.25, "gpt-5": 0.1}
OPENAI_MIN_PREFIX, OPENAI_STEP = 1024, 128
GEMINI_DISCOUNT, GEMINI_MIN_PREFIX = 0.25, 1024
# Anthropic: reads, 5-minute writes, 1-hour writes.
ANTHROPIC_READ, ANTHROPIC_WRITE, ANTHROPIC_WRITE_1H = 0.1, 1.25, 2.0
# litellm's dummy tool, added to an Anthropic request whose history holds tool blocks.
_DUMMY_TOOLS = {"dummy_tool", "dummy-tool"}


# -- the peers' policies ---------------------------------------------------------------------


def _fold_all(msgs: Sequence[Message]) -> int:
    return len(msgs)


class _SummaryAt:
    """Summarise at ``trigger`` × window; keep only the summary (plus ``keep_user``)."""

    def __init__(self, name: str, summarizer: Any, window: int, trigger: float) -> None:
        self.strategy = name
        self.window = window
        self.threshold_tokens = int(window * trigger)
        self.span = SpanSummarizer(summarizer, window=window)

    def plan(
        self, msgs: Sequence[Message], *, force: bool = False, fixed: int = 0
    ) -> CompactionPlan:
        before = estimate_tokens(msgs) + fixed  # fixed: as if on the system message
        if not starts_with_system(msgs) or (not force and before < self.threshold_tokens):
            return CompactionPlan(False, self.strategy, 1, before, before, self.threshold_tokens)
        return CompactionPlan(
            True, self.strategy, _fold_all(msgs), before, 0, self.threshold_tokens
        )

    def kept_text(self, msgs: Sequence[Message]) -> str:
        return ""

    def compact(
        self,
        msgs: Sequence[Message],
        *,
        force: bool = False,
        fixed: int = 0,
        instructions: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> CompactionResult:
        plan = self.plan(msgs, force=force, fixed=fixed)
        if not plan.would_compact:
            return CompactionResult(list(msgs), plan, None, self.strategy)
        try:
            summary = self.span.summarize(msgs[1:])
        except Exception as exc:  # noqa: BLE001 - the peers also just truncate then
            return CompactionResult(
                [msgs[0], *msgs[-2:]], plan, None, self.strategy, error=str(exc)
            )
        summary = self.kept_text(msgs) + (summary or "(empty summary)")
        out = [msgs[0], summary_message(summary)]
        plan.tokens_after = estimate_tokens(out) + fixed
        return CompactionResult(out, plan, summary, self.strategy)


class _Codex(_SummaryAt):
    USER_TOKENS = 20_000

    def kept_text(self, msgs: Sequence[Message]) -> str:
        users = [m.content for m in msgs if m.role == ROLE_USER and not is_summary(m)]
        kept: list[str] = []
        room = self.USER_TOKENS * 4
        for text in reversed(users):
            if len(text.encode()) > room:
                break
            room -= len(text.encode())
            kept.append(text)
        return "".join(f"[user]: {t}\n" for t in reversed(kept)) + "\n"


class _Overflow:
    """No management; when the model rejects the request, summarise all but 6 messages."""

    strategy = "overflow"

    def __init__(self, summarizer: Any, window: int) -> None:
        self.threshold_tokens = window
        self.inner = SummarizationCompactor(summarizer, window, summarizer_window=window)

    def plan(
        self, msgs: Sequence[Message], *, force: bool = False, fixed: int = 0
    ) -> CompactionPlan:
        if not force:
            before = estimate_tokens(msgs) + fixed
            return CompactionPlan(False, self.strategy, 1, before, before, self.threshold_tokens)
        return self.inner.plan(msgs, force=True, fixed=fixed)

    def compact(
        self,
        msgs: Sequence[Message],
        *,
        force: bool = False,
        fixed: int = 0,
        instructions: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> CompactionResult:
        if not force:
            plan = self.plan(msgs, fixed=fixed)
            return CompactionResult(list(msgs), plan, None, self.strategy)
        return self.inner.compact(msgs, force=True, fixed=fixed)


PLACEHOLDER_OPENCODE = "[Old tool result content cleared]"
PLACEHOLDER_MASK = "[Old observation omitted]"


def _replace_results(msgs: list[Message], indices: Sequence[int], text: str) -> list[Message]:
    out = list(msgs)
    for i in indices:
        out[i] = Message(ROLE_TOOL, text, tool_call_id=out[i].tool_call_id)
    return out


class _OpenCode(_SummaryAt):
    def __init__(self, summarizer: Any, window: int) -> None:
        super().__init__("opencode", summarizer, window, 0.9)
        scale = window / REFERENCE_WINDOW
        self.protect = int(40_000 * scale)
        self.minimum = int(20_000 * scale)

    def _prunable(self, msgs: Sequence[Message]) -> list[int]:
        if msgs[-1].role != ROLE_USER:  # OpenCode prunes when a user turn completes
            return []
        seen, out, saved = 0, [], 0
        for i in range(len(msgs) - 1, 0, -1):
            m = msgs[i]
            if is_summary(m):
                break
            if m.role != ROLE_TOOL or m.content == PLACEHOLDER_OPENCODE:
                continue
            size = estimate_tokens([m])
            seen += size
            if seen > self.protect:
                out.append(i)
                saved += size
        return out if saved >= self.minimum else []

    def plan(
        self, msgs: Sequence[Message], *, force: bool = False, fixed: int = 0
    ) -> CompactionPlan:
        plan = super().plan(msgs, force=force, fixed=fixed)
        if plan.would_compact or not starts_with_system(msgs):
            return plan
        prune = self._prunable(msgs)
        if prune:
            pruned = _replace_results(list(msgs), prune, PLACEHOLDER_OPENCODE)
            after = estimate_tokens(pruned) + fixed
            return CompactionPlan(
                True, "opencode:prune", 1, plan.tokens_before, after, plan.threshold
            )
        return plan

    def compact(
        self,
        msgs: Sequence[Message],
        *,
        force: bool = False,
        fixed: int = 0,
        instructions: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> CompactionResult:
        plan = self.plan(msgs, force=force, fixed=fixed)
        if plan.strategy == "opencode:prune":
            out = _replace_results(list(msgs), self._prunable(msgs), PLACEHOLDER_OPENCODE)
            return CompactionResult(out, plan, None, plan.strategy)
        return super().compact(msgs, force=force, fixed=fixed)


class _Masking:
    strategy = "masking"
    KEEP = 10
    KEEP_ON_OVERFLOW = 3  # ten 14 KB results overflow a small window: mask harder then

    def __init__(self, window: int) -> None:
        self.threshold_tokens = int(window * 0.8)

    def _masked(self, msgs: list[Message], force: bool) -> list[Message]:
        keep = self.KEEP_ON_OVERFLOW if force else self.KEEP
        results = [i for g in tool_groups(msgs) for i in g.result_indices]
        old = [i for i in results[:-keep] if msgs[i].content != PLACEHOLDER_MASK]
        return _replace_results(msgs, old, PLACEHOLDER_MASK)

    def plan(
        self, msgs: Sequence[Message], *, force: bool = False, fixed: int = 0
    ) -> CompactionPlan:
        before = estimate_tokens(msgs) + fixed
        if not starts_with_system(msgs):
            return CompactionPlan(False, self.strategy, 1, before, before, self.threshold_tokens)
        after = estimate_tokens(self._masked(list(msgs), force)) + fixed
        return CompactionPlan(
            after < before, self.strategy, 1, before, after, self.threshold_tokens
        )

    def compact(
        self,
        msgs: Sequence[Message],
        *,
        force: bool = False,
        fixed: int = 0,
        instructions: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> CompactionResult:
        plan = self.plan(msgs, force=force, fixed=fixed)
        out = self._masked(list(msgs), force) if plan.would_compact else list(msgs)
        return CompactionResult(repair_orphaned_tool_pairs(out), plan, None, self.strategy)


# factory(summariser, window, threshold tokens): each peer brings its own trigger. The chat
# runs with the factory's compactor in place of its strategy's (Environment.compactor_factory).
POLICY_FACTORIES: dict[str, CompactorFactory] = {
    # harness9's default with density eviction before the stubs (a configuration, measured)
    "hybrid+evict": lambda s, w, t: HybridCompactor(s, w, threshold=t / w, evict=True),
    "overflow": lambda s, w, t: _Overflow(s, w),
    "claude-code": lambda s, w, t: _SummaryAt("claude-code", s, w, 0.95),
    "codex": lambda s, w, t: _Codex("codex", s, w, 0.9),
    "opencode": lambda s, w, t: _OpenCode(s, w),
    "masking": lambda s, w, t: _Masking(w),
}


def _chat(
    runner: CliRunner, argv: list[str], text: str, env: dict[str, str], policy: str
) -> tuple[int, str]:
    """``harness9 chat`` in-process on ``text`` as its piped input: (exit code, output)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    obj = Environment(
        stdin=io.StringIO(text),
        stdout=stdout,
        stderr=stderr,
        compactor_factory=POLICY_FACTORIES.get(policy),
    )
    strategy = "hybrid" if policy in POLICY_FACTORIES else policy
    res = runner.invoke(app, [*argv, "--strategy", strategy], env=env, obj=obj)
    return res.exit_code, res.output + stdout.getvalue() + stderr.getvalue()


# -- the script ------------------------------------------------------------------------------


@dataclass(slots=True)
class Fact:
    key: str
    value: str
    source: str  # the file path, or "user"


@dataclass(slots=True)
class Script:
    users: list[str]  # one user message per turn
    actions: list[list[tuple[str, dict] | str]]  # per turn: tool calls, then the reply text
    facts: list[Fact]
    files: dict[str, str]


def _filler(rng: random.Random, n_bytes: int, tag: str) -> list[str]:
    lines, size = [], 0
    while size < n_bytes:
        line = (
            f"2026-11-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} "
            f"{rng.choice(['INFO', 'DEBUG', 'WARN'])} {tag} req={rng.getrandbits(32):08x} "
            f"latency={rng.randint(1, 900)}ms path=/api/v{rng.randint(1, 3)}/items"
        )
        lines.append(line)
        size += len(line) + 1
    return lines


def make_script(n_calls: int, seed: int = 7) -> Script:
    rng = random.Random(seed)
    files: dict[str, str] = {}
    facts: list[Fact] = []
    users: list[str] = []
    actions: list[list[tuple[str, dict] | str]] = []
    read: list[str] = []
    n_turns = max(1, n_calls // CALLS_PER_TURN)
    todo_items = [f"audit batch {i}" for i in range(1, 6)]
    for turn in range(n_turns):
        text = f"Turn {turn + 1}: continue the log audit and report anything unusual."
        if turn % 5 == 2:
            k = len([f for f in facts if f.source == "user"]) + 1
            value = f"u{rng.getrandbits(32):08x}"
            key = f"USERFACT-{k:02d}"
            facts.append(Fact(key, value, "user"))
            text += (
                f" Remember {key}: the staging bucket is {value}. Never edit files under vendor/."
            )
        users.append(text)
        steps: list[tuple[str, dict] | str] = []
        for step in range(CALLS_PER_TURN):
            roll = rng.random()
            if step == CALLS_PER_TURN - 1:
                done = min(len(todo_items), turn % len(todo_items) + 1)
                todos = [
                    {"content": t, "status": "completed" if i < done else "pending"}
                    for i, t in enumerate(todo_items)
                ]
                steps.append(("write_todos", {"todos": todos}))
            elif roll < 0.1 and read:
                steps.append(("bash", {"command": f"cat {rng.choice(read)}"}))
            elif roll < 0.2:
                steps.append(("bash", {"command": "ls logs | wc -l && date -u +%Y"}))
            else:
                n = len(files) + 1
                path = f"logs/f{n:04d}.log"
                size = (
                    rng.choice([30_000, 30_000])
                    if rng.random() < 0.05
                    else rng.randint(1_000, 14_000)
                )
                lines = _filler(rng, size, f"svc-{n}")
                key = f"FACT-{n:04d}"
                value = f"v{rng.getrandbits(32):08x}"
                lines.insert(
                    rng.randrange(len(lines) + 1), f"{key} checksum of batch {n} is {value}"
                )
                files[path] = "\n".join(lines) + "\n"
                facts.append(Fact(key, value, path))
                read.append(path)
                steps.append(("bash", {"command": f"cat {path}"}))
        steps.append(f"Turn {turn + 1} done: nothing unusual beyond the checksums noted.")
        actions.append(steps)
    return Script(users, actions, facts, files)


# -- the scripted model ----------------------------------------------------------------------


def _msg_tokens(m: dict) -> int:
    return len(json.dumps(m, ensure_ascii=False).encode()) // 4


def request_tokens(body: dict) -> int:
    tools = body.get("tools") or []
    return sum(_msg_tokens(m) for m in body["messages"]) + (
        len(json.dumps(tools).encode()) // 4 if tools else 0
    )


_HANDLE_RE = re.compile(r"\b(msg_[0-9]+|ofl_[0-9a-f]{12})\b")
_TRUNC_RE = re.compile(r"call offload_recall with offset=(\d+)")


class Model:
    """Plays the session's script, then probes for every fact as an ideal agent would."""

    def __init__(self, script: Script, window: int, summariser: str, provider: str) -> None:
        self.provider = provider
        self.script = script
        self.window = window
        self.summariser = summariser
        self.flat = [a for steps in script.actions for a in steps]
        self.pos = 0
        self.calls = 0
        self.chat_requests: list[dict] = []
        self.summary_requests: list[dict] = []
        self.rejected = 0
        self.probing = False
        self.probe_requests: list[dict] = []
        self.in_context: set[str] = set()
        self.asked: dict[str, int] = {}  # fact key -> actions tried
        self.pending: dict[str, tuple[str, dict]] = {}  # call id -> (fact key, args)
        # "chat", "summary" or "probe" for each request answered (not refused), in order:
        # the Anthropic server's usage_log holds one entry for each.
        self.answered: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, wire: dict) -> Any:
        anthropic = self.provider == "anthropic"
        body = openai_view(wire) if anthropic else wire
        size = prompt_tokens(wire) if anthropic else request_tokens(body)
        with self.lock:
            names = {t["function"]["name"] for t in body.get("tools") or []}
            if not names - _DUMMY_TOOLS:
                self.summary_requests.append(body)
                self.answered.append("summary")
                return TextReply(self.summary(body))
            if size > self.window:
                self.rejected += 1
                return self.too_long(size)
            self.answered.append("probe" if self.probing else "chat")
            if self.probing:
                self.probe_requests.append(body)
                return self.probe(body)
            self.chat_requests.append(body)
            if self.pos >= len(self.flat):
                return TextReply("done")
            action = self.flat[self.pos]
            self.pos += 1
            if isinstance(action, str):
                return TextReply(action)
            self.calls += 1
            name, args = action
            return ToolCallsReply(((f"call_{self.calls}", name, json.dumps(args)),))

    def too_long(self, size: int) -> ErrorReply:
        if self.provider == "anthropic":
            message = f"prompt is too long: {size} tokens > {self.window} maximum"
            return ErrorReply(400, message, type="invalid_request_error")
        return ErrorReply(
            400,
            f"This model's maximum context length is {self.window} tokens. However, "
            f"your messages resulted in {size} tokens.",
            type="invalid_request_error",
            code="context_length_exceeded",
        )

    def summary(self, body: dict) -> str:
        if self.summariser == "adversarial":
            return "**Goal:** continue the task."
        text = "\n".join(str(m.get("content") or "") for m in body["messages"])
        keep = []
        for line in text.splitlines():
            if ("FACT-" in line) and line not in keep:
                keep.append(line.strip())
        return "**Goal:** audit the logs.\n**Critical Context:**\n" + "\n".join(keep)

    # -- the probe ---------------------------------------------------------------------------

    def probe(self, body: dict) -> Any:
        msgs = body["messages"]
        text = "\n".join(str(m.get("content") or "") for m in msgs)
        offered = {t["function"]["name"] for t in body.get("tools") or []}
        facts = {f.key: f for f in self.script.facts}
        if len(self.probe_requests) == 1:
            self.in_context = {f.key for f in self.script.facts if f.value in text}
        found = {k for k in facts if facts[k].value in text}
        # Handles next to each file's name in the context: calls and their results.
        calls: dict[str, str] = {}
        by_path: dict[str, str] = {}
        for m in msgs:
            for tc in m.get("tool_calls") or []:
                calls[tc["id"]] = tc["function"]["arguments"]
            if m.get("role") == "tool":
                h = _HANDLE_RE.search(str(m.get("content") or ""))
                args = calls.get(m.get("tool_call_id"), "")
                for p in re.findall(r"logs/f\d{4}\.log", args):
                    if h:
                        by_path[p] = h.group(1)
        for line in text.splitlines():
            h = _HANDLE_RE.search(line)
            for p in re.findall(r"logs/f\d{4}\.log", line):
                if h and p not in by_path:
                    by_path[p] = h.group(1)
        # Follow-ups from the last round's results.
        todo: list[tuple[str, str, dict]] = []
        for m in msgs:
            cid = m.get("tool_call_id")
            if m.get("role") != "tool" or cid not in self.pending:
                continue
            key, args = self.pending.pop(cid)
            content = str(m.get("content") or "")
            if facts[key].value in content:
                continue
            if (more := _TRUNC_RE.search(content)) and "offload_recall" in offered:
                todo.append((key, "offload_recall", {**args, "offset": int(more.group(1))}))
            elif "offload_recall" in offered:
                for line in content.splitlines():
                    h = _HANDLE_RE.match(line.strip())
                    if h and key in line:
                        todo.append((key, "offload_recall", {"id": h.group(1)}))
                        break
        for key, f in facts.items():
            if key in found or key in self.asked or any(t[0] == key for t in todo):
                continue
            if "history_search" in offered:
                todo.append((key, "history_search", {"query": key}))
            elif f.source in by_path and "offload_recall" in offered:
                todo.append((key, "offload_recall", {"id": by_path[f.source]}))
            else:
                self.asked[key] = 0  # nothing to try
        todo = todo[:ROUND_CALLS]
        if not todo:
            return TextReply("Those are all the facts I can reach.")
        out = []
        for key, name, args in todo:
            self.calls += 1
            cid = f"probe_{self.calls}"
            self.asked[key] = self.asked.get(key, 0) + 1
            self.pending[cid] = (key, args)
            out.append((cid, name, json.dumps(args)))
        return ToolCallsReply(tuple(out))


# -- measuring -------------------------------------------------------------------------------


@dataclass(slots=True)
class Row:
    policy: str
    summariser: str
    calls: int
    requests: int = 0
    summary_calls: int = 0
    sent: int = 0
    billed: float = 0.0
    uncached: int = 0
    append_share: float = 0.0
    compactions: int = 0
    peak: float = 0.0
    reachable: int = 0
    facts: int = 0
    rejected: int = 0
    seconds: float = 0.0
    breaks_not_compaction: int = 0
    summary_peak: float = 0.0  # the largest summary request / window (Anthropic's count)
    validation_rejects: int = 0  # requests the validating (Anthropic) server refused
    stored_cost: float | None = None  # the session store's cost_usd (all sessions)
    exact_cost: float | None = None  # litellm's price of the usage the server reported
    notes: list[str] = field(default_factory=list)


def _prefix_tokens(prev: dict, cur: dict) -> tuple[int, bool]:
    """Tokens of the common prefix (tools, then messages) and whether ``cur`` only appended."""
    if json.dumps(prev.get("tools")) != json.dumps(cur.get("tools")):
        return 0, False
    n = len(json.dumps(cur.get("tools") or []).encode()) // 4
    pm, cm = prev["messages"], cur["messages"]
    i = 0
    while i < len(pm) and i < len(cm) and pm[i] == cm[i]:
        n += _msg_tokens(cm[i])
        i += 1
    return n, i == len(pm)


def bill_anthropic(model: Model, row: Row, usage: Sequence[CallUsage]) -> None:
    """What the Anthropic server reported, at its prices: it cached only at breakpoints.
    The probe's requests are left out, as on the other providers."""
    for kind, u in zip(model.answered, usage, strict=True):
        if kind == "probe":
            continue
        share = u.prompt_tokens / model.window
        if kind == "chat":
            row.peak = max(row.peak, share)
        else:
            row.summary_peak = max(row.summary_peak, share)
        row.sent += u.prompt_tokens
        row.uncached += u.prompt_tokens
        row.billed += (
            u.input_tokens
            + ANTHROPIC_READ * u.cache_read
            + ANTHROPIC_WRITE * (u.cache_write - u.cache_write_1h)
            + ANTHROPIC_WRITE_1H * u.cache_write_1h
        )


def bill_automatic(model: Model, row: Row, family: str) -> None:
    """OpenAI's or Gemini's own prefix caching: a prefix repeated from the previous chat
    request is read at the discount if long enough; summary calls (no reuse) at 1x."""
    gemini = model.provider == "gemini"
    discount = GEMINI_DISCOUNT if gemini else OPENAI_DISCOUNTS[family]
    minimum = GEMINI_MIN_PREFIX if gemini else OPENAI_MIN_PREFIX
    prev = None
    for body in model.chat_requests:
        total = request_tokens(body)
        cached = 0
        if prev is not None:
            prefix = _prefix_tokens(prev, body)[0]
            if prefix >= minimum:
                cached = prefix if gemini else prefix // OPENAI_STEP * OPENAI_STEP
        row.sent += total
        row.uncached += total
        row.peak = max(row.peak, total / model.window)
        row.billed += total - cached + discount * cached
        prev = body
    for body in model.summary_requests:
        total = request_tokens(body)
        row.sent += total
        row.uncached += total
        row.billed += total


def exact_cost(usage: Sequence[CallUsage]) -> float:
    """litellm's price map applied by hand to the usage the server reported."""
    from harness9.provider import load_litellm

    price = load_litellm().model_cost[ANTHROPIC_MODEL.split("/", 1)[1]]
    return sum(
        u.input_tokens * price["input_cost_per_token"]
        + u.cache_read * price["cache_read_input_token_cost"]
        + (u.cache_write - u.cache_write_1h) * price["cache_creation_input_token_cost"]
        + u.cache_write_1h * price["cache_creation_input_token_cost_above_1hr"]
        + u.output_tokens * price["output_cost_per_token"]
        for u in usage
    )


def measure(
    model: Model,
    db: Path,
    session_id: str,
    row: Row,
    usage: Sequence[CallUsage] = (),
    family: str = "gpt-4o",
) -> None:
    """The row's figures; ``usage``: the Anthropic server's report of the session's calls
    before the probe."""
    reqs = model.chat_requests
    row.requests = len(reqs)
    row.summary_calls = len(model.summary_requests)
    row.rejected = model.rejected
    prev = None
    appended = 0
    for body in reqs:
        if prev is not None:
            appended += _prefix_tokens(prev, body)[1]
        prev = body
    if model.provider == "anthropic":
        bill_anthropic(model, row, usage)
    else:
        bill_automatic(model, row, family)
    row.append_share = appended / max(1, len(reqs) - 1)
    con = sqlite3.connect(db)
    row.compactions = con.execute(
        "SELECT count(*) FROM compactions WHERE session_id = ?", (session_id,)
    ).fetchone()[0]
    row.breaks_not_compaction = max(0, (len(reqs) - 1 - appended) - row.compactions)
    # Reachable: in the first probe request's context, or in a probe tool result.
    results = "\n".join(
        c
        for (c,) in con.execute(
            "SELECT content FROM messages WHERE session_id = ? AND role = 'tool' "
            "AND tool_call_id LIKE 'probe_%'",
            (session_id,),
        )
    )
    con.close()
    row.facts = len(model.script.facts)
    row.reachable = sum(
        1 for f in model.script.facts if f.key in model.in_context or f.value in results
    )


def run_one(
    policy: str,
    summariser: str,
    n_calls: int,
    window: int,
    tmp: Path,
    provider: str = "openai",
    family: str = "gpt-4o",
) -> Row:
    script = make_script(n_calls)
    home = tmp / f"{policy}-{summariser}-{n_calls}"
    work = home / "work"
    (work / "logs").mkdir(parents=True)
    for path, text in script.files.items():
        (work / path).write_text(text)
    model = Model(script, window, summariser, provider)
    anthropic = provider == "anthropic"
    env = {
        "HARNESS9_HOME": str(home / "h9"),
        "OPENAI_API_KEY": "sk-bench",
        "ANTHROPIC_API_KEY": "sk-ant-bench",
        "HARNESS9_OFFLOAD": "false" if policy in BASELINES else "true",
        "HARNESS9_RECALL": "false" if policy in BASELINES else "true",
    }
    row = Row(policy, summariser, n_calls)
    runner = CliRunner()
    started = time.perf_counter()
    server = ScriptedAnthropicServer() if anthropic else ScriptedLLMServer()
    with server:
        server.respond_with(model)
        base = [
            "chat",
            "--model",
            ANTHROPIC_MODEL if anthropic else "openai/bench",
            "--api-base",
            server.base_url,
            "--context-window",
            str(window),
            "--yes",
            "--no-stream",
            "--workdir",
            str(work),
        ]
        code, out = _chat(runner, base, "\n".join(script.users) + "\n", env, policy)
        if code != 0:
            row.notes.append(f"chat exited {code}: {out[-300:]}")
        db = home / "h9" / "sessions.db"
        con = sqlite3.connect(db)
        (session_id,) = con.execute("SELECT id FROM sessions").fetchone()
        con.close()
        model.probing = True
        keys = ", ".join(f.key for f in script.facts)
        probe = f"Give me the values of {keys}.\n" + "Go on.\n" * (PROBE_TURNS - 1)
        code, out = _chat(runner, [*base, "--resume", session_id], probe, env, policy)
        if code != 0:
            row.notes.append(f"probe exited {code}: {out[-300:]}")
    row.seconds = time.perf_counter() - started
    if isinstance(server, ScriptedAnthropicServer):
        measure(model, db, session_id, row, server.usage_log)
        row.validation_rejects = len(server.rejected)
        row.exact_cost = exact_cost(server.usage_log)
        con = sqlite3.connect(db)
        row.stored_cost = con.execute("SELECT sum(cost_usd) FROM session_usage").fetchone()[0]
        con.close()
    else:
        measure(model, db, session_id, row, family=family)
    return row


def _fmt(n: float) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.2f}M"
    if n >= 1000:
        return f"{n / 1000:.0f}K"
    return f"{n:.0f}"


def print_table(rows: list[Row]) -> None:
    cols = (
        "calls",
        "policy",
        "summariser",
        "requests",
        "summary",
        "sent",
        "billed",
        "×uncached",
        "append",
        "compactions",
        "peak",
        "facts",
    )
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print(
            "| "
            + " | ".join(
                [
                    str(r.calls),
                    r.policy,
                    r.summariser,
                    str(r.requests),
                    str(r.summary_calls),
                    _fmt(r.sent),
                    _fmt(r.billed),
                    f"{r.billed / max(1, r.uncached):.2f}",
                    f"{100 * r.append_share:.0f} %",
                    str(r.compactions),
                    f"{100 * r.peak:.0f} %",
                    f"{r.reachable}/{r.facts}",
                ]
            )
            + " |"
        )
    for r in rows:
        for note in r.notes:
            print(f"note: {r.policy}/{r.summariser}/{r.calls}: {note}")
        if r.breaks_not_compaction:
            print(
                f"note: {r.policy}/{r.summariser}/{r.calls}: "
                f"{r.breaks_not_compaction} cache breaks without a stored compaction"
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="60,200,600", help="tool calls per session")
    ap.add_argument("--window", type=int, default=24_000)
    ap.add_argument("--policies", default=",".join(HARNESS9_POLICIES + BASELINES))
    ap.add_argument("--summarisers", default="adversarial,faithful")
    ap.add_argument("--provider", choices=PROVIDERS, default="openai")
    ap.add_argument("--openai-family", choices=sorted(OPENAI_DISCOUNTS), default="gpt-4o")
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    policies = [p for p in args.policies.split(",") if p]
    summarisers = [s for s in args.summarisers.split(",") if s]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench_session_") as tmp:
        for n in lengths:
            for policy in policies:
                for summariser in summarisers:
                    if policy in NO_SUMMARY and summariser != summarisers[0]:
                        continue  # the summariser is never called: one run stands for both
                    row = run_one(
                        policy,
                        summariser,
                        n,
                        args.window,
                        Path(tmp),
                        args.provider,
                        args.openai_family,
                    )
                    if policy in NO_SUMMARY:
                        row.summariser = "(none)"
                    rows.append(row)
                    print(
                        f"# {n} calls, {policy}/{row.summariser}: {row.seconds:.0f}s",
                        file=sys.stderr,
                        flush=True,
                    )
    print(f"window {args.window} tokens; provider {args.provider}; {_rule(args)}")
    print_table(rows)
    if args.provider == "anthropic":
        print_targets(rows)
    return 0


def _rule(args: argparse.Namespace) -> str:
    if args.provider == "anthropic":
        return (
            "billed = the server's report: cache reads 0.1x, writes 1.25x (1h: 2x), rest 1x; "
            "cached only at the breakpoints each request carries"
        )
    if args.provider == "gemini":
        return "billed = implicit caching: a repeated prefix of 1,024+ tokens at 0.25x"
    discount = OPENAI_DISCOUNTS[args.openai_family]
    return (
        f"billed = automatic caching ({args.openai_family}): a repeated prefix of 1,024+ "
        f"tokens, in 128-token steps, at {discount}x; summary calls 1x"
    )


def print_targets(rows: list[Row]) -> None:
    """The issue's targets for the Anthropic run, each ok or NO."""

    def ratio(r: Row) -> float:
        return r.billed / max(1, r.uncached)

    def mark(good: bool) -> str:
        return "ok" if good else "NO"

    for n in sorted({r.calls for r in rows}):
        ours = [r for r in rows if r.calls == n and r.policy == "hybrid"]
        ours = [r for r in ours if r.summariser == "adversarial"] or ours
        if not ours:
            continue
        main_row = ours[0]
        peers = [r for r in rows if r.calls == n and r.policy in BASELINES]
        same = [p for p in peers if p.summariser in (main_row.summariser, "(none)")]
        # What the user pays: billed tokens, not the ratio (a policy that sends less may
        # be cached worse and still cost less).
        cheapest = min(same, key=lambda p: p.billed, default=None)
        beaten = cheapest is None or main_row.billed <= cheapest.billed
        print(
            f"target {n} calls: billed {ratio(main_row):.2f}x of uncached <= 0.25x: "
            f"{mark(ratio(main_row) <= 0.25)}; billed {_fmt(main_row.billed)} <= every peer"
            + (
                f" (cheapest {cheapest.policy} {_fmt(cheapest.billed)}, {ratio(cheapest):.2f}x)"
                if cheapest is not None
                else " (no peer in this run)"
            )
            + f": {mark(beaten)}"
        )
    off = [
        r
        for r in rows
        if r.exact_cost is None
        or r.stored_cost is None
        or abs(r.stored_cost - r.exact_cost) > 0.01 * r.exact_cost
    ]
    gaps = [
        abs(r.stored_cost - r.exact_cost) / r.exact_cost
        for r in rows
        if r.stored_cost is not None and r.exact_cost
    ]
    print(
        f"target stored cost == litellm exact price within 1 % in every run: {mark(not off)}"
        f" (largest gap {100 * max(gaps, default=0.0):.4f} %)"
    )
    for r in off:
        print(f"  {r.policy}/{r.summariser}/{r.calls}: stored {r.stored_cost} exact {r.exact_cost}")
    refused = sum(r.validation_rejects for r in rows)
    print(f"target no request rejected by the validating server: {mark(refused == 0)} ({refused})")
    ours = [r for r in rows if r.policy in HARNESS9_POLICIES]
    peak = max((r.peak for r in ours), default=0.0)
    summary_peak = max((r.summary_peak for r in ours), default=0.0)
    print(
        f"target no harness9 chat request over 90 % of the window (server's count): "
        f"{mark(peak <= 0.9)} (peak {100 * peak:.0f} %; summary requests {100 * summary_peak:.0f} %)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
