"""What chat says about the context when compaction cannot help by itself (issue 36: 8, 11).

A window whose system prompt and tool definitions take most of the compaction's target
compacts every few turns: that is said once a session, with what leaves more room. With
automatic compaction off, every turn over the threshold says so, not only the first.
"""

from __future__ import annotations

from tests.support.cli import chat, stored_session
from tests.support.history import exchanges
from tests.support.llm_server import is_summary_request

FIXED_PART = "the system prompt and tool definitions take "
OVER = "is over the compaction threshold (3.2K tokens); automatic compaction is off: run /compact"


def test_a_4k_window_says_once_that_the_system_prompt_and_tools_keep_it_over_target(
    llm_server, workdir
):
    # Replies of ~300 tokens: beside ~1.4K of system prompt and tools, a 4K window
    # compacts every few turns, and each compaction lands over its 1.6K target.
    llm_server.respond_with(
        lambda body: "Progress: short." if is_summary_request(body) else "r" * 1200
    )
    stdin = "".join(f"question {i}\n" for i in range(14))

    result = chat(llm_server, stdin, "--context-window", "4096", workdir=workdir)

    assert result.exit_code == 0, result.output
    assert result.output.count("⚡ context compacted") >= 2
    assert result.output.count(FIXED_PART) == 1
    assert "% of the 4.1K window, so compaction cannot bring the context down to its " in (
        result.output
    )
    assert "1.6K-token target (40 %) and will run every few turns; a model with a larger " in (
        result.output
    )
    # Said after the first compaction, not before.
    assert result.output.index("⚡ context compacted") < result.output.index(FIXED_PART)


def test_a_large_window_never_mentions_the_system_prompt(llm_server, workdir):
    sid = stored_session(*exchanges(40, 2000))
    llm_server.respond_with(lambda body: "Progress: long." if is_summary_request(body) else "ok")

    result = chat(llm_server, "go on\n", "--context-window", "32768", "--resume", sid)

    assert result.exit_code == 0, result.output
    assert "⚡ context compacted" in result.output
    assert FIXED_PART not in result.output


def test_with_auto_compaction_off_every_turn_over_the_threshold_is_announced(llm_server):
    # 20 long exchanges: ~4.4K tokens with the tools, over a 4K window. The first turn makes
    # two model calls (a tool call, then the answer): it is announced once.
    sid = stored_session(*exchanges(20, 400))
    llm_server.reply_tool_calls([("c1", "read_todos", "{}")])
    for text in ("first", "second", "third"):
        llm_server.reply_text(text)

    result = chat(
        llm_server,
        "one\ntwo\nthree\n",
        "--no-auto-compact",
        "--context-window",
        "4000",
        "--resume",
        sid,
    )

    assert result.exit_code == 0, result.output
    assert result.output.count(OVER) == 3
    assert "% of the window) is over the compaction threshold" in result.output
    assert not any(map(is_summary_request, llm_server.requests))
    assert len(llm_server.requests) == 4


def test_with_auto_compaction_off_a_turn_under_the_threshold_says_nothing(llm_server):
    llm_server.reply_text("ok")

    result = chat(llm_server, "hi\n", "--no-auto-compact", "--context-window", "4000")

    assert result.exit_code == 0, result.output
    assert "automatic compaction is off" not in result.output
