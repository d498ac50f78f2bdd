"""The window the server really has: read from its refusal in each common wording, asked
of the server at start, and its own count believed either way (issue 32)."""

from __future__ import annotations

import pytest

from harness9.cli import app
from harness9.config import db_path
from harness9.store import open_manager
from harness9.tokens import format_token_count
from tests.support.window_chat import chat, kilo, note, runner
from tests.support.window_server import LocalServer, is_summary_request


def agent_requests(server) -> list[dict]:
    return [b for b in server.requests if not is_summary_request(b)]


def latest_settings():
    with open_manager(db_path()) as m:
        [info] = m.list_sessions()
        return info.id, m.open_session(info.id).model_settings()


@pytest.mark.parametrize("kind", ["openai", "vllm", "llama.cpp", "lm-studio"])
def test_a_refusal_naming_a_smaller_window_is_adopted_stored_and_never_exceeded_again(
    llm_server, kind
):
    local = LocalServer(kind, 4096)
    llm_server.respond_with(local)

    result = chat(llm_server, *(note(i) for i in range(12)))

    assert result.exit_code == 0, result.output
    assert "the server's window is 4,096 tokens, not 32.8K: compacting to it" in result.output
    assert len(local.over) == 1  # the first refusal only
    assert len(local.answered) >= 12  # every note answered (and the summaries)
    _, settings = latest_settings()
    assert settings is not None and settings.context_window == 4096


@pytest.mark.parametrize("finishes", [False, True])
def test_a_stream_that_dies_after_a_200_is_asked_again_unstreamed_and_its_refusal_names_the_window(
    llm_server, finishes
):
    # llama-cpp-python: a streamed request over its window gets a 200 whose stream ends
    # empty; the same request unstreamed is refused in OpenAI's words, which name the window.
    # Its chat template drops the tool definitions.
    local = LocalServer("llama-cpp-python", 2048, counts_tools=False)
    local.dead_stream_finishes = finishes
    llm_server.respond_with(local)

    result = chat(llm_server, *(note(i) for i in range(10)))

    assert result.exit_code == 0, result.output
    assert "sent an empty reply" not in result.output
    assert "the server's window is 2,048 tokens, not 32.8K: compacting to it" in result.output
    assert len(local.over) == 2 and len(set(local.over)) == 1  # one request, asked twice
    [dead, asked_again] = [b for b in llm_server.requests if local.count(b) > 2048]
    assert dead.get("stream") is True and not asked_again.get("stream")
    assert len([b for b in agent_requests(llm_server) if local.count(b) <= 2048]) >= 10
    _, settings = latest_settings()
    assert settings is not None and settings.context_window == 2048


def test_a_dead_stream_whose_server_names_no_window_is_taken_as_a_suspected_overflow(llm_server):
    # Nothing back streamed, nothing unstreamed: the window is taken as the largest request
    # answered (a lower bound), and no later request goes over the real one.
    local = LocalServer("llama-cpp-python", 2048, counts_tools=False, names_window=False)
    llm_server.respond_with(local)

    result = chat(llm_server, *(note(i) for i in range(10)))

    assert result.exit_code == 0, result.output
    assert "sent an empty reply" not in result.output
    assert "the server sent nothing back for a request of ~" in result.output
    assert len(local.over) == 2  # the first request over the window, streamed and not
    assert len([b for b in agent_requests(llm_server) if local.count(b) <= 2048]) >= 10
    _, settings = latest_settings()
    assert settings is not None and settings.context_window < 2048


def test_a_stream_that_dies_once_on_a_request_that_fits_is_answered_unstreamed(llm_server):
    # A stream that breaks for another reason: asked again, the answer arrives whole and
    # nothing is compacted or learnt.
    from tests.support.llm_server import DeadStreamReply, TextReply

    llm_server.reply(DeadStreamReply())
    llm_server.reply(TextReply("the answer, whole", usage=(50, 5)))

    result = chat(llm_server, "hello")

    assert result.exit_code == 0, result.output
    assert "the answer, whole" in result.output
    assert "context compacted" not in result.output
    assert "the server's window is" not in result.output
    assert [bool(b.get("stream")) for b in llm_server.requests] == [True, False]


