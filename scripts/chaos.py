"""Chaos run: the real CLI against a scripted loopback model, with faults injected.

    python -m scripts.chaos            # >= 200 kill points, >= 1,000 concurrent writes (minutes)
    python -m scripts.chaos --quick    # a short run of every scenario
    python -m scripts.chaos --scenario search-cleanup   # one scenario alone
    python -m scripts.chaos --database-url temp|postgresql://...   # kill -9 and concurrency
                                       # on a PostgreSQL store ("temp": a throwaway server)

Scenarios (each a row of the closing table):
  kill -9      `harness9 chat --resume` SIGKILLed at a random moment (seeded) while a
               reply streams, a tool runs or a compaction summarises; the next process
               resumes the same session, so each run also checks the previous kill.
  concurrency  two chats on two sessions, a third on the same session as the first,
               writer processes and threads (two per session), and
               `sessions delete --older-than` in a loop, all on one database.
  search-cleanup
               a large store nobody searched yet (200,000 messages): `sessions search`
               catches its index up and `sessions delete --older-than` removes half of
               it, in loops, while four writer processes save as fast as they can.
               Run it alone with --scenario search-cleanup.
  damaged      garbage, truncated, corrupt and newer-schema databases, a file as home,
               an unreadable home, damaged message rows (a BLOB as content, a 1e300 time,
               an unknown role), a full disk (a small tmpfs, when mounting is allowed).
  provider     timeouts, 429 + Retry-After, 5xx bursts, broken streams, an empty reply,
               invalid tool-call JSON, an unknown tool.
  hostile      path traversal and symlink escapes, path-like session ids, a 200 MB tool
               output (peak RSS against a small run), terminal escapes, the API key and
               other secrets in the environment, hostile imports (role "wizard", bad types,
               absurd times, a traversing offload id).

"Messages written" counts what the client had saved as far as the outside world can tell:
every message a request carried (the client sends only what it loaded from the store) and
every write a writer saw committed. "Found" counts those present afterwards.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness9.context import is_valid_tool_sequence
from harness9.context.stubs import repair_orphaned_tool_pairs
from harness9.context.summarize import STRUCTURED_COMPRESSION_PROMPT, SUMMARIZER_SYSTEM
from harness9.context.view import load_view
from harness9.schema import SUMMARY_PREFIX, TRUNCATED_STUB, UNFINISHED_STUB, Message
from harness9.store import Manager
from harness9.store.backend import SessionStore
from tests.support.llm_server import (
    EmptyReply,
    ErrorReply,
    ScriptedLLMServer,
    StreamBreakReply,
    TextReply,
    ToolCallsReply,
)
from tests.support.pg_server import database as pg_database

REPO = Path(__file__).resolve().parent.parent

API_KEY = "sk-chaos-" + hashlib.sha256(str(os.getpid()).encode()).hexdigest()[:24]
# The system prompts a compaction's summary calls open with (summarize; phase 2/hybrid).
SUMMARY_SYSTEM_PROMPTS = (SUMMARIZER_SYSTEM, STRUCTURED_COMPRESSION_PROMPT)


@dataclass
class Row:
    scenario: str
    runs: int = 0
    faults: int = 0
    written: int = 0
    found: int = 0
    invalid: int = 0
    user_errors: int = 0
    tracebacks: int = 0
    failed_checks: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return self.written - self.found

    def saw(self, stderr: str) -> None:
        """Count the error lines and tracebacks a run printed."""
        errors, tracebacks = count_errors(stderr)
        self.user_errors += errors
        self.tracebacks += tracebacks


# -- shared helpers ------------------------------------------------------------------------


def env_for(home: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(REPO),
        HARNESS9_HOME=str(home),
        OPENAI_API_KEY=API_KEY,
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    env.pop("FORCE_COLOR", None)
    env.update(extra)
    return env


# The scripted model's window. Stated, as a user of a local server is told to: without it
# every chat prints that the window is a guess, a note that is noise in a fault's stderr.
CHAOS_WINDOW = "256000"


def chat_argv(server: ScriptedLLMServer, *args: str) -> list[str]:
    window = [] if "--context-window" in args else ["--context-window", CHAOS_WINDOW]
    return [
        sys.executable,
        "-m",
        "harness9",
        "chat",
        "--model",
        "openai/chaos",
        "--api-base",
        server.base_url,
        "--yes",
        *window,
        *args,
    ]


def run_chat(
    server: ScriptedLLMServer, home: Path, text: str, *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``harness9 chat`` against ``server`` with ``text`` as its input, run to the end."""
    return subprocess.run(
        chat_argv(server, *args),
        input=text,
        capture_output=True,
        text=True,
        env=env_for(home),
        timeout=timeout,
    )


def cli(home: Path, *args: str, input: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness9", *args],
        input=input,
        capture_output=True,
        text=True,
        env=env_for(home, **env),
        timeout=300,
    )


def to_messages(body: dict[str, Any]) -> list[Message]:
    return [Message.from_dict(m) for m in body.get("messages", [])]


def is_summary_request(body: dict[str, Any]) -> bool:
    msgs = body.get("messages") or [{}]
    return msgs[0].get("role") == "system" and msgs[0].get("content") in SUMMARY_SYSTEM_PROMPTS


def key(m: Message) -> tuple:
    return (
        m.role,
        m.content,
        m.tool_call_id,
        tuple((c.id, c.name, c.arguments) for c in m.tool_calls),
    )


def saved_part(msgs: list[Message]) -> list[Message]:
    """A request's messages that come from the store (no system prompt, summary or stub)."""
    return [
        m
        for m in msgs
        if m.role != "system"
        and not (m.role == "user" and m.content.startswith(SUMMARY_PREFIX))
        and not (m.role == "tool" and m.content in (TRUNCATED_STUB, UNFINISHED_STUB))
    ]


def database_url() -> str | None:
    """The PostgreSQL store under test (--database-url), or None for the SQLite file."""
    return os.environ.get("HARNESS9_DATABASE_URL") or None


def open_store(db: Path | str) -> SessionStore:
    """The store the CLI under test uses: ``db``, or the server when --database-url is set."""
    url = database_url()
    if url:
        from harness9.store.postgres import PostgresManager

        return PostgresManager(url)
    return Manager(db)


def integrity(db: Path) -> str:
    url = database_url()
    if url:
        return pg_integrity(url)
    conn = sqlite3.connect(db)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def pg_integrity(url: str) -> str:
    """The invariants every write keeps: counts match rows, checkpoints name stored messages."""
    import psycopg

    with psycopg.connect(url) as conn:
        (miscounted,) = conn.execute(
            "SELECT count(*) FROM harness9.sessions AS s WHERE s.message_count <> "
            "(SELECT count(*) FROM harness9.messages AS m WHERE m.session_id = s.id)"
        ).fetchone() or (0,)
        (dangling,) = conn.execute(
            "SELECT count(*) FROM harness9.compactions AS c WHERE NOT EXISTS (SELECT 1 FROM "
            "harness9.messages AS m WHERE m.id = c.last_message_id AND m.session_id = c.session_id)"
        ).fetchone() or (0,)
    if miscounted or dangling:
        return f"{miscounted} sessions miscounted, {dangling} checkpoints dangling"
    return "ok"


