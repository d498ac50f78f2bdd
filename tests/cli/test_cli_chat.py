"""`harness9 chat` through the real entry point: piped stdin, the scripted server, a real store."""

from __future__ import annotations

import json

import pytest

from harness9.cli import app
from harness9.config import db_path
from harness9.context import is_valid_tool_sequence
from harness9.store import Manager
from tests.support.cli import chat, run_cli, runner


def stored_sessions() -> list[tuple[str, list[tuple[str, str]]]]:
    with Manager(db_path()) as m:
        return [
            (info.id, [(msg.role, msg.content) for msg in m.open_session(info.id).get_messages()])
            for info in m.list_sessions()
        ]


def test_a_piped_line_is_one_turn_reply_on_stdout_token_line_on_stderr(llm_server):
    llm_server.reply_text("Hello from the model", usage=(1234, 5))

    result = chat(llm_server, "hi\n")

    assert result.exit_code == 0, result.output
    assert result.stdout == "Hello from the model\n"
    assert "test-model │ session" in result.stderr and "ctx 1.2K/" in result.stderr
    assert "\x1b[" not in result.stdout + result.stderr  # no colours when not a terminal
    [(_, messages)] = stored_sessions()
    assert messages == [("user", "hi"), ("assistant", "Hello from the model")]


def test_resume_sends_the_stored_history_with_the_new_message(llm_server):
    llm_server.reply_text("first reply")
    chat(llm_server, "remember the number 42\n")
    [(sid, _)] = stored_sessions()

    llm_server.reply_text("It was 42.")
    result = chat(llm_server, "what was the number?\n", "--resume", sid[:8])

    assert result.exit_code == 0, result.output
    sent = [(m["role"], m["content"]) for m in llm_server.requests[-1]["messages"][1:]]
    assert sent == [
        ("user", "remember the number 42"),
        ("assistant", "first reply"),
        ("user", "what was the number?"),
    ]


def test_continue_picks_the_most_recent_session(llm_server):
    llm_server.reply_text("one")
    chat(llm_server, "first session\n")
    llm_server.reply_text("two")
    result = chat(llm_server, "again\n", "--continue")

    assert result.exit_code == 0
    [(_, messages)] = stored_sessions()
    assert [c for _, c in messages] == ["first session", "one", "again", "two"]


def test_an_unknown_resume_id_is_a_one_line_error(llm_server):
    result = chat(llm_server, "", "--resume", "deadbeef")

    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "deadbeef" in result.stderr
    assert "Traceback" not in result.output


