"""Forks are marked where sessions are listed (issue 36, item 10): a fork carries its
origin's title, so `sessions list` and the /resume picker say whose fork it is."""

from __future__ import annotations

from tests.support.cli import chat, cli
from tests.support.llm_server import ScriptedLLMServer, TextReply


def session_and_fork(server: ScriptedLLMServer) -> tuple[str, str]:
    server.respond_with(lambda body: TextReply("ok"))
    assert chat(server, "plan the release\n").exit_code == 0
    [sid] = [line.split()[0] for line in cli("sessions", "list").stdout.splitlines()[1:]]
    fork = cli("sessions", "fork", sid, "--at", "1").stdout.strip()
    return sid, fork


def test_sessions_list_marks_the_fork_with_its_origin(llm_server: ScriptedLLMServer):
    sid, fork = session_and_fork(llm_server)

    rows = cli("sessions", "list").stdout.splitlines()[1:]

    by_id = {row.split()[0]: row for row in rows}
    assert by_id[fork].endswith(f"fork of {sid[:8]} at #1: plan the release")
    assert by_id[sid].endswith("  plan the release")


def test_the_resume_picker_marks_the_fork_with_its_origin(llm_server: ScriptedLLMServer):
    sid, fork = session_and_fork(llm_server)

    result = chat(llm_server, "/resume\nq\n")

    lines = result.stderr.splitlines()
    [fork_line] = [line for line in lines if f"] {fork[:8]} " in line]
    [origin_line] = [line for line in lines if f"] {sid[:8]} " in line]
    assert fork_line.endswith(f"fork of {sid[:8]} at #1: plan the release")
    assert origin_line.endswith("  plan the release")