def stored_messages(db: Path, sid: str) -> list[Message]:
    with open_store(db) as m:
        return m.open_session(sid).get_messages()


def resumable_view_is_valid(db: Path, sid: str) -> bool:
    """What `--resume` would send next: the view from the latest checkpoint, repaired."""
    with open_store(db) as m:
        view = load_view(m.open_session(sid), Message("system", "chaos"))
    return is_valid_tool_sequence(repair_orphaned_tool_pairs(view.messages))


def count_errors(text: str) -> tuple[int, int]:
    """(error lines a user saw, tracebacks)."""
    lines = text.splitlines()
    errors = sum(1 for ln in lines if ln.startswith(("harness9:", "error:")))
    return errors, text.count("Traceback (most recent call last)")


def writer_report(row: Row, tag: str, out: str, err: str) -> dict[str, Any] | None:
    """A writer process's closing JSON report (None if it printed none); its errors and
    tracebacks are counted on ``row``."""
    row.tracebacks += count_errors(err)[1]
    try:
        report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        row.failed_checks.append(f"{tag}: no report ({err.strip()[-200:]})")
        return None
    row.user_errors += len(report["errors"])
    row.failed_checks += [f"{tag}: {msg}" for msg in report["errors"]]
    return report


def check_in_order(db_keys: list[tuple], request: list[Message]) -> tuple[int, bool]:
    """(how many of the request's messages are stored, whether in the same order)."""
    index: dict[tuple, list[int]] = {}
    for i, k in enumerate(db_keys):
        index.setdefault(k, []).append(i)
    found, pos, ordered = 0, -1, True
    for m in request:
        spots = index.get(key(m))
        if not spots:
            continue
        found += 1
        nxt = [i for i in spots if i > pos]
        if not nxt:
            ordered = False
            continue
        pos = nxt[0]
    return found, ordered


# -- kill -9 ---------------------------------------------------------------------------------


class KillResponder:
    """Slow streams, tool calls that sleep, and summaries that take a while."""

    def __init__(self, rng: random.Random, tag: str) -> None:
        self.rng, self.tag, self.n = rng, tag, 0
        self.lock = threading.Lock()
        self.log: list[tuple[float, str, float, list[Message]]] = []  # (t, kind, secs, msgs)
        self.invalid = 0

    def __call__(self, body: dict[str, Any]) -> Any:
        with self.lock:
            self.n += 1
            uid = f"{self.tag}-{self.n}"
            now = time.monotonic()
            msgs = to_messages(body)
            if is_summary_request(body):
                delay = self.rng.uniform(0.2, 1.0)
                self.log.append((now, "summary", delay, msgs))
                return TextReply(f"**Goal:** chaos\n**Critical Context:** {uid}", delay=delay)
            if not is_valid_tool_sequence(msgs[1:]):
                self.invalid += 1
            depth = 0
            for m in reversed(msgs):
                if m.role == "user":
                    break
                depth += m.role == "assistant"
            if depth < 2 and self.rng.random() < 0.45:
                calls = [
                    (
                        f"call_{uid}_{i}",
                        "bash",
                        json.dumps({"command": f"sleep 0.4; echo out-{uid}-{i}"}),
                    )
                    for i in range(1 if self.rng.random() < 0.8 else 2)
                ]
                self.log.append((now, "tool", 0.3, msgs))
                return ToolCallsReply(tuple(calls), content=f"running {uid}", chunk_delay=0.005)
            text = f"reply {uid}: " + " ".join(
                self.rng.choice(["alpha", "beta", "gamma", "delta", "kappa"]) for _ in range(180)
            )
            secs = len(text) / 8 * 0.006
            self.log.append((now, "stream", secs, msgs))
            return TextReply(text, chunk_size=8, chunk_delay=0.006)

    def phase_at(self, t: float) -> str:
        with self.lock:
            if not self.log:
                return "startup"
            start, kind, secs, _ = self.log[-1]
        if t < start + secs:
            return "compaction" if kind == "summary" else "streaming"
        return "tool" if kind == "tool" else "saving/idle"


