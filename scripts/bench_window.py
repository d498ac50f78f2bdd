"""The window the server really has: a long note-taking session against servers that behave
like the common local ones, one row per server, with ok/NO per target of issue 32.

Every session runs the real ``harness9 chat`` in-process (``harness9.cli.app``) on piped
input against a scripted OpenAI-compatible server on 127.0.0.1 (``tests/support/llm_server.py``)
whose behaviour is one of ``tests/support/window_server.py``'s: it counts each request as that
kind of server does and refuses one over its window in that server's own words (vLLM and
llama.cpp count ``max_tokens`` too; llama-cpp-python fails the stream after a 200 and its
template drops the tool definitions). The window is only ever in the refusal: harness9
starts from its 32.8K guess for a model behind ``--api-base``.

Each user turn is one note of ~``--note-tokens`` tokens, answered in one model call, so a
session of ``--calls`` turns is that many model calls (and the summaries on top).

Measures per server:
- over: requests the server received over its window (refused), and of those after the
  first refusal (target: 0); a request asked again unstreamed after its stream died is
  the same refusal;
- lost: turns that ended in an error instead of a reply (target: 0);
- early: compactions made while the server's own count of the context they replaced was
  under the threshold (80 % of the window, less the reply's budget), not counting the one
  that follows a refusal (target: 0). Run with the smart trigger off (config.toml), which
  compacts a little ahead of the threshold on purpose;
- compactions, against the same session run with ``--context-window`` set to the server's
  window (the "told up front" baseline: harness9 learns the server's count from the first
  reply in both runs). Target: at most 10 % more than the baseline. Fewer is not a miss: a
  session that learns the window from a refusal makes its first compaction at the window
  rather than at the threshold, which saves one over a long session.

``--smart-triggers`` leaves the smart trigger on (the default of ``harness9 chat``): it
compacts up to two calls' growth before the threshold, so "early" then counts those too.

``--api-base URL --model openai/NAME``: the same session against a real local server
(llama.cpp, llama-cpp-python, vLLM, LM Studio) instead; the server's side is not visible
then, so the row has the turns lost, the compactions and the window harness9 settled on.

    .venv/bin/python -m scripts.bench_window                 # the scripted servers
    .venv/bin/python -m scripts.bench_window --calls 40 --api-base http://127.0.0.1:8080/v1 \\
        --model openai/smol
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
from typer.testing import CliRunner  # noqa: E402

from harness9.cli import app  # noqa: E402
from harness9.cli.env import Environment  # noqa: E402
from tests.support.llm_server import ScriptedLLMServer  # noqa: E402
from tests.support.window_server import LocalServer, is_summary_request  # noqa: E402

WINDOW = 8192
THRESHOLD = 0.8
SERVERS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("OpenAI wording", "openai", {}),
    ("vLLM (max_tokens counted)", "vllm", {}),
    ("llama.cpp (n_ctx in the body)", "llama.cpp", {}),
    ("llama-cpp-python (stream fails)", "llama-cpp-python", {"counts_tools": False}),
    (
        "stream fails, no window named",
        "llama-cpp-python",
        {"counts_tools": False, "names_window": False},
    ),
    ("LM Studio wording", "lm-studio", {}),
    ("tools not counted", "openai", {"counts_tools": False}),
    ("count 1.5x the estimate", "openai", {"ratio": 1.5}),
)


def note(i: int, tokens: int) -> str:
    head = f"note {i}: "
    words = [f"item{i}-{j}" for j in range(tokens * 4 // 10)]
    return head + " ".join(words)[: tokens * 4 - len(head)]


@dataclass
class Watch:
    """Wraps a ``LocalServer``: sees every agent request, finds the compactions between
    them, and judges each by the server's own count of the context it replaced."""

    local: LocalServer
    previous: dict[str, Any] | None = None
    previous_refused: bool = False
    first_refusal: int | None = None  # index of the agent request first refused
    agent_requests: int = 0
    compactions: int = 0
    early: int = 0
    over_after_first: int = 0
    notes: list[str] = field(default_factory=list)

    def __call__(self, body: dict[str, Any]) -> Any:
        if is_summary_request(body):
            return self.local(body)
        over_before = len(self.local.over)
        if self.previous is not None and self._compacted(self.previous, body):
            self.compactions += 1
            replaced = self._replaced(self.previous, body)
            threshold = self._threshold(body)
            if not self.previous_refused and replaced < threshold:
                self.early += 1
                self.notes.append(f"early at {replaced} < {threshold}")
        reply = self.local(body)
        refused = len(self.local.over) > over_before
        # A dead stream's request asked again unstreamed is the same refusal, not another.
        again = self.previous_refused and self.previous is not None
        again = again and body["messages"] == self.previous["messages"]
        if refused and self.first_refusal is None:
            self.first_refusal = self.agent_requests
        elif refused and not again:
            self.over_after_first += 1
        self.agent_requests += 1
        self.previous, self.previous_refused = body, refused
        return reply

    @staticmethod
    def _compacted(previous: dict[str, Any], body: dict[str, Any]) -> bool:
        """The request does not extend the previous one: the history was cut."""
        old, new = previous["messages"][1:], body["messages"][1:]
        return len(new) < len(old) or new[: len(old)] != old

    def _replaced(self, previous: dict[str, Any], body: dict[str, Any]) -> int:
        """The server's count of the context the compaction replaced: the previous request,
        its reply and the new message (what would have been sent without compacting)."""
        grown = list(previous["messages"])
        if not self.previous_refused:
            grown.append({"role": "assistant", "content": self.local.reply(previous)})
        grown.append(body["messages"][-1])
        return self.local.count({"messages": grown, "tools": body.get("tools")})

    def _threshold(self, body: dict[str, Any]) -> int:
        reserve = int(body.get("max_tokens") or 0)
        return min(int(self.local.n_ctx * THRESHOLD), self.local.n_ctx - reserve)


