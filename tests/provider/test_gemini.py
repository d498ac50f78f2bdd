"""Gemini through the real CLI and litellm, against tests/support/gemini_server.py.

Streaming, tool calls (functionCall/functionResponse pairs the server validates), resume and
compaction work; a 429 waits the retryDelay Google puts in its body; errors are one line in
the provider's own words; a base without /v1beta is told the form Gemini expects.
"""

from __future__ import annotations

import json
import time

from harness9.store import Manager
from tests.support.cli import cli, piped
from tests.support.gemini_server import ScriptedGeminiServer

MODEL = "gemini/gemini-2.5-flash"


def gemini_chat(server: ScriptedGeminiServer, *args: str, stdin: str = "", **env_fields):
    env = piped(stdin, **env_fields)
    result = cli("chat", "--model", MODEL, "--api-base", server.base_url, *args, obj=env)
    return result, env.stdout.getvalue(), env.stderr.getvalue()


def stored_messages(home) -> list:
    with Manager(home / "sessions.db") as manager:
        [info] = manager.list_sessions()
        return manager.open_session(info.id).get_messages()


# -- streaming, tools, resume, compaction ------------------------------------------------------


def test_a_streamed_tool_call_runs_and_its_result_pairs_with_it(gemini_server, tmp_path):
    gemini_server.reply_tool_calls([("c1", "bash", '{"command": "echo hi"}')])
    gemini_server.reply_text("The command printed hi.", usage=(1500, 6, 1024))
    result, out, err = gemini_chat(
        gemini_server, "--yes", "--workdir", str(tmp_path), "-p", "run echo hi"
    )

    assert result.exit_code == 0, err
    assert out.strip() == "The command printed hi."
    assert gemini_server.rejected == []  # every request valid by the API's rules
    assert all(p.endswith(":streamGenerateContent?alt=sse") for p in gemini_server.paths)
    second = gemini_server.requests[1]["contents"]
    assert second[-2]["parts"] == [
        {"function_call": {"name": "bash", "args": {"command": "echo hi"}}}
    ]
    [response] = second[-1]["parts"]
    assert response["function_response"]["name"] == "bash"
    assert "hi" in json.dumps(response["function_response"]["response"])
    assert "ctx 1.5K/1M" in err  # usageMetadata's promptTokenCount; the map's window
    assert "not known" not in err  # docs/providers.md's example model is one litellm maps
    [listed] = json.loads(cli("sessions", "list", "--json").stdout)
    assert listed["usage"]["model_calls"] == 2
    assert listed["usage"]["cached_tokens"] == 1024  # cachedContentTokenCount, kept apart


def test_a_resumed_session_sends_its_history_in_valid_turns(gemini_server, tmp_path, harness9_home):
    gemini_server.reply_tool_calls([("c1", "bash", '{"command": "echo one"}')])
    gemini_server.reply_text("first done")
    gemini_server.reply_text("second done")
    first, _, _ = gemini_chat(gemini_server, "--yes", "--workdir", str(tmp_path), "-p", "one")
    again, out, err = gemini_chat(gemini_server, "--continue", "-p", "two")

    assert first.exit_code == again.exit_code == 0, err
    assert out.strip() == "second done"
    assert gemini_server.rejected == []
    roles = [c["role"] for c in gemini_server.requests[-1]["contents"]]
    assert roles == ["user", "model", "user", "model", "user"]
    assert len(stored_messages(harness9_home)) == 6  # 2 user, 3 assistant-side, 1 tool


def test_a_long_session_compacts_and_every_request_stays_valid(gemini_server):
    gemini_server.respond_with(
        lambda body: "**Goal:** a long chat" if not body.get("tools") else None  # the summary
    )
    lines = [f"message {i} " + " ".join(f"word{i}-{j}" for j in range(80)) for i in range(8)]
    for i in range(8):
        gemini_server.reply_text(f"reply {i} " + " ".join(f"answer{i}-{j}" for j in range(80)))
    result, out, err = gemini_chat(
        gemini_server, "--context-window", "3000", stdin="\n".join(lines) + "\n"
    )

    assert result.exit_code == 0, err
    assert "context compacted" in err
    assert gemini_server.rejected == []
    chats = [b for b in gemini_server.requests if b.get("tools")]
    assert len(chats) == 8
    first_text = chats[-1]["contents"][0]["parts"]
    assert any("[Conversation Summary]" in p.get("text", "") for p in first_text)
    assert out.splitlines()[-1].startswith("reply 7 ")


# -- retries the provider asks for -------------------------------------------------------------


