"""Helpers for tests that run the real ``harness9`` entry point in a subprocess."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from harness9.cli import app
from harness9.cli.env import Environment
from harness9.config import config_path, db_path
from harness9.schema import Message
from harness9.store import open_manager

REPO_ROOT = Path(__file__).resolve().parents[2]
# The `usage.summaries` of `sessions list/show --json` for a session no compaction summarised.
NO_SUMMARIES = {
    "model_calls": 0,
    "input_tokens": 0,
    "output_tokens": 0,
    "cost_usd": None,
    "unpriced_calls": 0,
}
# The `usage.subagents` of `sessions list/show --json` for a session that ran no sub-agent.
NO_SUBAGENTS = {
    "model_calls": 0,
    "input_tokens": 0,
    "cached_tokens": 0,
    "output_tokens": 0,
    "cost_usd": None,
    "unpriced_calls": 0,
}


def piped(stdin: str = "", **fields: Any) -> Environment:
    """An environment of in-memory pipes (no terminal): what cron or ``| harness9`` gives.
    ``fields`` override the rest, e.g. ``sleep=waits.append`` to record retry backoff."""
    return Environment(
        stdin=io.StringIO(stdin), stdout=io.StringIO(), stderr=io.StringIO(), **fields
    )


def terminal(stdin: str = "", *, columns: int = 100) -> Environment:
    """An environment whose three streams are terminals (in memory): what a person at a
    keyboard gives a command. Pass it as ``runner.invoke(app, argv, obj=terminal(...))``
    and read ``env.stdout.getvalue()`` / ``env.stderr.getvalue()``."""
    return Environment(
        stdin=io.StringIO(stdin),
        stdout=io.StringIO(),
        stderr=io.StringIO(),
        stdin_isatty=True,
        stdout_isatty=True,
        stderr_isatty=True,
        columns=columns,
    )


def cli_env(**extra: str) -> dict[str, str]:
    """Environment for a real ``python -m harness9`` subprocess running this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env.pop("FORCE_COLOR", None)
    env.update(extra)
    return env


def run_cli(
    *args: str,
    input: str | None = None,
    timeout: float = 120,
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the real entry point in a subprocess (stdin not a TTY)."""
    return subprocess.run(
        [sys.executable, "-m", "harness9", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(**(env or {})),
        cwd=cwd,
    )


def run_python(code: str, *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a fresh interpreter on this checkout: what an import costs."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=timeout
    )


# -- the in-process entry point: the same app `harness9` runs, through Typer's CliRunner ----

runner = CliRunner()


def cli(*args: str, input: str | None = None, obj: Environment | None = None) -> Result:
    """``harness9 <args>`` in-process; ``obj`` injects an Environment (see piped/terminal)."""
    return runner.invoke(app, list(args), input=input, obj=obj)


def chat(
    server: Any,
    stdin: str,
    *args: str,
    workdir: Path | None = None,
    obj: Environment | None = None,
) -> Result:
    """``harness9 chat`` against the scripted server, fed ``stdin`` (one turn a line)."""
    argv = ["chat", "--model", "openai/test-model", "--api-base", server.base_url, *args]
    if workdir is not None:
        argv += ["--workdir", str(workdir)]
    return cli(*argv, input=stdin, obj=obj)


class BackgroundProcess:
    """``python -c SCRIPT *ARGS READY STOP`` in this checkout: a second process (a writer
    saving while the test runs a long write). The script touches READY once it is going,
    stops when STOP exists, and prints one JSON report, which ``finish`` returns."""

    def __init__(self, script: str, *args: str, tmp: Path, name: str = "writer") -> None:
        self.name = name
        self.ready, self.stop = tmp / f"{name}-ready", tmp / f"{name}-stop"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *args, str(self.ready), str(self.stop)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
        )
        deadline = time.monotonic() + 60
        while not self.ready.exists():
            assert self.proc.poll() is None, self.proc.communicate()[1]
            assert time.monotonic() < deadline, f"the {name} process never started"
            time.sleep(0.01)

    def finish(self, timeout: float = 120) -> dict[str, Any]:
        self.stop.touch()
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err
        return json.loads(out)


def stored_session(*msgs: Message) -> str:
    """A new session holding ``msgs`` in the store of $HARNESS9_HOME; its id."""
    with open_manager(db_path()) as m:
        s = m.new_session()
        s.add_messages(list(msgs))
        return s.session_id


def stored_ids() -> set[str]:
    """The ids of the top-level sessions in the store of $HARNESS9_HOME."""
    with open_manager(db_path()) as m:
        return {i.id for i in m.list_sessions()}


def old_and_new_sessions(clock: Any) -> tuple[str, str]:
    """Two sessions under freezegun's ``clock``: the first 31 days idle, the second 11."""
    old = stored_session(Message("user", "ancient"))
    clock.tick(20 * 86400)
    new = stored_session(Message("user", "recent"))
    clock.tick(11 * 86400)
    return old, new


def write_config(text: str) -> Path:
    """``text`` as the config.toml of $HARNESS9_HOME (the test's own home); its path."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def wait_until(condition: Callable[[], object], what: str, *, timeout: float = 30) -> None:
    """Return as soon as ``condition()`` is true; fail naming ``what`` after ``timeout`` s.

    For a state another thread or process reaches: never a fixed sleep, which is either
    too short on a slow machine or wasted on a fast one.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.005)


def answering(console: Any, *answers: str, then: str = "n") -> tuple[Any, list[str]]:
    """A terminal approver that answers ``answers`` in turn (then ``then``), and the list
    of the questions it was asked, in order."""
    from harness9.ui.approval import TerminalApprover

    queue, asked = iter(answers), []

    def ask(prompt: str) -> str:
        asked.append(prompt)
        return next(queue, then)

    return TerminalApprover(console, ask=ask, flush=lambda: None), asked


def export_json(sid: str) -> dict:
    """``harness9 sessions export SID --format json``, parsed."""
    result = cli("sessions", "export", sid, "--format", "json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def import_json(doc: dict, tmp_path: Path) -> None:
    """``doc`` written to a file and read back by ``harness9 sessions import``."""
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc))
    result = cli("sessions", "import", str(path))
    assert result.exit_code == 0, result.stderr


def reimport_json(doc: dict, tmp_path: Path) -> str:
    """``doc``'s session deleted (``harness9 sessions delete``), then imported back from
    ``doc``; its id."""
    result = cli("sessions", "delete", doc["id"], "--yes")
    assert result.exit_code == 0, result.stderr
    import_json(doc, tmp_path)
    return doc["id"]