def test_an_honest_empty_reply_keeps_its_message(llm_server):
    llm_server.reply_empty(usage=(40, 0))

    result = chat(llm_server, "hello")

    assert "sent an empty reply (no text, no tool call)" in result.output
    assert len(llm_server.requests) == 1  # not retried as an overflow


def test_a_resumed_session_keeps_the_learnt_window(llm_server):
    local = LocalServer("openai", 4096)
    llm_server.respond_with(local)
    chat(llm_server, *(note(i) for i in range(10)))
    sid, _ = latest_settings()
    before = len(local.over)

    result = runner.invoke(app, ["chat", "--resume", sid, "--yes"], input=note(99) + "\n")

    assert result.exit_code == 0, result.output
    assert "/4.1K" in result.output and "32.8K" not in result.output
    assert len(local.over) == before  # no second refusal to learn it again


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/props", {"default_generation_settings": {"n_ctx": 6144}}),
        ("/v1/models", {"object": "list", "data": [{"id": "smol", "max_model_len": 6144}]}),
        (
            "/api/v0/models",
            {"data": [{"id": "smol", "state": "loaded", "max_context_length": 6144}]},
        ),
    ],
)
def test_an_openai_compatible_server_is_asked_its_window_at_start(llm_server, route, body):
    llm_server.serve_get(route, body)
    llm_server.reply_text("hello")

    result = chat(llm_server, "hi")

    assert result.exit_code == 0, result.output
    assert "the context window of openai/smol is 6.1K, as its server reports" in result.output
    assert "ctx" in result.output and "/6.1K" in result.output
    assert llm_server.requests[0]["max_tokens"] == 6144 // 5


def test_the_context_window_flag_wins_over_what_the_server_reports(llm_server):
    llm_server.serve_get("/props", {"default_generation_settings": {"n_ctx": 6144}})
    llm_server.reply_text("hello")

    result = chat(llm_server, "hi", extra=("--context-window", "16000"))

    assert "/16K" in result.output and "6.1K" not in result.output
    assert "/props" not in llm_server.get_requests


def test_a_server_that_answers_no_route_leaves_the_guess_said_as_one(llm_server):
    llm_server.reply_text("hello")

    result = chat(llm_server, "hi")

    assert "is not known; assuming 32.8K" in result.output
    assert {"/props", "/v1/models", "/api/v0/models"} <= set(llm_server.get_requests)


def test_anthropics_too_long_wording_names_the_window(monkeypatch):
    from tests.support.anthropic_server import ScriptedAnthropicServer

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with ScriptedAnthropicServer() as server:
        server.reply_error(400, "prompt is too long: 9000 tokens > 8000 maximum")
        server.reply_text("fits now")
        argv = ["chat", "--model", "anthropic/claude-sonnet-4-5", "--api-base", server.base_url]
        result = runner.invoke(app, [*argv, "--yes"], input="hi\n")

        assert result.exit_code == 0, result.output
        assert "the server's window is 8,000 tokens, not 200K: compacting to it" in result.output
        assert "fits now" in result.output
        assert server.requests[1]["max_tokens"] == 8000 // 5


def test_geminis_too_long_wording_names_the_window(gemini_server):
    gemini_server.reply_error(
        400,
        "The input token count (9000) exceeds the maximum number of tokens allowed (8000).",
    )
    gemini_server.reply_text("fits now")
    argv = ["chat", "--model", "gemini/gemini-2.5-flash", "--api-base", gemini_server.base_url]
    result = runner.invoke(app, [*argv, "--yes"], input="hi\n")

    assert result.exit_code == 0, result.output
    assert "the server's window is 8,000 tokens, not 1M: compacting to it" in result.output
    assert "fits now" in result.output


def test_a_server_that_does_not_count_the_tools_is_believed_below_the_estimate(llm_server):
    # The chat template has no place for tool definitions: ~1,000 tokens fewer than the
    # estimate, which alone would be over the 2,048 window's threshold from the first turn.
    local = LocalServer("openai", 2048, counts_tools=False)
    llm_server.respond_with(local)

    result = chat(llm_server, *(note(i, 60) for i in range(8)), extra=("--context-window", "2048"))

    assert result.exit_code == 0, result.output
    assert "context compacted" not in result.output
    assert max(local.answered) < 1638  # the threshold, by the server's own count
    lines = [line for line in result.output.splitlines() if "ctx " in line]
    shown = lines[-1].split("ctx ")[1].split("/")[0]
    assert shown == format_token_count(local.answered[-1])  # the server's count, no "~"


