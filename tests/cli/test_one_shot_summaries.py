"""One-shot chats (`chat -c -p` in a loop) make no summary they cannot use: a summary
prepared ahead would be cancelled when the process exits after its one turn."""

from __future__ import annotations

from harness9.cli import app
from tests.support.window_chat import note, runner
from tests.support.window_server import LocalServer, is_summary_request


def test_one_shots_ask_for_a_summary_only_when_they_compact(llm_server):
    llm_server.respond_with(LocalServer("openai", 8192))
    base = ["chat", "--model", "openai/smol", "--api-base", llm_server.base_url]
    base += ["--context-window", "8192"]

    compactions = 0
    for i in range(10):
        argv = [*base, *(["-c"] if i else []), "-p", note(i, tokens=600)]
        result = runner.invoke(app, argv)
        assert result.exit_code == 0, result.output
        compactions += result.stderr.count("⚡ context compacted")

    summaries = [b for b in llm_server.requests if is_summary_request(b)]
    assert compactions == 1  # at the threshold, with the one summary it made
    assert len(summaries) == 1
