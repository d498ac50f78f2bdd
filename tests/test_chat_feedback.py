"""What chat tells the user while the provider misbehaves: retries, wrong URLs, unknown providers."""

from __future__ import annotations

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
