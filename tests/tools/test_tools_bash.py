"""The bash tool with real processes: workdir, exit codes, consent, timeout and the output cap."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from harness9.tools.base import Approval
from harness9.tools.shell import DECLINED, REFUSED_NO_TTY
from tests.support.tools import make_ctx, run_tool


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie awaiting its reaper counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pid: int, within: float = 3.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not process_alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_command_runs_in_the_working_directory(workdir: Path) -> None:
    result = run_tool(make_ctx(workdir, assume_yes=True), "bash", command="pwd")
    assert not result.is_error
    assert result.content == f"{workdir}\nexit code: 0"
    assert result.metadata == {"exit_code": 0, "timed_out": False, "bytes": len(f"{workdir}\n")}


def test_nonzero_exit_code_is_reported_in_content_and_metadata(workdir: Path) -> None:
    result = run_tool(make_ctx(workdir, assume_yes=True), "bash", command="echo no; exit 3")
    assert result.content == "no\nexit code: 3"
    assert result.metadata["exit_code"] == 3


def test_stdout_and_stderr_are_combined_in_order(workdir: Path) -> None:
    result = run_tool(
        make_ctx(workdir, assume_yes=True), "bash", command="echo out; echo err >&2; echo more"
    )
    assert result.content == "out\nerr\nmore\nexit code: 0"


def test_stdin_is_closed_so_reading_commands_do_not_hang(workdir: Path) -> None:
    result = run_tool(make_ctx(workdir, assume_yes=True), "bash", command="cat", timeout=5)
    assert result.content == "(no output)\nexit code: 0"


def test_timeout_kills_the_command_and_its_children(workdir: Path) -> None:
    command = "sleep 30 & echo $! > child.pid; wait"
    result = run_tool(make_ctx(workdir, assume_yes=True), "bash", command=command, timeout=1)
    assert result.is_error
    assert result.content == "(no output)\ntimed out after 1s (the command was killed)"
    assert result.metadata["timed_out"] is True
    assert result.metadata["exit_code"] is None
    child = int((workdir / "child.pid").read_text())
    assert wait_gone(child), f"sleep child {child} survived the timeout"


def test_timeout_keeps_the_output_printed_before_it(workdir: Path) -> None:
    result = run_tool(
        make_ctx(workdir, assume_yes=True), "bash", command="echo started; sleep 30", timeout=1
    )
    assert result.content == "started\ntimed out after 1s (the command was killed)"


def test_timeout_above_the_maximum_is_an_argument_error(workdir: Path) -> None:
    result = run_tool(make_ctx(workdir, assume_yes=True), "bash", command="true", timeout=601)
    assert result.content == (
        "error: invalid arguments for bash: timeout must be at most 600 (got 601)"
    )


def test_huge_output_keeps_head_and_tail_within_a_bounded_size(workdir: Path) -> None:
    result = run_tool(
        make_ctx(workdir, assume_yes=True), "bash", command="seq 1 3000000", timeout=60
    )
    total = sum(len(f"{i}\n") for i in range(1, 3_000_001))
    assert result.metadata["bytes"] == total
    assert len(result.content) < 41_000 + 200
    assert result.content.startswith("1\n2\n3\n")
    assert result.content.endswith("2999999\n3000000\nexit code: 0")
    assert "\n1500000\n" not in result.content
    assert f"... {total - 40 * 1024} bytes omitted ..." in result.content


def test_fifty_megabytes_of_output_are_streamed_not_held(workdir: Path) -> None:
    result = run_tool(
        make_ctx(workdir, assume_yes=True), "bash", command="yes | head -c 50000000", timeout=60
    )
    assert result.metadata["bytes"] == 50_000_000
    assert len(result.content) < 41_000 + 200
    assert result.content.endswith("y\ny\nexit code: 0")


def test_no_tty_and_no_yes_refuses_without_running(workdir: Path) -> None:
    result = run_tool(make_ctx(workdir), "bash", command="touch marker")
    assert result.is_error
    assert result.content == REFUSED_NO_TTY
    assert "--yes" in result.content
    assert not (workdir / "marker").exists()


def test_declined_confirmation_does_not_run(workdir: Path) -> None:
    asked: list[str] = []

    def decline(approval: Approval) -> bool:
        asked.append(approval.question)
        return False

    result = run_tool(make_ctx(workdir, confirm=decline), "bash", command="touch marker")
    assert asked == ["Run: touch marker?"]
    assert result.is_error
    assert result.content == DECLINED
    assert not (workdir / "marker").exists()


def test_accepted_confirmation_runs(workdir: Path) -> None:
    result = run_tool(make_ctx(workdir, confirm=lambda q: True), "bash", command="touch marker")
    assert result.content == "(no output)\nexit code: 0"
    assert (workdir / "marker").exists()


def test_yes_runs_without_asking(workdir: Path) -> None:
    def must_not_ask(question: str) -> bool:
        raise AssertionError(f"asked {question!r} despite --yes")

    ctx = make_ctx(workdir, confirm=must_not_ask, assume_yes=True)
    result = run_tool(ctx, "bash", command="touch marker")
    assert not result.is_error
    assert (workdir / "marker").exists()


def test_ctrl_c_kills_the_process_group_and_propagates(workdir: Path) -> None:
    command = "sleep 30 & echo $! > child.pid; wait"
    ctx = make_ctx(workdir, assume_yes=True)

    def interrupt_when_started() -> None:
        end = time.monotonic() + 5
        pid_file = workdir / "child.pid"
        while time.monotonic() < end and not (pid_file.exists() and pid_file.read_text()):
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_started, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        run_tool(ctx, "bash", command=command, timeout=20)
    child = int((workdir / "child.pid").read_text())
    assert wait_gone(child), f"sleep child {child} survived Ctrl-C"


def test_background_job_holding_the_output_does_not_hang_the_call(workdir: Path) -> None:
    command = "echo hi; sleep 30 & echo $! > child.pid"
    result = run_tool(make_ctx(workdir, assume_yes=True), "bash", command=command, timeout=20)
    child = int((workdir / "child.pid").read_text())
    os.kill(child, signal.SIGKILL)  # not ours to keep; the test started it
    assert result.content == "hi\nexit code: 0"
    assert result.metadata["timed_out"] is False


PEAK_RSS_OF_ONE_RUN = """
import resource, sys
from pathlib import Path
from harness9.tools.base import ToolContext
from harness9.tools.shell import run_command
result = run_command(sys.argv[1], ToolContext(workdir=Path.cwd(), session=None), 120)
assert result.metadata["bytes"] == int(sys.argv[2]), result.metadata
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def test_two_hundred_megabytes_of_output_cost_no_more_memory_than_a_few_bytes(
    workdir: Path,
) -> None:
    import subprocess
    import sys

    from tests.support.cli import cli_env

    def peak_kb(command: str, size: int) -> int:
        out = subprocess.run(
            [sys.executable, "-c", PEAK_RSS_OF_ONE_RUN, command, str(size)],
            capture_output=True,
            text=True,
            cwd=workdir,
            env=cli_env(),
            check=True,
        )
        return int(out.stdout)

    small = peak_kb("printf abc", 3)
    big = peak_kb("head -c 200000000 /dev/zero | tr '\\0' a", 200_000_000)
    assert big - small < 16 * 1024  # KB: the 40 KB head+tail and read buffers, not 200 MB
