"""Slash commands take exactly the arguments they say: one table parses them all."""

from __future__ import annotations

import io

from rich.console import Console

from harness9.config import db_path
from harness9.engine.events import Compaction
from harness9.schema import Message
from harness9.store import Manager
from harness9.store.session import SessionInfo, SessionSettings
from harness9.ui.picker import SessionPicker
from harness9.ui.repl import COMMANDS, SLASH_COMMANDS, usage_error
from harness9.ui.status import compaction_notice
from tests.support.cli import chat


def messages_of_only_session() -> list[str]:
    with Manager(db_path()) as m:
        [info] = m.list_sessions()
        return [msg.content for msg in m.open_session(info.id).get_messages()]


def make_sessions(titles: list[str], workdir: str = "/work/proj") -> list[str]:
    """Sessions with one exchange each, oldest first; returns their ids."""
    ids = []
    with Manager(db_path()) as m:
        for title in titles:
            s = m.new_session()
            s.add_messages([Message("user", title), Message("assistant", "ok")])
            s.remember_model(SessionSettings("openai/test-model", 0, workdir=workdir))
            ids.append(s.session_id)
    return ids


def test_undo_with_an_argument_is_a_usage_error_and_undoes_nothing(llm_server):
    llm_server.reply_text("an answer")

    result = chat(llm_server, "a question\n/undo extra\n")

    assert "error: usage: /undo (/undo takes no arguments); nothing was done" in result.stderr
    assert messages_of_only_session() == ["a question", "an answer"]


def test_exit_with_an_argument_does_not_leave(llm_server):
    llm_server.reply_text("still here")

    result = chat(llm_server, "/exit now\nhello\n")

    assert "usage: /exit (/exit takes no arguments)" in result.stderr
    assert result.stdout == "still here\n"


def test_search_without_words_is_a_usage_error(llm_server):
    result = chat(llm_server, "/search\n")
    assert "error: usage: /search WORDS (/search needs an argument); nothing was done" in (
        result.stderr
    )


def test_usage_errors_follow_each_commands_arguments():
    by_name = {c.name: c for c in COMMANDS}
    assert usage_error(by_name["/model"], "openai/x 8000") is None
    assert usage_error(by_name["/model"], "openai/x 8000 more") == (
        "usage: /model [NAME [WINDOW]] (/model takes at most 2); nothing was done"
    )
    assert usage_error(by_name["/compact"], "keep the file paths and the errors") is None
    assert "/quit" not in SLASH_COMMANDS and "/last" in SLASH_COMMANDS


def test_resume_with_an_id_prefix_resumes_that_session(llm_server):
    old, _newer = make_sessions(["the old topic", "a newer topic"])
    llm_server.reply_text("continued")

    result = chat(llm_server, f"/resume {old[:8]}\nback to it\n")

    assert result.exit_code == 0, result.output
    assert f"resumed session {old[:8]}" in result.stderr
    sent = [m["content"] for m in llm_server.requests[-1]["messages"][1:]]
    assert sent == ["the old topic", "ok", "back to it"]


def test_the_resume_picker_shows_the_workdir_and_pages_past_ten(llm_server):
    ids = make_sessions([f"topic {n}" for n in range(12)], workdir="/srv/project-x")
    llm_server.reply_text("continued")

    # Enter shows the second page; 12 is the oldest session (topic 0).
    result = chat(llm_server, "/resume\n\n12\ngo on\n")

    assert result.exit_code == 0, result.output
    assert "Sessions (1-10 of 12):" in result.stderr
    assert "Sessions (11-12 of 12):" in result.stderr
    assert "/srv/project-x  topic 11" in result.stderr
    assert f"resumed session {ids[0][:8]}" in result.stderr


def test_words_typed_at_the_resume_picker_filter_it(llm_server):
    make_sessions(["fix the parser", "write the docs", "parser benchmarks"])
    llm_server.reply_text("continued")

    result = chat(llm_server, "/resume\nparser\n2\ngo on\n")

    assert (
        "Sessions whose title, id or directory matches 'parser' (/search looks in what was said) (1-2 of 2):"
        in result.stderr
    )
    sent = [m["content"] for m in llm_server.requests[-1]["messages"][1:]]
    assert sent[0] == "fix the parser"


def test_the_picker_cancels_at_the_end_of_input():
    infos = [SessionInfo(f"{n:08d}-0000-0000-0000-000000000000", 0, 0, 1, "t") for n in range(3)]
    console = Console(file=io.StringIO(), width=100)

    def eof(_prompt: str) -> str:
        raise EOFError

    assert SessionPicker(infos, console, eof, interactive=False).run() is None


def test_model_with_a_window_below_the_minimum_is_refused_as_the_flag_is(llm_server):
    result = chat(llm_server, "/model openai/small 500\n/model\n")

    assert (
        "error: the window after /model NAME takes a number of tokens from 1,024 to 10M, "
        "such as 8192, 32k, 32.8K or 1M (no model works in less; none has more), got '500'"
    ) in result.stderr
    assert "model openai/test-model" in result.stderr  # nothing was switched


def test_last_shows_the_last_tool_result_in_full(llm_server, tmp_path):
    lines = "\n".join(f"line {n}" for n in range(1, 31))
    (tmp_path / "notes.txt").write_text(lines + "\n")
    llm_server.reply_tool_calls([("c1", "read_file", '{"path": "notes.txt"}')])
    llm_server.reply_text("read it")

    result = chat(llm_server, "read notes.txt\n/last\n", workdir=tmp_path)

    during, after = result.stderr.split("→ read_file", 2)[1:]
    assert "line 30" not in during  # the turn showed the first line only
    assert "line 1\n" in after and "line 30" in after


def test_counts_of_one_are_singular():
    notice = compaction_notice(Compaction(5000, 900, 12, 1, "summarize"))
    assert "(12 → 1 message)" in notice.plain
