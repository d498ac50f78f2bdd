"""/resume goes on with the session's own model and window, as --resume does (issue 36,
item 9): the chat that resumes it may have been started with others."""

from __future__ import annotations

from harness9.config import db_path
from harness9.store import Manager
from tests.support.cli import cli
from tests.support.llm_server import ScriptedLLMServer, TextReply


def run(server: ScriptedLLMServer, stdin: str, model: str, window: str):
    argv = ["chat", "--model", model, "--api-base", server.base_url, "--context-window", window]
    return cli(*argv, input=stdin)


def first_session(server: ScriptedLLMServer) -> str:
    assert run(server, "hello\n", "openai/model-a", "8000").exit_code == 0
    with Manager(db_path()) as m:
        [info] = m.list_sessions()
    return info.id


def test_slash_resume_sends_with_the_model_the_session_ran_with(llm_server: ScriptedLLMServer):
    llm_server.respond_with(lambda body: TextReply("ok"))
    sid = first_session(llm_server)

    result = run(llm_server, f"/resume {sid[:8]}\nand again\n", "openai/model-b", "20000")

    assert result.exit_code == 0, result.stderr
    assert llm_server.requests[-1]["model"] == "model-a"
    assert llm_server.requests[-1]["messages"][-1]["content"] == "and again"


def test_slash_resume_takes_the_window_the_session_ran_with(llm_server: ScriptedLLMServer):
    llm_server.respond_with(lambda body: TextReply("ok"))
    sid = first_session(llm_server)

    result = run(llm_server, f"/model\n/resume {sid[:8]}\n/model\n", "openai/model-b", "20000")

    assert result.exit_code == 0, result.stderr
    assert "model openai/model-b · window 20K" in result.stderr
    assert "as it last ran: openai/model-a · window 8K" in result.stderr
    assert "model openai/model-a · window 8K" in result.stderr
