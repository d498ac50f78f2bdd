"""How the server counts a session's requests outlives the chat that learnt it: ``compact
--dry-run`` and ``chat --resume`` count as the chat's token line did, on the same model
and API base only."""

from __future__ import annotations

import json

from harness9.cli import app
from harness9.config import db_path
from harness9.store import open_manager
from tests.support.window_chat import chat, kilo, note, runner
from tests.support.window_server import LocalServer


def last_token_line_figure(output: str) -> float:
    lines = [line for line in output.splitlines() if "ctx " in line]
    return kilo(lines[-1].split("ctx ")[1].split("/")[0])


def stored_settings():
    with open_manager(db_path()) as m:
        [info] = m.list_sessions()
        return info.id, m.open_session(info.id).model_settings()


def dry_run() -> dict:
    result = runner.invoke(app, ["compact", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_compact_dry_run_counts_as_the_chats_token_line_did(llm_server):
    # A server that counts half again the estimate: chat's token line shows its count,
    # and so does a preview in a new process, before anything is sent anywhere.
    local = LocalServer("openai", 8192, ratio=1.5)
    llm_server.respond_with(local)
    result = chat(llm_server, *(note(i, 400) for i in range(3)), extra=("--context-window", "8192"))
    assert result.exit_code == 0, result.output
    shown = last_token_line_figure(result.output)
    requests = len(llm_server.requests)

    plan = dry_run()

    assert abs(plan["tokens_before"] - shown) <= 60  # the line shows 0.1K; the reply's few
    assert plan["tokens_before"] > 1.4 * stored_settings()[1].count_samples[-1][0]
    assert len(llm_server.requests) == requests  # a preview calls no model


def test_a_resumed_session_is_compacted_before_its_first_request_goes_over_the_window(
    llm_server,
):
    # The server's window is 8,192 and it counts 1.5x the estimate. The session grew under
    # a larger window flag; resumed at 8,192, its next request is under the threshold by
    # the estimate (~5.6K of 6,553) but over the window by the server's count (~8.5K):
    # counted as the server counts, it is compacted before it is sent, never refused.
    local = LocalServer("openai", 8192, ratio=1.5)
    llm_server.respond_with(local)
    grown = chat(llm_server, *(note(i, 400) for i in range(9)), extra=("--context-window", "32768"))
    assert grown.exit_code == 0, grown.output
    assert local.over == []
    sid, _ = stored_settings()

    argv = ["chat", "--resume", sid, "--context-window", "8192", "--yes"]
    result = runner.invoke(app, argv, input=note(9, 800) + "\n")

    assert result.exit_code == 0, result.output
    assert "context compacted" in result.output
    assert local.over == []  # no request was refused


def test_the_resume_recap_shows_the_size_the_last_token_line_showed(llm_server):
    # The recap's "ctx" figure is the server's count, as the token line before /exit was,
    # not harness9's estimate (about two thirds of it on this server).
    local = LocalServer("openai", 32_768, ratio=1.5)
    llm_server.respond_with(local)
    grown = chat(llm_server, *(note(i, 400) for i in range(3)))
    last = last_token_line_figure(grown.output)
    sid, _ = stored_settings()

    result = runner.invoke(app, ["chat", "--resume", sid, "--yes"], input="")

    [recap] = [line for line in result.output.splitlines() if "resumed session" in line]
    assert abs(kilo(recap.split("ctx ")[1].split("/")[0]) - last) <= 60


def test_a_session_resumed_with_another_model_learns_its_count_anew(llm_server):
    local = LocalServer("openai", 32_768, ratio=1.5)
    llm_server.respond_with(local)
    assert chat(llm_server, note(1, 400), note(2, 400)).exit_code == 0
    sid, _ = stored_settings()

    argv = ["chat", "--resume", sid, "--model", "openai/other", "--api-base"]
    result = runner.invoke(app, [*argv, llm_server.base_url, "--yes"], input=note(3, 400) + "\n")

    assert result.exit_code == 0, result.output
    _, settings = stored_settings()
    assert settings.model == "openai/other"
    # Only the reply on the new model: nothing learnt from openai/smol was carried over.
    assert len(settings.count_samples) == 1
