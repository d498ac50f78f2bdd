"""A one-line change to a 600-line file: edit_file against write_file, through the real chat.

Each run is the real ``harness9 chat`` in-process (``harness9.cli.app``: option parsing,
the engine, the default context policy, the SQLite store, the file tools) against the
scripted OpenAI-compatible server on 127.0.0.1 (``tests/support/llm_server.py``), which plays the
model. One user turn:

1. ``read_file`` of the 21 lines around line 300 of ``service.py`` (600 lines, every line
   different), as an agent looks before it changes a line;
2. the change of line 300: ``edit_file`` with that one line as ``old_string`` (run
   ``edit``), or ``write_file`` of the whole new file (run ``write``);
3. 20 more calls (``cat`` of 6 KB log files that hold nothing of ``service.py``), then a
   reply. The window is 32K tokens, so the default policy compacts during those calls
   (``BENCH_EDIT_WINDOW`` and ``BENCH_EDIT_LOG_BYTES`` set other sizes).

Figures:
- output tokens of the call: the project's token estimate (``estimate_tokens``) of the
  assistant message carrying the call, as the session's log stored it; target: the
  edit's at most 3 % of the write's;
- the context 20 calls later: the request sent after the 20th further call, searched
  for every line of the file as it was and as it is after the change; target: none
  there, the edit's own ``old_string`` and ``new_string`` (the one changed line, in the
  edit call) aside, as the file is not read again. The write's run is shown too: its
  content is a call's long argument, which must be gone by a stub (the row says how many
  summary calls the policy made besides).

``run()`` returns the rows (label, figure, ok); ``scripts/bench_mcp.py`` prints them with
its own. Run it as a script to print them with ok/NO:

    python -m scripts.bench_edit
"""

from __future__ import annotations

import io
import json
import os
import re
import sqlite3
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent
from typer.testing import CliRunner  # noqa: E402

from harness9.cli import app  # noqa: E402
from harness9.cli.env import Environment  # noqa: E402
from harness9.store import Manager  # noqa: E402
from harness9.tokens import estimate_tokens  # noqa: E402
from tests.support.llm_server import ScriptedLLMServer, TextReply, ToolCallsReply  # noqa: E402

WINDOW = int(os.environ.get("BENCH_EDIT_WINDOW", "32000"))
FILE_LINES = 600
CHANGED_LINE = 300  # 1-based
LATER_CALLS = 20
LOG_BYTES = int(os.environ.get("BENCH_EDIT_LOG_BYTES", "6000"))
MAX_SHARE = 0.03  # the edit's output tokens, at most this share of the write's
PATH = "service.py"


def original_lines() -> list[str]:
    """600 different lines of plausible code (each names its own number)."""
    out = []
    for i in range(1, FILE_LINES + 1):
        if i == CHANGED_LINE:
            out.append("    retry_limit = 3  # how often a failed upload is tried again\n")
        else:
            out.append(f"    step_{i:03d} = transform_{i:03d}(payload, limit={i * 7 % 97})\n")
    return out


OLD = original_lines()
OLD_LINE = OLD[CHANGED_LINE - 1]
NEW_LINE = OLD_LINE.replace("retry_limit = 3", "retry_limit = 5")
NEW = [*OLD[: CHANGED_LINE - 1], NEW_LINE, *OLD[CHANGED_LINE:]]


