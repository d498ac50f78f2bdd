"""What chat tells the user while the provider misbehaves: retries, wrong URLs, unknown providers."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from harness9.cli import app

runner = CliRunner()


def chat(stdin: str, *args: str):
    return runner.invoke(app, ["chat", *args], input=stdin)


def test_each_retry_is_one_line_naming_the_reason_and_the_wait(llm_server):
    llm_server.reply_error(500, "upstream melted")
    llm_server.reply_text("recovered")

    result = chat("hi\n", "--model", "openai/fake", "--api-base", llm_server.base_url)

    assert result.exit_code == 0, result.output
    assert result.stdout == "recovered\n"
    [notice] = [ln for ln in result.stderr.splitlines() if "retrying" in ln]
    assert "openai/fake is unavailable (HTTP 500): upstream melted; retrying in 1." in notice
    assert notice.endswith("s (retry 1)")


def test_an_unknown_provider_is_named_without_claiming_an_http_error(llm_server):
    result = chat("hi\n", "--model", "nosuchprovider/foo", "--api-base", llm_server.base_url)

    assert result.exit_code == 1
    assert "unknown provider 'nosuchprovider'" in result.stderr
    assert "HTTP" not in result.stderr
    assert llm_server.requests == []


def test_an_api_base_that_is_not_a_url_is_named_at_once(llm_server):
    result = chat("hi\n", "--model", "openai/fake", "--api-base", "notaurl")

    assert result.exit_code == 1
    assert "could not connect to notaurl: it is not an http:// or https:// URL" in result.stderr
    assert "retrying" not in result.stderr and "HTTP 500" not in result.stderr


def test_an_answer_with_a_long_separator_line_arrives_whole(llm_server):
    rule = "-" * 750  # 150 identical streamed chunks
    llm_server.reply_text(f"{rule}\ndone", chunk_size=5)

    result = chat("draw a line\n", "--model", "openai/fake", "--api-base", llm_server.base_url)

    assert result.exit_code == 0, result.output
    assert result.stdout == f"{rule}\ndone\n"
    assert "broke off" not in result.stderr


def test_a_message_that_can_never_fit_the_window_is_refused_in_one_line(llm_server):
    from harness9.config import db_path
    from harness9.store import Manager

    huge = "x" * 2_000_000  # ~500K tokens against an 8K window
    llm_server.reply_text("small reply")

    result = chat(
        f"{huge}\nsmall question\n",
        "--model",
        "openai/fake",
        "--api-base",
        llm_server.base_url,
        "--context-window",
        "8000",
    )

    assert result.exit_code == 1  # a piped turn failed
    [line] = [ln for ln in result.stderr.splitlines() if "never fit" in ln]
    assert line == (
        "error: this message is about 500K tokens and can never fit the 8K-token context "
        "window; nothing was sent (save it to a file in the working directory and ask the "
        "agent to read it)"
    )
    assert result.stdout == "small reply\n"  # the chat goes on
    assert len(llm_server.requests) == 1
    with Manager(db_path()) as m:
        [info] = m.list_sessions()
        assert [x.content for x in m.open_session(info.id).get_messages()] == [
            "small question",
            "small reply",
        ]


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--context-window", "10"], {}, "got '10'"),
        ([], {"HARNESS9_CONTEXT_WINDOW": "100"}, "got '100'"),
    ],
)
def test_an_absurd_context_window_is_a_usage_error(llm_server, monkeypatch, args, env, named):
    for k, v in env.items():
        monkeypatch.setenv(k, v)

    result = chat("hi\n", "--model", "openai/fake", "--api-base", llm_server.base_url, *args)

    assert result.exit_code == 2
    assert result.stderr.startswith(
        "harness9: --context-window (HARNESS9_CONTEXT_WINDOW) takes a number of tokens "
        "from 1,024 to 10M"
    )
    assert result.stderr.endswith(f"{named}\n")
    assert result.stderr.count("\n") == 1
    assert llm_server.requests == []