@dataclass
class Row:
    name: str
    over: int = 0
    over_after_first: int = 0
    lost: int = 0
    early: int = 0
    compactions: int = 0
    baseline: int = 0
    learnt: str = ""
    notes: list[str] = field(default_factory=list)


def chat(argv: list[str], lines: list[str], home: Path) -> tuple[int, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    env = Environment(stdin=io.StringIO("\n".join(lines) + "\n"), stdout=stdout, stderr=stderr)
    result = CliRunner().invoke(
        app, argv, env={"HARNESS9_HOME": str(home), "OPENAI_API_KEY": "sk-bench"}, obj=env
    )
    return result.exit_code, result.output + stdout.getvalue() + stderr.getvalue()


SMART_TRIGGERS = False  # --smart-triggers


def prepare_home(home: Path) -> Path:
    home.mkdir(parents=True)
    if not SMART_TRIGGERS:
        (home / "config.toml").write_text("[compaction]\nsmart_triggers = false\n")
    return home


def lost_turns(output: str) -> int:
    return sum(1 for line in output.splitlines() if line.startswith("error:"))


def learnt_window(output: str) -> str:
    found = re.findall(r"the server's window is ([\d,]+) tokens", output)
    return found[-1] if found else ""


def run_scripted(name: str, kind: str, extra: dict[str, Any], calls: int, size: int) -> Row:
    lines = [note(i, size) for i in range(calls)]
    row = Row(name)
    with tempfile.TemporaryDirectory() as tmp:
        for told in (False, True):
            watch = Watch(LocalServer(kind, WINDOW, **extra))
            with ScriptedLLMServer() as server:
                server.respond_with(watch)
                argv = ["chat", "--model", "openai/smol", "--api-base", server.base_url, "--yes"]
                if told:
                    argv += ["--context-window", str(WINDOW)]
                home = prepare_home(Path(tmp) / ("told" if told else "learnt"))
                code, output = chat(argv, lines, home)
            if told:
                row.baseline = watch.compactions
                continue
            row.over, row.over_after_first = len(watch.local.over), watch.over_after_first
            row.lost, row.early = lost_turns(output), watch.early
            row.compactions, row.learnt = watch.compactions, learnt_window(output)
            row.notes += watch.notes[:3]
            if code != 0:
                row.notes.append(f"exit {code}")
    return row


def run_real(api_base: str, model: str, calls: int, size: int) -> None:
    lines = [note(i, size) for i in range(calls)]
    with tempfile.TemporaryDirectory() as tmp:
        home = prepare_home(Path(tmp) / "real")
        argv = ["chat", "--model", model, "--api-base", api_base, "--yes"]
        code, output = chat(argv, lines, home)
    compactions = output.count("context compacted")
    lost = lost_turns(output)
    print(f"real server at {api_base} ({model}), {calls} turns of ~{size} tokens:")
    print(f"  exit {code}; turns lost {lost} {_ok(lost == 0)}; compactions {compactions}")
    print(f"  window learnt from a refusal: {learnt_window(output) or 'none'}")
    for line in output.splitlines():
        if "as its server reports" in line or "is not known" in line:
            print("  " + line.strip())


def _ok(good: bool) -> str:
    return "ok" if good else "NO"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="turns (one model call each)")
    parser.add_argument("--note-tokens", type=int, default=150)
    parser.add_argument("--api-base", help="a real local server instead of the scripted ones")
    parser.add_argument("--model", default="openai/local", help="with --api-base")
    parser.add_argument("--smart-triggers", action="store_true", help="leave them on")
    args = parser.parse_args()
    global SMART_TRIGGERS
    SMART_TRIGGERS = args.smart_triggers
    if args.api_base:
        run_real(args.api_base, args.model, args.calls, args.note_tokens)
        return 0
    triggers = "on" if SMART_TRIGGERS else "off"
    print(
        f"{args.calls} turns of ~{args.note_tokens}-token notes; server window {WINDOW:,}; "
        "harness9 starts from its 32.8K guess (baseline: told --context-window); "
        f"smart trigger {triggers}\n"
    )
    header = "| server | over (after 1st) | lost | early | compactions (told) | window learnt |"
    print(header)
    print("|---|---|---|---|---|---|")
    good = True
    for name, kind, extra in SERVERS:
        row = run_scripted(name, kind, extra, args.calls, args.note_tokens)
        within = row.compactions <= row.baseline * 1.1
        row_good = row.over_after_first == 0 and row.lost == 0 and row.early == 0 and within
        good = good and row_good
        print(
            f"| {row.name} | {row.over} ({row.over_after_first} {_ok(row.over_after_first == 0)})"
            f" | {row.lost} {_ok(row.lost == 0)} | {row.early} {_ok(row.early == 0)}"
            f" | {row.compactions} ({row.baseline}) {_ok(within)} | {row.learnt or '-'} |"
            + (f" {'; '.join(row.notes)}" if row.notes else "")
        )
        sys.stdout.flush()
    print(f"\nall targets: {_ok(good)}")
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