def log_text(n: int) -> str:
    line = f"2026-03-0{n % 9 + 1} worker-{n:02d} upload ok bytes=%d elapsed=%dms\n"
    rows = [line % (1000 + k * 37, 10 + k) for k in range(LOG_BYTES // len(line) + 1)]
    return "".join(rows)[:LOG_BYTES]


@dataclass(slots=True)
class Agent:
    """Plays the model: reads around the line, changes it (``mode``), then 20 more calls."""

    mode: str  # "edit" or "write"
    step: int = 0
    chat_requests: list[dict] = field(default_factory=list)
    summary_requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict) -> Any:
        with self.lock:
            if not body.get("tools"):  # a summary request: one plain sentence
                self.summary_requests += 1
                return TextReply("The user asked to raise retry_limit; logs were read.")
            self.chat_requests.append(body)
            self.step += 1
            return self.next_reply()

    def next_reply(self) -> Any:
        n = self.step
        if n == 1:
            args = {"path": PATH, "offset": CHANGED_LINE - 10, "limit": 21}
            return ToolCallsReply((("c_read", "read_file", json.dumps(args)),))
        if n == 2:
            if self.mode == "edit":
                args = {"path": PATH, "old_string": OLD_LINE, "new_string": NEW_LINE}
                return ToolCallsReply((("c_change", "edit_file", json.dumps(args)),))
            args = {"path": PATH, "content": "".join(NEW)}
            return ToolCallsReply((("c_change", "write_file", json.dumps(args)),))
        if n <= 2 + LATER_CALLS:
            k = n - 2
            command = f"cat logs/worker{k:02d}.log"
            return ToolCallsReply(((f"c_log{k}", "bash", json.dumps({"command": command})),))
        return TextReply("retry_limit is 5 now.")


@dataclass(slots=True)
class Run:
    mode: str
    call_tokens: int = 0
    changed_on_disk: bool = False
    lines_in_context: int = 0  # of the file's lines, the changed line's two versions aside
    changed_line_in_context: bool = False
    compactions: int = 0
    summaries: int = 0  # summary calls
    stubbed: bool = False  # the change's long argument shows as a stub 20 calls later
    exit_code: int = 0
    output: str = ""


def run_mode(mode: str, tmp: Path) -> Run:
    home, work = tmp / mode / "h9", tmp / mode / "work"
    (work / "logs").mkdir(parents=True)
    (work / PATH).write_text("".join(OLD))
    for k in range(1, LATER_CALLS + 1):
        (work / "logs" / f"worker{k:02d}.log").write_text(log_text(k))
    agent = Agent(mode)
    env = {"HARNESS9_HOME": str(home), "OPENAI_API_KEY": "sk-bench"}
    run = Run(mode)
    with ScriptedLLMServer() as server:
        server.respond_with(agent)
        argv = ["chat", "--model", "openai/bench", "--api-base", server.base_url]
        argv += ["--context-window", str(WINDOW), "--yes", "--no-stream", "--workdir", str(work)]
        out, err = io.StringIO(), io.StringIO()
        obj = Environment(
            stdin=io.StringIO("Raise the retry limit to 5.\n"), stdout=out, stderr=err
        )
        res = CliRunner().invoke(app, argv, env=env, obj=obj)
    run.exit_code, run.output = res.exit_code, res.output + out.getvalue() + err.getvalue()
    run.changed_on_disk = (work / PATH).read_text() == "".join(NEW)
    con = sqlite3.connect(home / "sessions.db")
    run.compactions = con.execute("SELECT count(*) FROM compactions").fetchone()[0]
    con.close()
    run.call_tokens = _call_tokens(home / "sessions.db")
    run.summaries = agent.summary_requests
    # The request after the 20th further call's result: the one answered with the reply.
    if len(agent.chat_requests) == 3 + LATER_CALLS:
        later = json.dumps(agent.chat_requests[-1]["messages"], ensure_ascii=False)
        lines = {x.strip() for x in OLD + NEW}
        changed = {OLD_LINE.strip(), NEW_LINE.strip()}
        run.lines_in_context = sum(1 for x in lines - changed if x in later)
        run.changed_line_in_context = any(x in later for x in changed)
        run.stubbed = re.search(r"\[stubbed\] \d+ tokens of content", later) is not None
    else:
        run.lines_in_context = -1  # the session did not reach the 20th call
    return run


def _call_tokens(db: Path) -> int:
    """The estimate of the stored assistant message that carries the change's call."""
    with Manager(db) as manager:
        [info] = manager.list_sessions()
        for msg in manager.open_session(info.id).get_messages():
            if any(c.id == "c_change" for c in msg.tool_calls):
                return estimate_tokens([msg])
    return 0


def run() -> list[tuple[str, str, bool]]:
    """The rows: (label, figure, ok)."""
    with tempfile.TemporaryDirectory() as tmp:
        edit, write = run_mode("edit", Path(tmp)), run_mode("write", Path(tmp))
    rows: list[tuple[str, str, bool]] = []
    share = edit.call_tokens / write.call_tokens if write.call_tokens else 1.0
    ran = edit.exit_code == 0 == write.exit_code and edit.changed_on_disk and write.changed_on_disk
    rows.append(
        (
            "one-line change to a 600-line file: output tokens of the call",
            f"edit_file {edit.call_tokens}, write_file {write.call_tokens}: {share:.1%} "
            f"(target <= {MAX_SHARE:.0%}; both changed the file: {ran})",
            ran and share <= MAX_SHARE,
        )
    )
    for r in (edit, write):
        where = "the edit call's own one-line old/new strings" if r.mode == "edit" else "none"
        left = "the changed line: in context" if r.changed_line_in_context else "not in context"
        figure = (
            f"{r.lines_in_context} of {FILE_LINES} file lines in the context {LATER_CALLS} calls "
            f"later ({left}; expected: {where}); {r.compactions} compactions, "
            f"{r.summaries} summary calls"
            + (f", content stubbed: {r.stubbed}" if r.mode == "write" else "")
            + f"; window {WINDOW // 1000}K"
        )
        ok = r.exit_code == 0 and r.lines_in_context == 0
        if r.mode == "write":
            ok = ok and not r.changed_line_in_context and r.stubbed
        name = "edit_file" if r.mode == "edit" else "write_file"
        rows.append((f"{name}: the file's text 20 calls later, not read again", figure, ok))
    return rows


def main() -> int:
    rows = run()
    width = max(len(label) for label, _, _ in rows)
    for label, figure, ok in rows:
        print(f"{label:<{width}}  {figure}  {'ok' if ok else 'NO'}")
    return 0 if all(ok for _, _, ok in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