def test_told_the_right_small_window_no_request_goes_over_it(llm_server):
    # llama-cpp-python at 2,048: tools not counted, max_tokens counted, a failed stream for
    # anything over; eight long notes, each a quarter of the window.
    local = LocalServer("llama-cpp-python", 2048, counts_tools=False, counts_max_tokens=True)
    llm_server.respond_with(local)

    result = chat(llm_server, *(note(i, 500) for i in range(8)), extra=("--context-window", "2048"))

    assert result.exit_code == 0, result.output
    assert local.over == []
    assert len(agent_requests(llm_server)) >= 8


def test_the_compaction_notice_counts_as_the_token_line_does(llm_server):
    # A server that counts half again the estimate: the notice's figures are its count, so
    # it starts above the line before it (the context only grew since) and ends on the
    # figure the token line then shows for the request that follows.
    local = LocalServer("openai", 8192, ratio=1.5)
    llm_server.respond_with(local)

    result = chat(
        llm_server, *(note(i, 400) for i in range(14)), extra=("--context-window", "8192")
    )

    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "ctx " in line or "compacted" in line]
    notices = [i for i, line in enumerate(lines) if "context compacted" in line]
    assert notices
    for i in notices:
        before, after = lines[i].split("— ")[1].split(" tokens")[0].split(" → ")
        previous = lines[i - 1].split("ctx ")[1].split("/")[0]
        following = lines[i + 1].split("ctx ")[1].split("/")[0]
        assert kilo(before) >= kilo(previous)
        assert following == "~" + after


def test_context_shows_the_servers_count_beside_the_estimates(llm_server):
    # A server that counts half again the estimate: /context's estimates add up to less
    # than the server's count of the last request; its own row says what the server counts.
    local = LocalServer("openai", 32_768, ratio=1.5)
    llm_server.respond_with(local)

    result = chat(llm_server, note(1, 400), "/context")

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    [row] = [line for line in lines if "as the server counts" in line]
    total = next(line for line in lines if line.strip().startswith("total")).split()[-1]
    assert kilo(total) < local.answered[-1] <= kilo(row.split()[-1]) + 50  # shown to 0.1K
    # The token line under the table counts as the turns' lines do: the server's count.
    [line] = [line for line in lines[lines.index(row) :] if "ctx " in line]
    assert line.split("ctx ")[1].split("/")[0] == "~" + row.split()[-1]


def test_a_one_shot_on_a_vllm_server_fits_the_reply_into_the_window_it_learns(llm_server):
    # 6,553 tokens of reply budget (a fifth of the 32.8K guess) alone are over vLLM's 4,096.
    local = LocalServer("vllm", 4096)
    llm_server.respond_with(local)
    argv = ["chat", "--model", "openai/smol", "--api-base", llm_server.base_url, "--yes"]

    result = runner.invoke(app, [*argv, "what is in the notes?"])

    assert result.exit_code == 0, result.output
    first, retry = agent_requests(llm_server)
    assert first["max_tokens"] == 6553 and retry["max_tokens"] == 4096 // 5
    assert first["messages"] == retry["messages"]  # the same context, a reply that fits


def test_a_refusal_with_nothing_to_cut_is_not_sent_again_and_suggests_the_flag(llm_server):
    llm_server.reply_error(400, "the request is too long", code="context_length_exceeded")

    result = chat(llm_server, "hi")

    assert len(agent_requests(llm_server)) == 1  # the refused request was not resent
    assert "set --context-window N" in result.output


def test_llama_cpp_pythons_own_wording_names_the_window(llm_server):
    llm_server.reply_error(400, "Requested tokens (40000) exceed context window of 16384")
    llm_server.reply_text("fits now")

    result = chat(llm_server, "hi", extra=("--no-stream",))

    assert result.exit_code == 0, result.output
    assert "the server's window is 16,384 tokens, not 32.8K: compacting to it" in result.output
    assert agent_requests(llm_server)[1]["max_tokens"] == 16384 // 5
