"""Summaries prepared in the background against compaction that stops the turn: one run,
figures and ok/NO per target.

The session of ``bench_session.py`` (seeded: turns of ten tool calls reading log files
with planted facts, user messages with facts and a constraint) runs twice through the real
``harness9 chat`` in-process against the scripted OpenAI-compatible server: the baseline
with ``HARNESS9_PREPARE_AHEAD=false`` (today's behaviour: every compaction waits for its
summary), then with summaries prepared ahead (the default). The server answers a summary
request after ``--summary-seconds`` and every other request after ``--call-seconds``
(3 s and 0.5 s by default; ``--scale`` multiplies both to keep the run short, and the
output says so). The summariser is the adversarial one (its summary keeps nothing).

Measured per run:
- waited: seconds the turns waited for summaries: every summary call made on a turn's
  path (timed in this process: today every compaction's summary; with preparation one made
  again or never prepared), plus the waits for prepared ones the compaction notices report
  (to 0.1 s);
- wall: the session's seconds (the chat, without the final probe);
- billed: input billed with OpenAI's automatic caching (gpt-4o: 0.5x for a repeated prefix
  of 1,024+ tokens), every summary request at 1x, thrown-away ones included;
- facts reachable at the end (bench_session's probe) and the user's instructions the
  last request still carries (verbatim or kept beside the summary).

Targets: waited ≤ 10 % of the baseline's; wall reduced by at least the difference in
waiting; billed ≤ 105 % of the baseline's; facts reachable and instructions kept no
fewer than the baseline's. Then the ``/undo`` + ``/rewind`` case: a chat in which a
summary is prepared, the prefix it froze is undone, then a rewind forks the session while
another is prepared: no discarded summary is ever sent, and the last request equals the
view built from the store from scratch.

    python -m scripts.bench_background                 # 200 calls, 3 s / 0.5 s scaled by 0.25
    python -m scripts.bench_background --scale 1       # the real times (several minutes)

Not part of the test suite: it takes minutes.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from typer.testing import CliRunner  # noqa: E402

from harness9.cli import app  # noqa: E402
from harness9.context.view import load_view  # noqa: E402
from harness9.engine.metering import MeteredSummarizer  # noqa: E402
from harness9.schema import Message  # noqa: E402
from harness9.store import Manager  # noqa: E402
from scripts import bench_session as bs  # noqa: E402
from tests.support.llm_server import ScriptedLLMServer, TextReply  # noqa: E402

WINDOW = 24_000
WAITED = re.compile(r"\(prepared ahead, waited (\d+\.\d+) s\)")


class Waits:
    """Seconds the turns waited for summaries: each summary call made on a turn's path
    (``MeteredSummarizer.generate``, the summariser of every compaction made at the
    threshold or after an overflow; a prepared summary is called on a worker thread instead)
    is timed here in this process; the waits for prepared ones are the notices' figures."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.count = 0
        self._lock = threading.Lock()
        self._saved: Any = None

    def __enter__(self) -> Waits:
        self._saved = MeteredSummarizer.generate
        MeteredSummarizer.generate = self._timed(self._saved)  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        MeteredSummarizer.generate = self._saved  # type: ignore[method-assign]

    def _timed(self, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.seconds += time.perf_counter() - start
                    self.count += 1

        return timed


class Slow:
    """bench_session's model, each answer delayed: summaries by ``summary``, others by
    ``call`` seconds."""

    def __init__(self, model: bs.Model, summary: float, call: float) -> None:
        self.model, self.summary, self.call = model, summary, call

    def __call__(self, body: dict) -> Any:
        spec = self.model(body)
        is_summary = not body.get("tools")
        delay = self.summary if is_summary else (0.0 if self.model.probing else self.call)
        return replace(spec, delay=delay) if hasattr(spec, "delay") else spec


def run(prepare: bool, n_calls: int, summary: float, call: float, tmp: Path) -> dict[str, Any]:
    script = bs.make_script(n_calls)
    home = tmp / ("ahead" if prepare else "baseline")
    work = home / "work"
    (work / "logs").mkdir(parents=True)
    for path, text in script.files.items():
        (work / path).write_text(text)
    model = bs.Model(script, WINDOW, "adversarial", "openai")
    env = {
        "HARNESS9_HOME": str(home / "h9"),
        "OPENAI_API_KEY": "sk-bench",
        "HARNESS9_PREPARE_AHEAD": "true" if prepare else "false",
    }
    runner = CliRunner()
    row = bs.Row("hybrid", "adversarial", n_calls)
    with ScriptedLLMServer() as server:
        server.respond_with(Slow(model, summary, call))
        base = ["chat", "--model", "openai/bench", "--api-base", server.base_url]
        base += ["--context-window", str(WINDOW), "--yes", "--no-stream", "--workdir", str(work)]
        started = time.perf_counter()
        with Waits() as waits:
            code, out = bs._chat(runner, base, "\n".join(script.users) + "\n", env, "hybrid")
        wall = time.perf_counter() - started
        if code != 0:
            row.notes.append(f"chat exited {code}: {out[-300:]}")
        prepared_waits = [float(w) for w in WAITED.findall(out)]
        last_chat = model.chat_requests[-1]
        db = home / "h9" / "sessions.db"
        con = sqlite3.connect(db)
        (session_id,) = con.execute("SELECT id FROM sessions").fetchone()
        con.close()
        model.probing = True
        keys = ", ".join(f.key for f in script.facts)
        probe = f"Give me the values of {keys}.\n" + "Go on.\n" * (bs.PROBE_TURNS - 1)
        code, out = bs._chat(runner, [*base, "--resume", session_id], probe, env, "hybrid")
        if code != 0:
            row.notes.append(f"probe exited {code}: {out[-300:]}")
        abandoned = len(server.abandoned)
    bs.measure(model, db, session_id, row)
    sent = json.dumps(last_chat["messages"], ensure_ascii=False)
    kept = sum(1 for u in script.users[:-1] if _instruction(u) and _instruction(u) in sent)
    return {
        "waited": waits.seconds + sum(prepared_waits),
        "sync_summaries": waits.count,
        "wall": wall,
        "billed": row.billed,
        "summaries": row.summary_calls,
        "compactions": row.compactions,
        "facts": (row.reachable, row.facts),
        "kept": (kept, sum(1 for u in script.users[:-1] if _instruction(u))),
        "prepared": len(prepared_waits),
        "abandoned": abandoned,
        "notes": row.notes,
        "stderr": out,
    }


def _instruction(user: str) -> str:
    """The instruction part of a user message ("Remember USERFACT-…"), "" for none."""
    m = re.search(r"Remember USERFACT-\d+: .*", user)
    return m.group(0) if m else ""


# -- /undo and /rewind while a summary is prepared --------------------------------------------


def undo_and_rewind(tmp: Path) -> dict[str, Any]:
    """Chat turns growing ~1,250 tokens each in a 20K window, summaries prepared from 30 %
    of it; the third /undo reaches into the frozen prefix, then a /rewind forks the session
    while the next one is prepared. Every summary is named (SUMMARY-n)."""
    home = tmp / "undo"
    (home / "h9").mkdir(parents=True)
    (home / "h9" / "config.toml").write_text(
        "[compaction]\nprepare_ahead = true\nprepare_at = 0.3\n"
    )
    asked: list[str] = []
    lock = threading.Lock()

    def respond(body: dict) -> TextReply:
        if not body.get("tools"):
            with lock:
                asked.append(f"SUMMARY-{len(asked) + 1}")
                name = asked[-1]
            return TextReply(f"**Goal:** {name}", delay=0.3)
        return TextReply("done. " + "w" * 4800)

    lines = [f"step {i}: go on" for i in range(7)] + ["/undo"] * 3
    lines += [f"step {i}: go on" for i in range(7, 12)] + ["/rewind 8"]
    lines += [f"step {i}: go on" for i in range(12, 26)]
    with ScriptedLLMServer() as server:
        server.respond_with(respond)
        env = {"HARNESS9_HOME": str(home / "h9"), "OPENAI_API_KEY": "sk-bench"}
        argv = ["chat", "--model", "openai/bench", "--api-base", server.base_url]
        argv += ["--context-window", "20000"]
        res = CliRunner().invoke(app, argv, input="\n".join(lines) + "\n", env=env)
        chats = [b for b in server.requests if b.get("tools")]
    sent_summaries = [re.findall(r"SUMMARY-\d+", json.dumps(b)) for b in chats]
    applied = sorted({s for found in sent_summaries for s in found})
    out = res.output
    thrown = re.findall(r"thrown away", out)
    with Manager(home / "h9" / "sessions.db") as m:
        newest = m.list_sessions()[0]
        view = load_view(m.open_session(newest.id), Message("system", "s"))
    last = chats[-1]["messages"][1:]
    same = [(x["role"], x.get("content") or "") for x in last] == [
        (x.role, x.content) for x in view.messages[1:-1]
    ]
    return {
        "asked": asked,
        "applied": applied,
        "exit": res.exit_code,
        "view_equal": same,
        "rewound": "rewound to message 8" in out,
        "thrown_notes": len(thrown),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--summary-seconds", type=float, default=3.0)
    ap.add_argument("--call-seconds", type=float, default=0.5)
    ap.add_argument("--scale", type=float, default=0.25, help="multiplies both times")
    args = ap.parse_args(argv)
    summary, call = args.summary_seconds * args.scale, args.call_seconds * args.scale
    print(
        f"{args.calls}-call session, window {WINDOW}: summary calls {summary:g} s, other calls "
        f"{call:g} s ({args.summary_seconds:g} s and {args.call_seconds:g} s scaled by "
        f"{args.scale:g}); adversarial summariser, OpenAI caching (gpt-4o)"
    )
    from harness9.provider import load_litellm

    load_litellm()  # imported once, before either run is timed
    with tempfile.TemporaryDirectory() as tmp:
        base = run(False, args.calls, summary, call, Path(tmp))
        new = run(True, args.calls, summary, call, Path(tmp))
        undo = undo_and_rewind(Path(tmp))
    print("| run | waited s | wall s | billed | summaries | compactions | facts | kept |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in (("baseline (prepare_ahead off)", base), ("prepared ahead", new)):
        print(
            f"| {name} | {r['waited']:.2f} | {r['wall']:.1f} | {bs._fmt(r['billed'])} | "
            f"{r['summaries']} | {r['compactions']} | {r['facts'][0]}/{r['facts'][1]} | "
            f"{r['kept'][0]}/{r['kept'][1]} |"
        )
        for note in r["notes"]:
            print(f"note: {name}: {note}")
    for name, r in (("baseline", base), ("prepared ahead", new)):
        print(
            f"{name}: {r['sync_summaries']} summary calls on the turn's path, "
            f"{r['prepared']} compactions applied a prepared summary"
        )
    saved = base["waited"] - new["waited"]
    targets = [
        (
            f"waited {new['waited']:.2f} s ≤ 10 % of {base['waited']:.2f} s",
            new["waited"] <= 0.1 * base["waited"],
        ),
        (
            f"wall {new['wall']:.1f} s ≤ {base['wall']:.1f} s - {saved:.1f} s",
            new["wall"] <= base["wall"] - saved,
        ),
        (
            f"billed {bs._fmt(new['billed'])} ≤ 105 % of {bs._fmt(base['billed'])} "
            f"({100 * new['billed'] / max(1.0, base['billed']):.1f} %)",
            new["billed"] <= 1.05 * base["billed"],
        ),
        (
            f"facts reachable {new['facts'][0]} ≥ {base['facts'][0]}",
            new["facts"][0] >= base["facts"][0],
        ),
        (
            f"instructions kept {new['kept'][0]} ≥ {base['kept'][0]}",
            new["kept"][0] >= base["kept"][0],
        ),
        (
            f"/undo + /rewind: summaries asked {undo['asked']}, applied {undo['applied']}; "
            "the undone prefix's SUMMARY-1 never sent",
            "SUMMARY-1" not in undo["applied"] and undo["exit"] == 0 and undo["rewound"],
        ),
        ("/undo + /rewind: last request == view built from scratch", undo["view_equal"]),
    ]
    for text, ok in targets:
        print(f"{'ok' if ok else 'NO'}  {text}")
    return 0 if all(ok for _, ok in targets) else 1


if __name__ == "__main__":
    raise SystemExit(main())