def kill_chain(
    chain: int,
    kills: int,
    seed: int,
    base: Path,
    row: Row,
    phases: dict[str, int],
    lock: threading.Lock,
) -> None:
    rng = random.Random(seed * 1000 + chain)
    home = base / f"kill{chain}"
    work = home / "work"
    work.mkdir(parents=True)
    db = home / "sessions.db"
    seen: set[tuple] = set()
    server = ScriptedLLMServer().start()
    responder = KillResponder(rng, f"k{chain}")
    server.respond_with(responder)
    sid: str | None = None
    done = run = 0
    try:
        while done < kills:
            run += 1
            args = ["--context-window", "2500", "--workdir", str(work)]
            if sid:
                args += ["--resume", sid]
            out = home / f"run{run}.err"
            first = len(server.requests)
            with open(out, "w") as err:
                proc = subprocess.Popen(
                    chat_argv(server, *args),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    env=env_for(home),
                    text=True,
                )
                assert proc.stdin is not None
                proc.stdin.write("".join(f"c{chain} r{run} t{j}: next step\n" for j in range(6)))
                proc.stdin.flush()
                deadline = time.monotonic() + 120
                while len(server.requests) == first and proc.poll() is None:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)
                time.sleep(rng.uniform(0.0, 4.0))
                killed = proc.poll() is None
                phase = responder.phase_at(time.monotonic())
                if killed:
                    proc.send_signal(signal.SIGKILL)
                proc.wait()
                proc.stdin.close()
            errors, tracebacks = count_errors(out.read_text())
            problems: list[str] = []
            if sid is None:
                with open_store(db) as m:
                    # On a shared server other chains' sessions are there too: this chain's
                    # is the one its first line named.
                    infos = [
                        i
                        for i in m.list_sessions()
                        if not database_url() or i.title.startswith(f"c{chain} r{run} ")
                    ]
                if len(infos) != 1:
                    problems.append(f"run {run}: {len(infos)} sessions after the first run")
                    continue
                sid = infos[0].id
            if integrity(db) != "ok":
                problems.append(f"run {run}: integrity_check failed")
            db_keys = [key(m) for m in stored_messages(db, sid)]
            written = found = 0
            with responder.lock:
                requests = [msgs for _, kind, _, msgs in responder.log if kind != "summary"]
            for msgs in requests:
                part = saved_part(msgs[1:])
                new = [m for m in part if key(m) not in seen]
                seen.update(key(m) for m in new)
                written += len(new)
                got, ordered = check_in_order(db_keys, part)
                if got != len(part) or not ordered:
                    stored = set(db_keys)
                    gone = [m for m in part if key(m) not in stored]
                    what = (
                        f"{gone[0].role} message {gone[0].content[:60]!r} not stored"
                        if gone
                        else "reordered"
                    )
                    problems.append(
                        f"run {run}: request history missing or reordered in the store ({what})"
                    )
            found = sum(1 for k in seen if k in set(db_keys))
            with responder.lock:
                responder.log = [e for e in responder.log if e[1] == "summary"][-1:]
            if len(db_keys) != len(set(db_keys)):
                problems.append(f"run {run}: duplicated messages")
            if not resumable_view_is_valid(db, sid):
                problems.append(f"run {run}: the resumable view is not a valid sequence")
            with lock:
                row.runs += 1
                row.written += written
                row.user_errors += errors if not killed else 0
                row.tracebacks += tracebacks
                row.failed_checks += problems
                if killed:
                    row.faults += 1
                    phases[phase] = phases.get(phase, 0) + 1
                    done += 1
            chain_found_total[chain] = found
            chain_seen_total[chain] = len(seen)
        # A last, clean resume: the session must continue after all those kills.
        with open(home / "final.err", "w") as err:
            final = subprocess.run(
                chat_argv(
                    server, "--context-window", "2500", "--workdir", str(work), "--resume", str(sid)
                ),
                input="final: are we fine?\n",
                stdout=subprocess.PIPE,
                stderr=err,
                env=env_for(home),
                text=True,
                timeout=300,
            )
        errors, tracebacks = count_errors((home / "final.err").read_text())
        with lock:
            row.runs += 1
            row.user_errors += errors
            row.tracebacks += tracebacks
            row.invalid += responder.invalid
            if final.returncode != 0:
                row.failed_checks.append(f"chain {chain}: final resume exited {final.returncode}")
            if integrity(db) != "ok":
                row.failed_checks.append(f"chain {chain}: integrity_check failed at the end")
            with open_store(db) as m:
                chain_checkpoints[chain] = len(m.open_session(str(sid)).list_checkpoints())
    finally:
        server.stop()


chain_found_total: dict[int, int] = {}
chain_checkpoints: dict[int, int] = {}
chain_seen_total: dict[int, int] = {}


