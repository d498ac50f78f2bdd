"""A session goes on as it ran: --continue/--resume and `compact` reuse its model, API base
and window; --continue prefers the current directory's sessions; listings say where each ran."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from harness9.config import store_location
from harness9.schema import Message
from harness9.store.backend import open_store
from harness9.store.session import SessionSettings
from tests.support.cli import chat, cli, piped

DEAD_BASE = "http://127.0.0.1:9/v1"  # nothing listens there: a request to it fails at once


pytestmark = pytest.mark.usefixtures("on_each_store")


def only_session() -> tuple[str, SessionSettings | None]:
    with open_store(store_location()) as m:
        [info] = m.list_sessions()
        return info.id, m.open_session(info.id).model_settings()


def test_chat_records_the_model_api_base_window_and_workdir_of_a_session(llm_server, tmp_path):
    llm_server.reply_text("hello", usage=(1400, 3))
    result = chat(llm_server, "hi\n", "--context-window", "5000", workdir=tmp_path)

    assert result.exit_code == 0, result.output
    _, settings = only_session()
    assert settings is not None
    assert replace(settings, count_samples=()) == SessionSettings(
        "openai/test-model", 5000, api_base=llm_server.base_url, workdir=str(tmp_path.resolve())
    )
    assert [reported for _, reported in settings.count_samples] == [1400]  # the server's count


def test_continue_goes_on_with_the_sessions_model_server_and_window(llm_server, monkeypatch):
    llm_server.reply_text("first")
    chat(llm_server, "one\n", "--context-window", "5000")
    # The environment names another model and server: a default for new sessions only.
    monkeypatch.setenv("LLM_MODEL", "openai/other-model")
    monkeypatch.setenv("LLM_API_BASE", DEAD_BASE)
    llm_server.reply_text("second")

    result = cli("chat", "--continue", input="/model\ntwo\n")

    assert result.exit_code == 0, result.output
    assert "model openai/test-model · window 5K" in result.stderr
    assert result.stdout == "second\n"
    assert [r["model"] for r in llm_server.requests] == ["test-model", "test-model"]


def test_a_flag_given_with_resume_overrides_what_the_session_ran_with(llm_server):
    llm_server.reply_text("first")
    chat(llm_server, "one\n", "--context-window", "5000")
    sid, _ = only_session()
    llm_server.reply_text("second")

    result = cli(
        "chat", "--resume", sid[:8], "--model", "openai/model-b", "--api-base",
        llm_server.base_url, input="/model\ntwo\n",
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert llm_server.requests[-1]["model"] == "model-b"
    # The stored window belonged to the old model: the new one's is not 5K.
    assert "model openai/model-b · window 5K" not in result.stderr
    _, settings = only_session()
    assert settings is not None and settings.model == "openai/model-b"


def test_continue_prefers_the_latest_session_of_the_current_directory(llm_server, tmp_path):
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    llm_server.reply_text("a")
    chat(llm_server, "in here\n", workdir=here)
    llm_server.reply_text("b")
    chat(llm_server, "elsewhere\n", workdir=elsewhere)  # the most recent of all
    llm_server.reply_text("c")

    result = chat(llm_server, "again\n", "--continue", workdir=here)

    assert result.exit_code == 0, result.output
    assert "no session ran in" not in result.stderr
    sent = [m["content"] for m in llm_server.requests[-1]["messages"][1:]]
    assert sent == ["in here", "a", "again"]


def test_continue_in_a_directory_without_sessions_says_it_takes_the_latest(llm_server, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    llm_server.reply_text("a")
    chat(llm_server, "in a\n", workdir=tmp_path / "a")
    llm_server.reply_text("b")

    result = chat(llm_server, "more\n", "--continue", workdir=tmp_path / "b")

    assert result.exit_code == 0, result.output
    assert (
        f"no session ran in {(tmp_path / 'b').resolve()}; continuing the most recent one, "
        f"of {(tmp_path / 'a').resolve()}"
    ) in result.stderr
    assert [m["content"] for m in llm_server.requests[-1]["messages"][1:]][0] == "in a"


def test_sessions_list_json_gives_each_sessions_workdir(llm_server, tmp_path):
    llm_server.reply_text("ok")
    chat(llm_server, "hi\n", workdir=tmp_path)

    [row] = json.loads(cli("sessions", "list", "--json").stdout)

    assert row["workdir"] == str(tmp_path.resolve())


# -- harness9 compact ---------------------------------------------------------------------


def long_session(settings: SessionSettings) -> str:
    with open_store(store_location()) as m:
        s = m.new_session()
        for i in range(20):
            s.add_messages(
                [Message("user", f"question {i} " + "q" * 400), Message("assistant", "a" * 400)]
            )
        s.remember_model(settings)
        return s.session_id


def test_compact_summarises_on_the_server_the_session_last_used(llm_server, monkeypatch):
    long_session(SessionSettings("openai/test-model", 4000, api_base=llm_server.base_url))
    monkeypatch.setenv("LLM_API_BASE", DEAD_BASE)  # not where this session runs
    llm_server.respond_with(lambda body: "**Goal:** answer the questions")

    result = cli("compact", "--strategy", "summarize", "--json")

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["compacted"] is True and out["fallback_reason"] is None
    assert llm_server.requests and {r["model"] for r in llm_server.requests} == {"test-model"}


def test_a_failed_summary_shows_the_retries_and_exits_1(llm_server):
    sid = long_session(SessionSettings("openai/test-model", 4000, api_base=llm_server.base_url))
    waits: list[float] = []
    for _ in range(20):
        llm_server.reply_error(500, "overloaded")

    env = piped(sleep=waits.append)
    result = cli("compact", "--strategy", "summarize", obj=env)

    err = env.stderr.getvalue()
    assert result.exit_code == 1, err
    assert "overloaded" in err and "retrying in" in err and "(retry 1)" in err
    assert len(waits) >= 1
    assert "error: the summary failed; the session was truncated instead" in err
    with open_store(store_location()) as m:  # the truncation is kept: the session is usable again
        assert m.open_session(sid).latest_checkpoint() is not None