def test_without_a_key_or_endpoint_chat_names_the_variable_to_set(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = runner.invoke(app, ["chat", "--model", "openai/gpt-4o-mini"], input="hi\n")

    assert result.exit_code == 1
    assert "OPENAI_API_KEY" in result.stderr and result.stderr.count("\n") == 1


def test_undo_removes_the_last_exchange(llm_server):
    llm_server.reply_text("reply one")
    llm_server.reply_text("reply two")

    result = chat(llm_server, "one\n/undo\ntwo\n")

    assert result.exit_code == 0, result.output
    assert "removed the last exchange (2 messages)" in result.stderr
    [(_, messages)] = stored_sessions()
    assert messages == [("user", "two"), ("assistant", "reply two")]
    assert [m["content"] for m in llm_server.requests[1]["messages"][1:]] == ["two"]


def test_new_starts_a_second_session(llm_server):
    llm_server.reply_text("a-reply")
    llm_server.reply_text("b-reply")

    result = chat(llm_server, "a\n/new\nb\n")

    assert result.exit_code == 0
    sessions = dict(stored_sessions())
    assert sorted(sessions.values()) == [
        [("user", "a"), ("assistant", "a-reply")],
        [("user", "b"), ("assistant", "b-reply")],
    ]
    assert len(llm_server.requests[1]["messages"]) == 2  # system + "b": nothing from the first


def test_new_new_new_exit_leaves_no_empty_session_behind(llm_server):
    result = chat(llm_server, "/new\n/new\n/new\n/exit\n")

    assert result.exit_code == 0
    assert stored_sessions() == []
    assert runner.invoke(app, ["sessions", "list"]).stdout == "No sessions.\n"


def test_an_empty_session_is_dropped_when_new_leaves_it_and_a_used_one_is_kept(llm_server):
    llm_server.reply_text("kept")

    result = chat(llm_server, "/new\nsay something\n/new\n")

    assert result.exit_code == 0
    assert [msgs for _, msgs in stored_sessions()] == [
        [("user", "say something"), ("assistant", "kept")]
    ]


def test_a_resumed_empty_session_is_never_deleted(llm_server):
    with Manager(db_path()) as m:
        sid = m.new_session().session_id  # e.g. another chat's, still at its prompt

    result = chat(llm_server, "/new\n", "--resume", sid)

    assert result.exit_code == 0
    assert [s for s, _ in stored_sessions()] == [sid]


def test_resume_command_lists_sessions_and_switches_by_number(llm_server):
    llm_server.reply_text("old reply")
    chat(llm_server, "the old topic\n")
    llm_server.reply_text("continued")

    result = chat(llm_server, "/resume\n1\nback to it\n")

    assert result.exit_code == 0, result.output
    assert "[1]" in result.stderr and "the old topic" in result.stderr
    sent = [m["content"] for m in llm_server.requests[-1]["messages"][1:]]
    assert sent == ["the old topic", "old reply", "back to it"]


def test_resume_command_cancels_on_anything_but_a_number(llm_server):
    llm_server.reply_text("old reply")
    chat(llm_server, "the old topic\n")

    result = chat(llm_server, "/resume\nnope\n")

    assert "resume cancelled" in result.stderr
    assert len(stored_sessions()) == 1  # the empty new session was not kept


def test_context_command_shows_the_token_breakdown(llm_server):
    result = chat(llm_server, "/context\n", "--context-window", "50000")

    assert result.exit_code == 0
    for label in (
        "system prompt",
        "tool definitions",
        "summary",
        "messages (0)",
        "window",
        "50K",
        "40K",
    ):
        assert label in result.stderr


def test_unknown_slash_command_is_reported_and_the_chat_goes_on(llm_server):
    llm_server.reply_text("fine")
    result = chat(llm_server, "/bogus\nhello\n")

    assert "unknown command /bogus" in result.stderr
    assert result.stdout == "fine\n"


def test_a_small_context_window_compacts_with_a_notice_and_keeps_every_message(llm_server):
    llm_server.respond_with(
        lambda body: (
            "**Goal:** testing compaction"
            if not body.get("tools")  # a summary request: chat requests always offer tools
            else None
        )
    )
    # Varied text: litellm rejects a stream that repeats one chunk over and over.
    lines = [f"message {i} " + " ".join(f"word{i}-{j}" for j in range(80)) for i in range(8)]
    for i in range(8):
        llm_server.reply_text(f"reply {i} " + " ".join(f"answer{i}-{j}" for j in range(80)))

    result = chat(llm_server, "\n".join(lines) + "\n", "--context-window", "1500")

    assert result.exit_code == 0, result.output
    assert "⚡ context compacted" in result.stderr
    [(sid, messages)] = stored_sessions()
    assert len(messages) == 16
    with Manager(db_path()) as m:
        assert m.open_session(sid).list_checkpoints()
    last_chat = [
        b for b in llm_server.requests if not b["messages"][0]["content"].startswith("You compress")
    ][-1]
    assert last_chat["messages"][1]["content"].startswith("[Conversation Summary]")


def test_bash_without_a_tty_or_yes_is_refused_and_the_model_is_told(llm_server, tmp_path):
    marker = tmp_path / "ran"
    llm_server.reply_tool_calls([("c1", "bash", json.dumps({"command": f"touch {marker}"}))])
    llm_server.reply_text("I could not run it.")

    result = chat(llm_server, "make the file\n", workdir=tmp_path)

    assert result.exit_code == 0
    assert not marker.exists()
    tool_msg = next(m for m in llm_server.requests[1]["messages"] if m["role"] == "tool")
    assert "--yes" in tool_msg["content"]


def test_bash_with_yes_runs_in_the_working_directory(llm_server, tmp_path):
    llm_server.reply_tool_calls([("c1", "bash", json.dumps({"command": "pwd"}))])
    llm_server.reply_text("done")

    result = chat(llm_server, "where am I\n", "--yes", workdir=tmp_path)

    assert result.exit_code == 0
    tool_msg = next(m for m in llm_server.requests[1]["messages"] if m["role"] == "tool")
    assert str(tmp_path.resolve()) in tool_msg["content"]


def test_file_tools_refuse_escapes_from_the_working_directory(llm_server, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "secret.txt").write_text("top secret")
    (work / "link").symlink_to(tmp_path / "secret.txt")
    llm_server.reply_tool_calls(
        [
            ("c1", "read_file", json.dumps({"path": "../secret.txt"})),
            ("c2", "read_file", json.dumps({"path": "link"})),
        ]
    )
    llm_server.reply_text("blocked")

    chat(llm_server, "read the secret\n", workdir=work)

    results = [m["content"] for m in llm_server.requests[1]["messages"] if m["role"] == "tool"]
    assert len(results) == 2
    assert all("top secret" not in r and "escapes the working directory" in r for r in results)


def test_a_model_error_in_a_piped_chat_exits_non_zero_but_keeps_the_question(llm_server):
    llm_server.reply_error(400, "bad request for reasons")

    result = chat(llm_server, "hello\n")

    assert result.exit_code == 1
    assert "bad request for reasons" in result.stderr
    [(_, messages)] = stored_sessions()
    assert messages == [("user", "hello")]


def test_an_empty_chat_leaves_no_empty_session_behind(llm_server):
    result = chat(llm_server, "")

    assert result.exit_code == 0
    assert stored_sessions() == []


@pytest.mark.slow
def test_real_process_chat_then_resume_through_the_console_entry_point(llm_server, harness9_home):
    env = {"OPENAI_API_KEY": "sk-test", "HARNESS9_HOME": str(harness9_home)}
    base = ["chat", "--model", "openai/test-model", "--api-base", llm_server.base_url]
    llm_server.reply_text("Noted: blue.")
    first = run_cli(*base, input="my favourite colour is blue\n", env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "Noted: blue.\n"
    [(sid, _)] = stored_sessions()

    llm_server.reply_text("Blue.")
    second = run_cli(*base, "--resume", sid, input="what is my favourite colour?\n", env=env)

    assert second.returncode == 0, second.stderr
    sent = [m["content"] for m in llm_server.requests[-1]["messages"][1:]]
    assert sent == ["my favourite colour is blue", "Noted: blue.", "what is my favourite colour?"]
    with Manager(db_path()) as m:
        assert is_valid_tool_sequence(m.open_session(sid).get_messages())