def scenario_kill(base: Path, kills: int, seed: int, jobs: int) -> tuple[Row, dict[str, int]]:
    row, phases, lock = Row("kill -9 mid-turn"), {}, threading.Lock()
    per = [kills // jobs + (1 if i < kills % jobs else 0) for i in range(jobs)]
    threads = [
        threading.Thread(target=kill_chain, args=(i, per[i], seed, base, row, phases, lock))
        for i in range(jobs)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    row.written = sum(chain_seen_total.values())
    row.found = sum(chain_found_total.values())
    return row, phases


# -- concurrency -------------------------------------------------------------------------------


def writer_main(db: str, sid: str, count: int, tag: str, stop: str = "") -> None:
    """Child process: append ``count`` messages (or, with ``stop``, until that file
    exists), print what committed (JSON)."""
    acked: list[int] = []
    errors: list[str] = []
    longest = 0.0
    with open_store(db) as m:
        s = m.open_session(sid)
        i = 0
        while (not stop and i < count) or (stop and not os.path.exists(stop)):
            batch = [
                Message("user" if (i + j) % 2 == 0 else "assistant", f"{tag} {i + j}")
                for j in range(1 + (i % 3 == 0))
            ]
            batch = batch if stop else batch[: count - i]
            t0 = time.monotonic()
            try:
                s.add_messages(batch)
                acked += range(i, i + len(batch))
            except Exception as exc:  # noqa: BLE001 - reported, counted as an error
                errors.append(f"{type(exc).__name__}: {exc}")
            longest = max(longest, time.monotonic() - t0)
            i += len(batch)
    print(json.dumps({"acked": acked, "errors": errors, "longest_wait": longest}))


class ChatResponder:
    """Quick replies for the concurrent chats; one tool call in three."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.n = 0
        self.requests: list[list[Message]] = []
        self.invalid = 0

    def __call__(self, body: dict[str, Any]) -> Any:
        msgs = to_messages(body)
        with self.lock:
            self.n += 1
            uid = self.n
            self.requests.append(msgs)
            if not is_valid_tool_sequence(msgs[1:]):
                self.invalid += 1
        if msgs[-1].role == "user" and uid % 3 == 0:
            return ToolCallsReply(((f"cc_{uid}", "bash", json.dumps({"command": f"echo t{uid}"})),))
        return TextReply(f"ack {uid}", chunk_size=4)


def scenario_concurrency(base: Path, writes: int, chat_turns: int) -> Row:
    row = Row("concurrency")
    home = base / "conc"
    home.mkdir()
    db = home / "sessions.db"
    with open_store(db) as m:
        s1, s2, s3 = m.new_session(), m.new_session(), m.new_session()
    server = ScriptedLLMServer().start()
    responder = ChatResponder()
    server.respond_with(responder)
    stop = threading.Event()
    deletes = {"runs": 0, "errors": 0, "tracebacks": 0, "seeded": 0}
    stderr_texts: list[str] = []

    def seeder() -> None:
        mark = "%s" if database_url() else "?"
        with open_store(db) as m:
            while not stop.is_set():
                old = m.new_session()
                old.add_messages([Message("user", "old session")])
                with m.transaction() as conn:  # type: ignore[attr-defined]
                    conn.execute(
                        f"UPDATE sessions SET updated_at = updated_at - 172800 WHERE id = {mark}",
                        (old.session_id,),
                    )
                deletes["seeded"] += 1
                time.sleep(0.1)

    def delete_loop() -> None:
        while not stop.is_set():
            r = cli(home, "sessions", "delete", "--older-than", "1d", "--yes")
            e, t = count_errors(r.stderr)
            deletes["runs"] += 1
            deletes["errors"] += e + (r.returncode != 0 and e == 0)
            deletes["tracebacks"] += t
            if r.stderr:
                stderr_texts.append(r.stderr)

    # Two writers per session (the same-session rule), 4 processes in all.
    per = writes // 4
    writer_specs = [
        (s1.session_id, "w1a"),
        (s1.session_id, "w1b"),
        (s2.session_id, "w2a"),
        (s2.session_id, "w2b"),
    ]
    helpers = [threading.Thread(target=seeder), threading.Thread(target=delete_loop)]
    for t in helpers:
        t.start()
    writers = [
        subprocess.Popen(
            [sys.executable, "-m", "scripts.chaos", "--writer", str(db), sid, str(per), tag],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env_for(home),
        )
        for sid, tag in writer_specs
    ]
    # Threads in this process: four sharing one Manager on s3, two with their own.
    thread_acks: dict[str, list[int]] = {}

    def thread_writer(tag: str, shared: SessionStore | None) -> None:
        m = shared or open_store(db)
        acked = []
        try:
            s = m.open_session(s3.session_id)
            for i in range(50):
                s.add_messages([Message("user", f"{tag} {i}")])
                acked.append(i)
        finally:
            thread_acks[tag] = acked
            if shared is None:
                m.close()

    shared = open_store(db)
    threads = [
        threading.Thread(target=thread_writer, args=(f"th{i}", shared if i < 4 else None))
        for i in range(6)
    ]
    lines = lambda tag: "".join(f"{tag} turn {j}\n" for j in range(chat_turns))  # noqa: E731
    chats = {
        "chatA": (s1.session_id, lines("chatA")),
        "chatB": (s2.session_id, lines("chatB")),
        "chatC": (s1.session_id, lines("chatC")),  # same session as chatA
    }
    chat_procs = {
        name: subprocess.Popen(
            chat_argv(server, "--resume", sid, "--workdir", str(home)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env_for(home),
        )
        for name, (sid, _) in chats.items()
    }
    for t in threads:
        t.start()
    results = {}
    for name, p in chat_procs.items():
        out, err = p.communicate(chats[name][1], timeout=600)
        results[name] = (p.returncode, out, err)
    writer_out = [p.communicate(timeout=600) for p in writers]
    for t in threads:
        t.join()
    shared.close()
    stop.set()
    for t in helpers:
        t.join()
    server.stop()

    row.runs = len(writers) + len(threads) + len(chat_procs) + deletes["runs"]
    row.faults = deletes["runs"]  # each clean-up run races every writer
    with open_store(db) as m:
        contents = {
            sid: [x.content for x in m.open_session(sid).get_messages()]
            for sid in (s1.session_id, s2.session_id, s3.session_id)
        }
        all_keys = {sid: [key(x) for x in m.open_session(sid).get_messages()] for sid in contents}

    def check_writer(sid: str, tag: str, acked: list[int]) -> None:
        mine = [c for c in contents[sid] if c.startswith(tag + " ")]
        numbers = [int(c.split()[1]) for c in mine]
        row.written += len(acked)
        row.found += len(set(acked) & set(numbers))
        if len(numbers) != len(set(numbers)):
            row.failed_checks.append(f"{tag}: duplicated messages")
        if numbers != sorted(numbers):
            row.failed_checks.append(f"{tag}: order not preserved")

    for (sid, tag), (out, err) in zip(writer_specs, writer_out, strict=True):
        report = writer_report(row, tag, out, err)
        if report is not None:
            check_writer(sid, tag, report["acked"])
    for tag, acked in thread_acks.items():
        check_writer(s3.session_id, tag, acked)
        if len(acked) != 50:
            row.failed_checks.append(f"{tag}: only {len(acked)} of 50 writes committed")
    for name, (code, _out, err) in results.items():
        sid = chats[name][0]
        row.saw(err)
        if code != 0:
            row.failed_checks.append(f"{name}: exit {code}: {err.strip()[-200:]}")
        mine = [c for c in contents[sid] if c.startswith(name + " turn ")]
        if mine != [f"{name} turn {j}" for j in range(chat_turns)]:
            row.failed_checks.append(f"{name}: its turns are missing, doubled or out of order")
    # Every message a chat request carried came from the store and must still be there.
    chat_seen: set[tuple] = set()
    for msgs in responder.requests:
        part = saved_part(msgs[1:])
        sid_keys = next(
            (all_keys[s] for s in all_keys if part and key(part[0]) in set(all_keys[s])), []
        )
        got, ordered = check_in_order(sid_keys, part)
        if got != len(part) or not ordered:
            row.failed_checks.append("a chat request's history is missing or reordered")
        chat_seen.update(key(m) for m in part)
    everything = {k for ks in all_keys.values() for k in ks}
    row.written += len(chat_seen)
    row.found += len(chat_seen & everything)
    row.invalid += responder.invalid
    for sid in all_keys:
        if not resumable_view_is_valid(db, sid):
            row.invalid += 1
    row.user_errors += deletes["errors"]
    row.tracebacks += deletes["tracebacks"]
    if any("locked" in t for t in stderr_texts):
        row.failed_checks.append("'database is locked' reached a user")
    if integrity(db) != "ok":
        row.failed_checks.append("integrity_check failed")
    row.scenario += f" ({deletes['runs']} clean-ups, {deletes['seeded']} idle sessions seeded)"
    return row


# -- search and clean-up during writes -----------------------------------------------------------


def build_large_store(db: Path, sessions: int, per_session: int) -> list[str]:
    """``sessions`` x ``per_session`` messages through the public API, none indexed yet;
    the first half made two days old. Returns the old sessions' ids."""
    rnd = random.Random(15)
    words = [f"w{k}" for k in range(3000)]
    pool = [
        Message(
            "user" if k % 2 == 0 else "assistant",
            " ".join(rnd.choices(words, k=60)) + (" nightly build" if k % 997 == 5 else ""),
        )
        for k in range(per_session * 7)
    ]
    old: list[str] = []
    with Manager(db) as m:
        for i in range(sessions):
            s = m.new_session()
            at = (i * 13) % (len(pool) - per_session)
            s.add_messages(pool[at : at + per_session])
            if i < sessions // 2:
                old.append(s.session_id)
        with m.transaction() as conn:
            conn.executemany(
                "UPDATE sessions SET updated_at = updated_at - 172800 WHERE id = ?",
                [(sid,) for sid in old],
            )
    return old


def scenario_search_cleanup(base: Path, sessions: int, per_session: int, rounds: int) -> Row:
    """Writers save as fast as they can while `sessions search` catches up the index of a
    large store nobody searched yet and `sessions delete --older-than` removes half of it;
    both run in loops until each has run ``rounds`` times, then the writers stop."""
    row = Row("search and clean-up during writes")
    home = base / "scale"
    home.mkdir()
    db = home / "sessions.db"
    old = build_large_store(db, sessions, per_session)
    with Manager(db) as m:
        targets = [m.new_session().session_id for _ in range(2)]
    specs = [(targets[0], "s1a"), (targets[0], "s1b"), (targets[1], "s2a"), (targets[1], "s2b")]
    stop = home / "stop-writers"
    writers = [
        subprocess.Popen(
            [sys.executable, "-m", "scripts.chaos", "--writer", str(db), sid, "0", tag, str(stop)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env_for(home),
        )
        for sid, tag in specs
    ]
    runs = {"search": 0, "delete": 0}
    failures: list[str] = []
    first_hits = [""]

    def until_writers_end(kind: str, argv: list[str]) -> None:
        while True:
            r = cli(home, *argv)
            runs[kind] += 1
            row.saw(r.stderr)
            if r.returncode != 0:
                failures.append(f"{kind}: exit {r.returncode}: {r.stderr.strip()[-200:]}")
            if kind == "search" and runs[kind] == 1:
                first_hits[0] = r.stdout
            if runs[kind] >= rounds:
                return

    loops = [
        threading.Thread(
            target=until_writers_end, args=("search", ["sessions", "search", "nightly"])
        ),
        threading.Thread(
            target=until_writers_end,
            args=("delete", ["sessions", "delete", "--older-than", "1d", "--yes"]),
        ),
    ]
    for t in loops:
        t.start()
    for t in loops:
        t.join()
    stop.touch()
    outputs = [w.communicate(timeout=600) for w in writers]
    row.runs = len(writers) + runs["search"] + runs["delete"]
    row.faults = runs["search"] + runs["delete"]
    longest = 0.0
    with Manager(db) as m:
        contents = {sid: [x.content for x in m.open_session(sid).get_messages()] for sid in targets}
        left_old = [i.id for i in m.list_sessions() if i.id in set(old)]
    for (sid, tag), (out, err) in zip(specs, outputs, strict=True):
        report = writer_report(row, tag, out, err)
        if report is None:
            continue
        longest = max(longest, report.get("longest_wait", 0.0))
        mine = [int(c.split()[1]) for c in contents[sid] if c.startswith(tag + " ")]
        row.written += len(report["acked"])
        row.found += len(set(report["acked"]) & set(mine))
    row.failed_checks += failures
    if "nightly" not in first_hits[0]:
        row.failed_checks.append("the first search did not find the planted messages")
    if left_old:
        row.failed_checks.append(f"{len(left_old)} old sessions were not deleted")
    # The longest wait is shown, not checked: four writers with no pause mostly queue
    # behind each other, and on a loaded machine that alone can take seconds.
    # bench_store.py --scale checks the < 1 s bound with a writer that saves like a chat.
    if integrity(db) != "ok":
        row.failed_checks.append("integrity_check failed")
    row.scenario += (
        f" ({sessions * per_session:,} messages, {runs['search']} searches, "
        f"{runs['delete']} clean-ups, longest write {longest * 1000:.0f} ms)"
    )
    return row


# -- damaged state ---------------------------------------------------------------------------


def without_recap(err: str) -> str:
    """``err`` without the resume recap `chat --resume` prints before its first prompt.

    The recap (the session line, then the last exchange, indented) is start-up
    information, not an error: what is checked is that the fault is one line.
    """
    lines = err.splitlines(keepends=True)
    if not lines or not lines[0].startswith("resumed session "):
        return err
    rest = lines[1:]
    while rest and rest[0].startswith("  "):
        rest.pop(0)
    return "".join(rest)


def one_line_with_advice(
    r: subprocess.CompletedProcess[str], path: Path, advice: str
) -> str | None:
    err = without_recap(r.stderr)
    if r.returncode == 0:
        return f"exit 0 (stderr {err!r})"
    if err.count("\n") != 1:
        return f"not one line: {r.stderr!r}"
    if str(path) not in err:
        return f"does not name {path}: {err!r}"
    if advice not in err:
        return f"no advice {advice!r}: {err!r}"
    return None


def make_store(home: Path, messages: int = 40) -> tuple[Path, str]:
    home.mkdir(parents=True, exist_ok=True)
    db = home / "sessions.db"
    with Manager(db) as m:
        s = m.new_session()
        for i in range(messages):
            s.add_messages([Message("user" if i % 2 == 0 else "assistant", f"m{i} " + "x" * 3000)])
        m.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db, s.session_id


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def scenario_damaged(base: Path, server: ScriptedLLMServer) -> Row:
    row = Row("damaged state")
    cases: list[tuple[str, Callable[[Path], tuple[Path, list[list[str]], str]]]] = []

    def garbage(home: Path):
        home.mkdir(parents=True)
        (home / "sessions.db").write_bytes(os.urandom(64 * 1024))
        return home / "sessions.db", [["sessions", "list"]], "move it aside"

    def truncated(home: Path):
        db, _ = make_store(home)
        db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
        return (
            db,
            [["sessions", "list"], ["sessions", "delete", "--older-than", "1s", "--yes"]],
            "move it aside",
        )

    def corrupt_page(home: Path):
        db, sid = make_store(home)
        data = bytearray(db.read_bytes())
        for n in range(len(data) // 4096 - 8, len(data) // 4096):
            data[n * 4096 : (n + 1) * 4096] = b"\xa5" * 4096
        db.write_bytes(bytes(data))
        return db, [["sessions", "show", sid]], "move it aside"

    def newer(home: Path):
        home.mkdir(parents=True)
        conn = sqlite3.connect(home / "sessions.db")
        conn.execute("CREATE TABLE t (x)")
        conn.execute("PRAGMA user_version = 999")
        conn.commit()
        conn.close()
        return home / "sessions.db", [["sessions", "list"]], "upgrade harness9"

    def home_is_file(home: Path):
        home.parent.mkdir(parents=True, exist_ok=True)
        home.write_text("a file where the home directory should be")
        return home, [["chat-x"]], "HARNESS9_HOME"

    cases = [
        ("garbage", garbage),
        ("truncated", truncated),
        ("corrupt page", corrupt_page),
        ("newer schema", newer),
        ("home is a file", home_is_file),
    ]
    for name, make in cases:
        home = base / "damaged" / name.replace(" ", "_")
        path, commands, advice = make(home)
        before = digest(path)
        for argv in commands:
            r = run_chat(server, home, "hi\n") if argv == ["chat-x"] else cli(home, *argv)
            row.runs += 1
            row.faults += 1
            row.saw(r.stderr)
            problem = one_line_with_advice(
                r,
                path,
                advice,  # the store, or for a bad home the first file chat reads in it
            )
            if problem:
                row.failed_checks.append(f"{name}: {problem}")
        if digest(path) != before:
            row.failed_checks.append(f"{name}: the file was changed")

    if os.geteuid() == 0 and shutil.which("setpriv"):
        home = base / "damaged" / "unreadable"
        make_store(home, 2)
        os.chmod(home, 0o700)  # owned by root: unreadable for nobody
        probe = base / "damaged"
        os.chmod(base, 0o755)
        os.chmod(probe, 0o755)
        r = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                sys.executable,
                "-m",
                "harness9",
                "sessions",
                "list",
            ],
            capture_output=True,
            text=True,
            env=env_for(home),
            timeout=120,
        )
        row.runs += 1
        row.faults += 1
        row.saw(r.stderr)
        problem = one_line_with_advice(r, home / "sessions.db", "check that you own it")
        if problem:
            row.failed_checks.append(f"unreadable home: {problem}")

    damaged_rows(base, server, row)
    full = scenario_full_disk(base, server, row)
    if full:
        row.scenario += f" ({full})"
    return row


def damaged_rows(base: Path, server: ScriptedLLMServer, row: Row) -> None:
    """Rows damaged in place: every reader warns and skips them, chat never sends them."""
    home = base / "damaged" / "rows"
    db, sid = make_store(home, 12)
    conn = sqlite3.connect(db)
    ids = [r[0] for r in conn.execute("SELECT id FROM messages ORDER BY id")]
    damage = {
        ids[3]: "UPDATE messages SET content = CAST(content AS BLOB) WHERE id = ?",
        ids[5]: "UPDATE messages SET created_at = 1e300 WHERE id = ?",
        ids[7]: "UPDATE messages SET role = 'wizard' WHERE id = ?",
    }
    with conn:
        for rid, sql in damage.items():
            conn.execute(sql, (rid,))
        conn.execute("UPDATE sessions SET updated_at = 1e300 WHERE id = ?", (sid,))
    conn.close()
    intact = len(ids) - len(damage)
    requests: list[list[Message]] = []

    def respond(body: dict[str, Any]) -> Any:
        requests.append(to_messages(body))
        return TextReply("still fine")

    server.respond_with(respond)
    runs = [
        (["sessions", "show", sid, "--json"], True),
        (["sessions", "export", sid, "-f", "json"], True),
        (["sessions", "export", sid], True),
        (["sessions", "list", "--json"], False),
        (["sessions", "search", "m1"], False),
    ]
    results = [(argv, cli(home, *argv), warns) for argv, warns in runs]
    chat = run_chat(server, home, "next\n", "--resume", sid)
    server.respond_with(None)
    results.append((["chat", "--resume"], chat, True))
    for argv, r, warns in results:
        row.runs += 1
        row.faults += len(damage)
        row.saw(r.stderr)
        if r.returncode != 0:
            row.failed_checks.append(f"damaged rows: {argv} exit {r.returncode} {r.stderr!r}")
        if "internal error" in r.stderr or "HTTP 500" in r.stderr:
            row.failed_checks.append(f"damaged rows: {argv}: {r.stderr!r}")
        if warns and any(
            f"warning: message row {rid} is corrupt" not in r.stderr for rid in damage
        ):
            row.failed_checks.append(f"damaged rows: {argv} did not warn: {r.stderr!r}")
    shown = json.loads(results[0][1].stdout or "{}")
    if len(shown.get("messages", [])) != intact:
        row.failed_checks.append(f"damaged rows: show has {len(shown.get('messages', []))}")
    sent = [m for r in requests for m in r[1:]]
    if any(m.role not in ("user", "assistant", "tool") for m in sent):
        row.failed_checks.append("damaged rows: a bad role reached the model")
    if requests and len(requests[-1]) - 1 != intact + 1:
        row.failed_checks.append(f"damaged rows: the model got {len(requests[-1]) - 1} messages")
    row.written += intact
    row.found += len(shown.get("messages", []))


def scenario_full_disk(base: Path, server: ScriptedLLMServer, row: Row) -> str:
    mnt = base / "tmpfs"
    mnt.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True
    ).returncode:
        return "full disk skipped: cannot mount a tmpfs here"
    try:
        home = mnt / "home"
        db, sid = make_store(home, 10)
        # Full when the chat opens the store, then full in the middle of a turn (room for
        # the user's line and the -wal/-shm files, none for a 200 KB reply).
        for case, room in (("at open", 0), ("mid-turn", 192 * 1024)):
            before = stored_messages(db, sid)
            filler = mnt / "filler"
            with open(filler, "wb", buffering=0) as f:
                try:
                    while True:
                        f.write(b"\0" * 16384)
                        f.flush()
                except OSError:
                    pass
            if room:
                os.truncate(filler, max(0, filler.stat().st_size - room))
            big = " ".join(f"word{i}" for i in range(25_000))  # ~200 KB, no repeated chunk
            server.respond_with(lambda body, big=big: TextReply(big, chunk_size=4096))
            r = run_chat(server, home, "a long answer please\n", "--resume", sid)
            server.respond_with(None)
            row.runs += 1
            row.faults += 1
            row.saw(r.stderr)
            problem = one_line_with_advice(r, db, "free some disk space")
            if problem:
                row.failed_checks.append(f"full disk {case}: {problem}")
            filler.unlink()
            after = stored_messages(db, sid)
            row.written += len(before)
            row.found += sum(1 for m in before if key(m) in {key(x) for x in after})
            if integrity(db) != "ok":
                row.failed_checks.append(f"full disk {case}: integrity_check failed")
            with Manager(db) as m:
                m.open_session(sid).add_messages([Message("user", "space is back")])
        return "full disk on a 2 MB tmpfs"
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


# -- provider faults ---------------------------------------------------------------------------

FAULT_SCRIPT: dict[str, list[Any]] = {
    "timeout": [TextReply("", delay=3.0), TextReply("answered after a timeout")],
    "429": [
        ErrorReply(429, "slow down", headers={"Retry-After": "1"}),
        TextReply("answered after 429"),
    ],
    "5xx": [
        ErrorReply(503, "busy"),
        ErrorReply(502, "bad gateway"),
        TextReply("answered after 5xx"),
    ],
    "5xx-long": [ErrorReply(500, "down")] * 4,
    "break-before-text": [StreamBreakReply(""), TextReply("answered after a dropped connection")],
    "break-mid-reply": [StreamBreakReply("half of a repl")],
    "empty": [EmptyReply()],
    "bad-json": [ToolCallsReply((("bj1", "read_file", '{"path": '),)), TextReply("fixed my JSON")],
    "unknown-tool": [ToolCallsReply((("ut1", "teleport", "{}"),)), TextReply("used a real tool")],
}
# The turns that cannot succeed. Without streaming a broken body shows no text, so it is
# retried like any dropped connection (and the next reply is the default "done").
EXPECTED_ERRORS = {True: {"5xx-long", "break-mid-reply", "empty"}, False: {"5xx-long", "empty"}}


def scenario_provider(base: Path, server: ScriptedLLMServer, stream: bool) -> Row:
    row = Row("provider faults" + ("" if stream else " (--no-stream)"))
    home = base / ("provider" + ("" if stream else "-nostream"))
    home.mkdir()
    queues = {name: list(replies) for name, replies in FAULT_SCRIPT.items()}
    invalid = [0]
    seen: set[tuple] = set()

    def respond(body: dict[str, Any]) -> Any:
        msgs = to_messages(body)
        if not is_valid_tool_sequence(msgs[1:]):
            invalid[0] += 1
        seen.update(key(m) for m in saved_part(msgs[1:]))
        last_user = next(m.content for m in reversed(msgs) if m.role == "user")
        q = queues[last_user]
        reply = q.pop(0) if q else TextReply("done")
        return reply

    server.respond_with(respond)
    args = ["--timeout", "1", "--workdir", str(home)] + ([] if stream else ["--no-stream"])
    r = run_chat(server, home, "".join(f"{n}\n" for n in FAULT_SCRIPT), *args, timeout=600)
    server.respond_with(None)
    row.runs = 1
    row.faults = sum(
        sum(1 for x in v if not isinstance(x, TextReply) or x.delay) for v in FAULT_SCRIPT.values()
    )
    e, t = count_errors(r.stderr)
    row.user_errors, row.tracebacks = e, t
    with Manager(home / "sessions.db") as m:
        [info] = m.list_sessions()
        msgs = m.open_session(info.id).get_messages()
    stored_keys = {key(x) for x in msgs}
    row.written = len(seen)
    row.found = len(seen & stored_keys)
    row.invalid = invalid[0] + (not is_valid_tool_sequence(repair_orphaned_tool_pairs(msgs)))
    users = [x.content for x in msgs if x.role == "user"]
    if users != list(FAULT_SCRIPT):
        row.failed_checks.append(f"user turns stored: {users}")
    if e != len(EXPECTED_ERRORS[stream]):
        row.failed_checks.append(
            f"{e} errors shown, expected {len(EXPECTED_ERRORS[stream])}: {r.stderr!r}"
        )
    if r.returncode != 1:
        row.failed_checks.append(f"exit code {r.returncode}, expected 1 (some turns failed)")
    for text in (
        "answered after a timeout",
        "answered after 429",
        "answered after 5xx",
        "answered after a dropped connection",
        "fixed my JSON",
        "used a real tool",
    ):
        if text not in r.stdout:
            row.failed_checks.append(f"missing reply {text!r}")
    return row


# -- hostile input ------------------------------------------------------------------------------


def run_measured(argv: list[str], stdin: str, env: dict[str, str]) -> tuple[int, str, str, int]:
    """Run a process; return (exit code, stdout, stderr, its peak RSS in KB)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=out, stderr=err, env=env, text=True
        )
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        proc.stdin.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), usage.ru_maxrss


def scenario_hostile(base: Path, server: ScriptedLLMServer, big_mb: int) -> tuple[Row, str]:
    row = Row("hostile input")
    home = base / "hostile"
    work = home / "work"
    outside = base / "outside"
    work.mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("TOPSECRET-42\n")
    (work / "link_file").symlink_to(outside / "secret.txt")
    (work / "link_dir").symlink_to(outside)
    escapes = "ESC\x1b]0;pwned\x07 CLEAR\x1b[2J BELL\x07 END"
    calls = [
        ("read_file", {"path": "../outside/secret.txt"}),
        ("read_file", {"path": "link_file"}),
        ("read_file", {"path": "link_dir/secret.txt"}),
        ("read_file", {"path": str(outside / "secret.txt")}),
        ("write_file", {"path": "../outside/escaped.txt", "content": "x"}),
        ("write_file", {"path": "link_dir/escaped.txt", "content": "x"}),
        ("offload_recall", {"id": "../outside/secret.txt"}),
        ("offload_recall", {"id": "ofl_000000000000/../../../outside/secret.txt"}),
        ("bash", {"command": "env"}),
        ("bash", {"command": "printf '\\033]0;pwned\\007\\033[2J'"}),
    ]
    script = [ToolCallsReply(((f"h{i}", n, json.dumps(a)),)) for i, (n, a) in enumerate(calls)]
    script.append(ErrorReply(400, f"Incorrect API key provided: {API_KEY}"))
    script.append(TextReply(escapes))
    requests: list[list[Message]] = []

    def respond(body: dict[str, Any]) -> Any:
        requests.append(to_messages(body))
        return script.pop(0) if script else TextReply("ok")

    server.respond_with(respond)
    secrets = {"GITHUB_TOKEN": "ghp-chaos-token", "AWS_SECRET_ACCESS_KEY": "aws-chaos-secret"}
    code, out, err, _ = run_measured(
        chat_argv(server, "--workdir", str(work)), "probe\nagain\n", env_for(home, **secrets)
    )
    server.respond_with(None)
    row.runs += 1
    row.faults += len(calls) + 2
    row.saw(err)
    sent = json.dumps([[m.content for m in r] for r in requests])
    if "TOPSECRET" in sent:
        row.failed_checks.append("a file outside the workdir reached the model")
    if list(outside.glob("escaped*")):
        row.failed_checks.append("a write escaped the workdir")
    if "\x1b" in out + err or "\x07" in out + err:
        row.failed_checks.append("a raw escape sequence reached the terminal")
    [info] = Manager(home / "sessions.db").list_sessions()
    shown = cli(home, "sessions", "show", info.id)
    if "\x1b" in shown.stdout or "\x07" in shown.stdout:
        row.failed_checks.append("sessions show printed a raw escape sequence")
    leaks = [p for p in home.rglob("*") if p.is_file() and API_KEY.encode() in p.read_bytes()]
    if API_KEY in out + err + shown.stdout + shown.stderr or leaks:
        row.failed_checks.append(f"the API key leaked: {leaks}")
    for name, value in secrets.items():
        if value in sent or any(value.encode() in p.read_bytes() for p in home.rglob("*.db")):
            row.failed_checks.append(f"{name} reached the model or the database")
    hostile_imports(home, info.id, row)
    for bad in ("../../etc/passwd", "..", "/tmp", "0" * 37):
        for argv in (["sessions", "show", bad], ["sessions", "delete", bad, "--yes"]):
            r = cli(home, *argv)
            row.runs += 1
            row.faults += 1
            if r.returncode != 1 or r.stderr.count("\n") != 1:
                row.failed_checks.append(f"{argv}: {r.returncode} {r.stderr!r}")
    seen = {key(m) for r in requests for m in saved_part(r[1:])}
    stored = {key(m) for m in stored_messages(home / "sessions.db", info.id)}
    row.written, row.found = len(seen), len(seen & stored)
    row.invalid += sum(not is_valid_tool_sequence(r[1:]) for r in requests)

    # A huge tool output: the process's peak memory against the same run with a tiny one.
    def peak(command: str) -> int:
        replies = [
            ToolCallsReply((("big", "bash", json.dumps({"command": command})),)),
            TextReply("seen"),
        ]
        server.respond_with(lambda body: replies.pop(0) if replies else TextReply("ok"))
        h = base / f"mem{len(command)}"
        h.mkdir()
        code, _, err, rss = run_measured(chat_argv(server, "--workdir", str(h)), "go\n", env_for(h))
        server.respond_with(None)
        if code != 0:
            row.failed_checks.append(f"{command[:30]}: exit {code} {err[-200:]!r}")
        return rss

    small = peak("echo small")
    big = peak(f"head -c {big_mb * 1_000_000} /dev/zero | tr '\\0' a")
    row.runs += 2
    row.faults += 1
    if big - small > 64 * 1024:
        row.failed_checks.append(f"peak RSS grew {big - small} KB for a {big_mb} MB output")
    return (
        row,
        f"peak RSS {small / 1024:.0f} MB with a 5-byte tool output, {big / 1024:.0f} MB with {big_mb} MB ({big / small:.2f}x)",
    )


def hostile_imports(home: Path, sid: str, row: Row) -> None:
    """Exports edited to carry bad values: each is one line, exit 1, and writes nothing."""
    exported = cli(home, "sessions", "export", sid, "-f", "json")
    doc = json.loads(exported.stdout)

    def edit(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        d = json.loads(json.dumps(doc))
        change(d)
        return d

    edits = {
        "role wizard": edit(lambda d: d["messages"][0].update(role="wizard")),
        "1e300 time": edit(lambda d: d.update(created_at=1e300)),
        "content a number": edit(lambda d: d["messages"][0].update(content=42)),
        "tool_calls a string": edit(lambda d: d["messages"][0].update(tool_calls="ls")),
        "todo status": edit(lambda d: d["todos"].append({"content": "x", "status": "hacked"})),
        "huge id": edit(lambda d: d["messages"][-1].update(id=2**80)),
        "offload traversal": edit(
            lambda d: d.update(offloads=[{"id": "../../../etc/x", "content": "x"}])
        ),
    }
    before = [i.id for i in Manager(home / "sessions.db").list_sessions()]
    for name, d in edits.items():
        r = cli(home, "sessions", "import", "-", "--new-id", input=json.dumps(d))
        row.runs += 1
        row.faults += 1
        row.saw(r.stderr)
        if r.returncode != 1 or r.stderr.count("\n") != 1 or "cannot import" not in r.stderr:
            row.failed_checks.append(f"import {name}: exit {r.returncode} {r.stderr!r}")
    after = [i.id for i in Manager(home / "sessions.db").list_sessions()]
    if after != before:
        row.failed_checks.append("a hostile import wrote a session")
    listed = cli(home, "sessions", "list", "--json")
    if listed.returncode != 0:
        row.failed_checks.append(f"list after hostile imports: {listed.stderr!r}")


# -- main -----------------------------------------------------------------------------------------


def print_table(rows: list[Row]) -> None:
    head = (
        "scenario",
        "runs",
        "faults injected",
        "messages written",
        "messages found",
        "lost",
        "invalid sequences",
        "errors shown",
        "tracebacks",
    )
    data = [
        (
            r.scenario,
            r.runs,
            r.faults,
            r.written,
            r.found,
            r.lost,
            r.invalid,
            r.user_errors,
            r.tracebacks,
        )
        for r in rows
    ]
    total = ("total", *(sum(r[i] for r in data) for i in range(1, len(head))))
    widths = [max(len(str(x[i])) for x in [head, *data, total]) for i in range(len(head))]

    def fmt(cells):
        return "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )  # noqa: E731

    print(fmt(head))
    print("  ".join("-" * w for w in widths))
    for d in data:
        print(fmt(d))
    print(fmt(total))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        writer_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], *sys.argv[6:7])
        return 0
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="20 kill points, 200 writes, 20 MB output")
    ap.add_argument("--kills", type=int, help="kill points (default 200; --quick 20)")
    ap.add_argument("--writes", type=int, help="writes from writer processes (default 1000)")
    ap.add_argument("--seed", type=int, default=9)
    ap.add_argument("--jobs", type=int, default=2, help="parallel kill chains")
    ap.add_argument(
        "--only",
        "--scenario",
        help="comma-separated: kill,concurrency,search-cleanup,damaged,provider,hostile",
    )
    ap.add_argument(
        "--large",
        type=int,
        help="messages in the search-and-clean-up store (default 200,000; --quick 20,000)",
    )
    ap.add_argument(
        "--database-url",
        metavar="URL",
        help="run kill and concurrency against this PostgreSQL store ('temp': a throwaway "
        "server); the other scenarios are about the SQLite file and do not run",
    )
    ns = ap.parse_args()
    kills = ns.kills or (20 if ns.quick else 200)
    writes = ns.writes or (200 if ns.quick else 1000)
    only = set((ns.only or "kill,concurrency,search-cleanup,damaged,provider,hostile").split(","))
    if ns.database_url:
        only &= {"kill", "concurrency"}
        with pg_database(ns.database_url, "chaos") as url:
            os.environ["HARNESS9_DATABASE_URL"] = url
            return run(ns, only, kills, writes)
    return run(ns, only, kills, writes)


def run(ns: argparse.Namespace, only: set[str], kills: int, writes: int) -> int:
    large = ns.large or (20_000 if ns.quick else 200_000)
    started = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="harness9-chaos-"))
    rows: list[Row] = []
    notes: list[str] = []
    server = ScriptedLLMServer().start()
    try:
        if "provider" in only:
            rows.append(scenario_provider(base, server, stream=True))
            rows.append(scenario_provider(base, server, stream=False))
        if "damaged" in only:
            rows.append(scenario_damaged(base, server))
        if "hostile" in only:
            row, note = scenario_hostile(base, server, 20 if ns.quick else 200)
            rows.append(row)
            notes.append(note)
        if "concurrency" in only:
            rows.append(scenario_concurrency(base, writes, 8 if ns.quick else 25))
        if "search-cleanup" in only:
            rows.append(
                scenario_search_cleanup(base, max(2, large // 100), 100, 2 if ns.quick else 5)
            )
        if "kill" in only:
            row, phases = scenario_kill(base, kills, ns.seed, ns.jobs)
            rows.append(row)
            notes.append(
                "kill points by phase: "
                + ", ".join(f"{k} {v}" for k, v in sorted(phases.items()))
                + f"; compactions stored across the killed sessions: {sum(chain_checkpoints.values())}"
            )
    finally:
        server.stop()
    print_table(rows)
    for note in notes:
        print(note)
    failed = [f"{r.scenario}: {c}" for r in rows for c in r.failed_checks]
    for line in failed[:40]:
        print("FAILED CHECK", line)
    bad = failed or any(r.lost or r.invalid or r.tracebacks for r in rows)
    where = f"; store: PostgreSQL {database_url()}" if database_url() else ""
    print(
        f"chaos: {'FAIL' if bad else 'ok'}{where} in {time.monotonic() - started:.0f}s (seed {ns.seed}; work dir {base})"
    )
    if not bad:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