def test_a_429_with_retry_delay_waits_that_long_and_the_turn_succeeds(gemini_server):
    gemini_server.reply_rate_limited("3s")
    gemini_server.reply_text("made it")
    started = time.monotonic()
    result, out, err = gemini_chat(gemini_server, "-p", "hello")  # real sleeps
    elapsed = time.monotonic() - started

    assert result.exit_code == 0, err
    assert out.strip() == "made it"
    assert elapsed >= 3.0
    assert len(gemini_server.requests) == 2
    assert (
        "rate limited by gemini/gemini-2.5-flash (HTTP 429): You exceeded your current quota, "
        "please check your plan.; retrying in 3.0s (retry 1)"
    ) in err


def test_a_retry_delay_longer_than_the_cap_is_cut_to_it(gemini_server, monkeypatch):
    monkeypatch.setenv("HARNESS9_RETRY_MAX_WAIT", "20")
    gemini_server.reply_rate_limited("37s")
    gemini_server.reply_rate_limited("12.5s")
    gemini_server.reply_text("ok")
    waits: list[float] = []
    result, _, err = gemini_chat(gemini_server, "-p", "hello", sleep=waits.append)

    assert result.exit_code == 0, err
    assert waits == [20.0, 12.5]


def test_the_default_cap_lets_a_37_second_retry_delay_through(gemini_server):
    gemini_server.reply_rate_limited("37s")
    gemini_server.reply_text("ok")
    waits: list[float] = []
    result, _, _ = gemini_chat(gemini_server, "-p", "hello", sleep=waits.append)
    assert result.exit_code == 0
    assert waits == [37.0]


def test_a_bad_retry_max_wait_is_one_line_and_exit_2(gemini_server, monkeypatch):
    monkeypatch.setenv("HARNESS9_RETRY_MAX_WAIT", "soon")
    result, _, err = gemini_chat(gemini_server, "-p", "hello")
    assert result.exit_code == 2
    assert "HARNESS9_RETRY_MAX_WAIT must be seconds between 0 and 3600, got 'soon'" in (
        err + result.output
    )
    assert gemini_server.requests == []


# -- errors a person can read ----------------------------------------------------------------


def test_a_503_is_named_with_its_own_status_and_message(gemini_server):
    for _ in range(4):
        gemini_server.reply_error(503, "The model is overloaded. Please try again later.")
    result, _, err = gemini_chat(gemini_server, "-p", "hello", sleep=lambda s: None)

    assert result.exit_code == 1
    last = err.strip().splitlines()[-1]
    assert last == (
        "error: gemini/gemini-2.5-flash is unavailable (HTTP 503): "
        "The model is overloaded. Please try again later."
    )
    assert "b'" not in err and "Exception" not in err and "Vertex" not in err


def test_a_rejected_request_shows_googles_message_alone(gemini_server):
    gemini_server.reply_error(400, "Request contains an invalid argument.")
    result, _, err = gemini_chat(gemini_server, "-p", "hello")

    assert result.exit_code == 1
    assert err.strip().splitlines()[-1] == (
        "error: gemini/gemini-2.5-flash rejected the request (HTTP 400): "
        "Request contains an invalid argument."
    )


def test_a_base_without_v1beta_is_told_the_form_gemini_expects(gemini_server):
    env = piped()
    base = gemini_server.base_url.removesuffix("/v1beta")
    result = cli("chat", "--model", MODEL, "--api-base", base, "-p", "hi", obj=env)
    last = env.stderr.getvalue().strip().splitlines()[-1]

    assert result.exit_code == 1
    assert last.startswith(f"error: gemini/gemini-2.5-flash was not found at {base} (HTTP 404): ")
    assert last.endswith(
        "; for gemini, --api-base ends in /v1beta (litellm appends "
        "/models/NAME:streamGenerateContent), e.g. https://generativelanguage.googleapis.com/v1beta"
    )


def test_the_server_refuses_a_function_response_that_answers_no_call():
    import urllib.request

    with ScriptedGeminiServer() as server:
        body = {
            "contents": [
                {"role": "user", "parts": [{"text": "hi"}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "bash", "response": {}}}]},
            ]
        }
        request = urllib.request.Request(
            server.base_url + "/models/gemini-2.5-flash:generateContent",
            data=json.dumps(body).encode(),
            headers={"x-goog-api-key": server.api_key},
            method="POST",
        )
        try:
            urllib.request.urlopen(request, timeout=10)
        except urllib.error.HTTPError as exc:
            status, answer = exc.code, json.loads(exc.read())
        assert status == 400
        assert answer["error"]["status"] == "INVALID_ARGUMENT"
        assert (
            "function response turn comes immediately after a function call"
            in (answer["error"]["message"])
        )


def test_a_stream_cut_off_keeps_what_was_shown(gemini_server, harness9_home):
    gemini_server.reply_stream_break("The answer is forty")
    result, out, err = gemini_chat(gemini_server, "-p", "question")

    assert result.exit_code == 1
    assert out.startswith("The answer is forty")
    assert "broke off after 19 characters" in err
    last = stored_messages(harness9_home)[-1]
    assert last.role == "assistant" and last.content.startswith("The answer is forty")
