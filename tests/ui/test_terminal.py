"""The terminal experience: Markdown replies, one-shot prompts, paste, approvals, recap, cost.

The chat loop runs with the real engine against the scripted server, on Rich
consoles sized like a terminal; CLI behaviour goes through Typer's CliRunner on
``harness9.cli.app`` (stdin and stdout are not terminals there, as in a pipe).
"""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console
from typer.testing import CliRunner

from harness9.cli import app
from harness9.cli.chat import window_notes
from harness9.config import db_path, tool_options
from harness9.errors import ConfigError
from harness9.provider import get_model_limits
from harness9.provider.limits import asks_server, server_limits
from harness9.provider.pricing import call_cost
from harness9.schema import Usage
from harness9.store import Manager
from harness9.tools.shell import is_auto_approved
from harness9.ui.approval import TerminalApprover, split_answer
from harness9.ui.line_editor import prompt_reader
from harness9.ui.markdown import MarkdownReply, split_blocks
from harness9.ui.repl import SLASH_COMMANDS
from tests.support.chat_loop import chat_loop
from tests.support.cli import NO_SUBAGENTS, NO_SUMMARIES, answering
from tests.support.pty_terminal import drive_pty

runner = CliRunner()
REPLY_MD = (
    "## Plan\n\n"
    "Here is a paragraph that is long enough to need wrapping in a narrow terminal window.\n\n"
    "```python\ndef add(a, b):\n    return a + b\n```\n\n"
    "| name | size |\n|------|------|\n| a.py | 12 |\n| b.py | 7 |\n\n"
    "- first item\n- second item\n"
)


def cli_chat(server, *args: str, model: str = "openai/test-model", stdin: str | None = None):
    argv = ["chat", "--model", model, "--api-base", server.base_url, *args]
    return runner.invoke(app, argv, input=stdin)


def terminal(width: int = 80, height: int = 24) -> Console:
    """A terminal of this size that records what stays on screen.

    Not "interactive": the live region of the block being streamed is then drawn
    only when it ends (and, being transient, not at all), so the recording holds
    exactly the lines that remain once a reply is complete.
    """
    return Console(
        file=io.StringIO(),
        width=width,
        height=height,
        force_terminal=True,
        force_interactive=False,
        color_system=None,
        record=True,
        highlight=False,
    )


def lines_of(*lines: str):
    queue = list(lines)

    def read(_prompt: str) -> str:
        if not queue:
            raise EOFError
        return queue.pop(0)

    return read


@pytest.fixture
def manager(harness9_home: Path):
    harness9_home.mkdir(parents=True, exist_ok=True)
    with Manager(db_path()) as m:
        yield m


# -- Markdown ------------------------------------------------------------------------------


def test_split_blocks_waits_for_the_line_after_a_blank_and_keeps_fences_whole():
    done, rest = split_blocks("para one\n\n```\na\n\nb\n")
    assert done == ["para one"] and rest == "```\na\n\nb\n"
    done, rest = split_blocks("```\na\n\nb\n```\nnext")
    assert done == ["```\na\n\nb\n```"] and rest == "next"
    # An indented line after the blank continues the list item: not finished yet.
    assert split_blocks("- item\n\n  more\n\nx")[0] == ["- item\n\n  more"]


def test_a_streamed_reply_renders_as_markdown_in_a_terminal_sized_console(
    llm_server, manager, workdir
):
    llm_server.reply_text(REPLY_MD, chunk_size=7)
    console = terminal(width=60)
    loop = chat_loop(llm_server, manager, workdir, console, lines_of("show me"))

    assert loop.run() == 0

    shown = console.export_text()
    assert "```" not in shown and "##" not in shown  # the source punctuation is gone
    assert "def add(a, b):" in shown  # the code block, as a highlighted block
    assert re.search(r"name\s+size\s*\n\s*─+\s*\n\s*a\.py\s+12\s*\n\s*b\.py\s+7", shown)
    assert "• first item" in shown
    for line in shown.splitlines():  # no line is wider than the terminal
        assert len(line.rstrip()) <= 60
    words = set(REPLY_MD.replace("\n", " ").split())
    prose = [ln.strip() for ln in shown.splitlines() if "paragraph" in ln or "wrapping" in ln]
    for token in " ".join(prose).split():  # wrapped on word boundaries only
        assert token in words


def test_escape_sequences_in_a_markdown_reply_are_shown_not_obeyed(llm_server, manager, workdir):
    llm_server.reply_text("title \x1b]0;pwned\x07 and \u202eevil\n\n`code \x1b[2J`\n")
    console = terminal()
    chat_loop(llm_server, manager, workdir, console, lines_of("hi")).run()
    raw = console.file.getvalue()
    assert "\x07" not in raw and "\u202e" not in raw and "\x1b]0;" not in raw
    assert "\\x1b]0;pwned\\x07" in console.export_text()


def test_markdown_link_targets_are_printed_not_made_clickable():
    console = terminal()
    reply = MarkdownReply(console)
    reply.feed("[click](http://evil.example/x)\n")
    reply.finish()
    assert "\x1b]8;" not in console.file.getvalue()  # no OSC 8 hyperlink
    assert "http://evil.example/x" in console.export_text()


def test_a_piped_reply_is_the_models_exact_text(llm_server):
    llm_server.reply_text(REPLY_MD)
    result = cli_chat(llm_server, "show me")
    assert result.exit_code == 0, result.output
    assert result.stdout == REPLY_MD


def test_plain_flag_keeps_the_exact_text(llm_server):
    llm_server.reply_text("**bold** text")
    result = cli_chat(llm_server, "--plain", "-p", "hi")
    assert result.stdout == "**bold** text\n"


# -- one-shot ------------------------------------------------------------------------------


def test_one_shot_prints_the_reply_on_stdout_and_the_token_line_on_stderr(llm_server):
    llm_server.reply_text("4", usage=(50, 1))
    result = cli_chat(llm_server, "what is 2+2?")
    assert result.exit_code == 0, result.output
    assert result.stdout == "4\n"
    assert "ctx 50/" in result.stderr
    with Manager(db_path()) as m:
        [info] = m.list_sessions()
        assert [x.content for x in m.open_session(info.id).get_messages()] == ["what is 2+2?", "4"]


def test_one_shot_with_continue_adds_to_the_last_session(llm_server):
    llm_server.reply_text("noted: 42")
    assert cli_chat(llm_server, "remember 42").exit_code == 0
    llm_server.reply_text("it was 42")

    result = cli_chat(llm_server, "--continue", "-p", "what number?")

    assert result.exit_code == 0, result.output
    assert result.stdout == "it was 42\n"
    sent = [m["content"] for m in llm_server.requests[-1]["messages"][1:]]
    assert sent == ["remember 42", "noted: 42", "what number?"]
    with Manager(db_path()) as m:
        assert len(m.list_sessions()) == 1


def test_a_failed_one_shot_turn_exits_1(llm_server):
    llm_server.reply_error(400, "bad request")
    result = cli_chat(llm_server, "hi")
    assert result.exit_code == 1
    assert "error:" in result.stderr and result.stdout == ""


def test_prompt_argument_and_option_together_are_a_usage_error(llm_server):
    result = cli_chat(llm_server, "one", "-p", "two")
    assert result.exit_code == 2
    assert "either as an argument or with --prompt" in result.stderr


# -- the line editor -----------------------------------------------------------------------


def test_a_bracketed_paste_arrives_as_one_message(llm_server, manager, workdir, harness9_home):
    llm_server.reply_text("got it")
    console = terminal()
    with create_pipe_input() as pipe:
        pipe.send_text("\x1b[200~line one\nline two\nline three\x1b[201~\r")
        pipe.send_text("\x04")  # Ctrl-D: leave
        read = prompt_reader(
            [*SLASH_COMMANDS],
            harness9_home / "prompt_history",
            pt_input=pipe,
            pt_output=DummyOutput(),
        )
        loop = chat_loop(llm_server, manager, workdir, console, read)
        assert loop.run() == 0

    assert len(llm_server.requests) == 1
    assert llm_server.requests[0]["messages"][-1] == {
        "role": "user",
        "content": "line one\nline two\nline three",
    }
    # Kept in the history as one entry (prompt_toolkit marks each of its lines with "+").
    assert "+line one\n+line two\n+line three\n" in (harness9_home / "prompt_history").read_text()


def test_alt_enter_and_a_trailing_backslash_continue_the_line():
    with create_pipe_input() as pipe:
        read = prompt_reader(["/help"], None, pt_input=pipe, pt_output=DummyOutput())
        pipe.send_text("first\x1b\rsecond\\\rthird\r")
        assert read("› ") == "first\nsecond\nthird"


# -- approvals -----------------------------------------------------------------------------


def write_call(call_id: str, path: str, content: str) -> tuple[str, str, str]:
    return (call_id, "write_file", json.dumps({"path": path, "content": content}))


def test_write_file_shows_a_diff_and_always_skips_the_question_for_that_path(
    llm_server, manager, workdir
):
    (workdir / "app.py").write_text("x = 1\ny = 2\n")
    llm_server.reply_tool_calls([write_call("c1", "app.py", "x = 1\ny = 3\n")])
    llm_server.reply_tool_calls([write_call("c2", "app.py", "x = 1\ny = 4\n")])
    llm_server.reply_text("done")
    console = terminal(width=80)
    approver, questions = answering(console, "a", then="a")
    loop = chat_loop(llm_server, manager, workdir, console, lines_of("bump y"), approver=approver)

    assert loop.run() == 0

    assert questions == ["Overwrite app.py? [y/N/a] "]  # asked once; Enter is no
    shown = console.export_text()
    assert "--- a/app.py\n+++ b/app.py" in shown and "-y = 2\n+y = 3" in shown
    assert "-y = 3\n+y = 4" in shown  # an always-allowed path still shows what changes
    assert "✓ allowed: app.py (always for this path, this session)" in shown
    assert "✓ allowed: app.py (always, this session)" in shown  # the second write
    assert (workdir / "app.py").read_text() == "x = 1\ny = 4\n"


def test_declining_a_write_leaves_the_file_and_tells_the_model(llm_server, manager, workdir):
    llm_server.reply_tool_calls([write_call("c1", "new.txt", "hello\n")])
    llm_server.reply_text("ok, not written")
    console = terminal()
    approver = TerminalApprover(console, ask=lambda prompt: "n", flush=lambda: None)
    chat_loop(llm_server, manager, workdir, console, lines_of("write"), approver=approver).run()

    assert not (workdir / "new.txt").exists()
    shown = console.export_text()
    assert "new file new.txt (1 line)\nhello" in shown
    assert "✗ declined: new.txt" in shown
    tool_msg = llm_server.requests[1]["messages"][-1]
    assert tool_msg["role"] == "tool" and "declined" in tool_msg["content"]


def test_a_no_with_a_reason_carries_the_reason_to_the_model(llm_server, manager, workdir):
    llm_server.reply_tool_calls([("c1", "bash", '{"command": "deploy --prod"}')])
    llm_server.reply_text("understood")
    console = terminal()
    approver = TerminalApprover(
        console, ask=lambda prompt: "n, use the staging config instead", flush=lambda: None
    )
    chat_loop(llm_server, manager, workdir, console, lines_of("deploy"), approver=approver).run()

    shown = console.export_text()
    assert "✗ declined: deploy --prod — the model is told: use the staging config instead" in shown
    tool_msg = llm_server.requests[1]["messages"][-1]
    assert tool_msg["content"] == (
        "the user declined to run this command; the user said: use the staging config instead"
    )


@pytest.mark.parametrize(
    ("answer", "word", "reason"),
    [
        ("n, use staging", "n", "use staging"),
        ("No: not now", "n", "not now"),
        ("n wait", "n", "wait"),
        ("N", "n", ""),
        ("", "", ""),
        ("Yes", "yes", ""),
        ("nope", "nope", ""),
    ],
)
def test_only_a_no_carries_a_reason(answer, word, reason):
    assert split_answer(answer) == (word, reason)


def test_without_a_terminal_write_file_is_refused_unless_yes(llm_server, tmp_path):
    for extra in ([], ["--yes"]):
        llm_server.reply_tool_calls([write_call("c1", "out.txt", "data\n")])
        llm_server.reply_text("finished")
        result = cli_chat(llm_server, "--workdir", str(tmp_path), *extra, "-p", "write it")
        assert result.exit_code == 0, result.output
        tool_msg = llm_server.requests[-1]["messages"][-1]
        assert ("--yes" in tool_msg["content"]) is (not extra)
    assert (tmp_path / "out.txt").read_text() == "data\n"


def test_an_unclear_answer_is_asked_again_and_bash_always_is_per_command(tmp_path):
    from harness9.tools.base import Approval

    console = terminal()
    answers = iter(["maybe", "a"])
    approver = TerminalApprover(console, ask=lambda p: next(answers), flush=lambda: None)
    assert approver(Approval("bash", "make test", "Run: make test?"))
    assert 'answer y (yes), n (no; "n, reason" tells the model why) or a (always)' in (
        console.export_text()
    )
    assert approver(Approval("bash", "make test", "Run: make test?"))  # not asked again
    with pytest.raises(StopIteration):  # another command is asked about
        approver(Approval("bash", "make clean", "Run: make clean?"))
    approver.reset()
    with pytest.raises(StopIteration):
        approver(Approval("bash", "make test", "Run: make test?"))


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        ("ls", True),
        ("ls -la src", True),
        ("git status --short", True),
        ("git statusx", False),
        ("git push", False),
        ("ls; rm -rf ~", False),
        ("cat a | sh", False),
        ("cat $(whoami)", False),
        ("ls > out", False),
        ("lsblk", False),
    ],
)
def test_auto_approve_matches_whole_words_and_never_shell_syntax(command, allowed):
    assert is_auto_approved(command, ("ls", "cat", "git status")) is allowed


def test_tools_auto_approve_is_read_from_the_config_and_checked():
    assert tool_options({"tools": {"auto_approve": ["ls", " git  status "]}}).auto_approve == (
        "ls",
        "git status",
    )
    with pytest.raises(ConfigError, match="auto_approve"):
        tool_options({"tools": {"auto_approve": "ls"}})
    with pytest.raises(ConfigError, match="unknown key tools.never"):
        tool_options({"tools": {"never": []}})


# -- resume recap --------------------------------------------------------------------------


def test_continue_prints_the_session_line_and_the_last_exchange(llm_server):
    llm_server.reply_text("The capital of France is Paris.\nIt is on the Seine.\nMore.\nEven more.")
    cli_chat(llm_server, "capital of France?")
    llm_server.reply_text("ok")

    result = cli_chat(llm_server, "--continue", "--context-window", "8000", stdin="")

    assert result.exit_code == 0, result.output
    head, you, assistant = result.stderr.splitlines()[:3]
    assert re.match(
        r"resumed session [0-9a-f]{8} · capital of France\? · just now · 2 messages · "
        r"ctx ~[\d.]+K?/8K \(\d+%\)$",
        head,
    )
    assert you == "  you: capital of France?"
    assert assistant == "  assistant: The capital of France is Paris."
    assert "Even more." not in result.stderr  # abbreviated


def test_resume_recap_counts_tool_calls_between_question_and_answer(llm_server, tmp_path):
    llm_server.reply_tool_calls([("c1", "bash", '{"command": "true"}')])
    llm_server.reply_text("all green")
    cli_chat(llm_server, "--yes", "--workdir", str(tmp_path), "-p", "run the tests")

    result = cli_chat(llm_server, "--continue", stdin="")

    assert "  you: run the tests\n  (1 tool call)\n  assistant: all green" in result.stderr


# -- the window -----------------------------------------------------------------------------


def test_an_unknown_model_warns_once_that_its_window_is_a_guess(llm_server):
    llm_server.reply_text("a")
    llm_server.reply_text("b")
    result = cli_chat(llm_server, stdin="one\ntwo\n")
    assert result.stderr.count("the context window of openai/test-model is not known") == 1
    assert "assuming 32.8K" in result.stderr and "--context-window" in result.stderr
    assert "HARNESS9_CONTEXT_WINDOW" in result.stderr


def test_an_unknown_model_behind_an_api_base_gets_the_smallest_plausible_window(llm_server):
    # A local server runs a model with the window it was started with, often far below
    # what the model could take: the guess is the small end, not the large one.
    result = cli_chat(llm_server, stdin="/model\n/context\n")

    assert result.exit_code == 0, result.output
    assert "model openai/test-model · window 32.8K · compaction at 26.2K" in result.stderr
    assert re.search(r"window\s+32\.8K\s*\n", result.stderr)
    assert "assuming 32.8K" in result.stderr


def test_a_family_estimate_behind_an_api_base_stands_with_its_warning(llm_server):
    # Only a model no table knows gets the small guess: a family's estimate is kept (a
    # hosted provider's model behind a proxy is the common case), and warned about.
    result = cli_chat(llm_server, model="openai/qwen2.5-7b", stdin="/model\n")

    assert result.exit_code == 0, result.output
    assert "model openai/qwen2.5-7b · window 128K" in result.stderr
    assert "the context window of openai/qwen2.5-7b is not known; assuming 128K" in result.stderr


def test_a_hosted_model_no_table_knows_keeps_the_large_guess(llm_server, monkeypatch):
    # No --api-base: the provider's own endpoint (here litellm's OPENAI_BASE_URL points it
    # at the scripted server, as it would at a hosted one).
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.base_url)
    argv = ["chat", "--model", "openai/unheard-of"]
    result = runner.invoke(app, argv, input="/model\n")

    assert result.exit_code == 0, result.output
    assert "model openai/unheard-of · window 256K" in result.stderr
    assert "assuming 256K" in result.stderr


def test_a_known_model_or_a_given_window_gives_no_warning(llm_server):
    llm_server.reply_text("a")
    assert "not known" not in cli_chat(llm_server, "--context-window", "8000", "-p", "x").stderr
    llm_server.reply_text("b")
    assert "not known" not in cli_chat(llm_server, "-p", "x", model="openai/gpt-4o-mini").stderr


def test_a_family_guess_for_a_model_on_a_local_server_counts_as_unknown():
    limits = get_model_limits("openai/qwen2.5-7b")
    assert window_notes("openai/qwen2.5-7b", "http://127.0.0.1:8080/v1", None, limits)
    assert not window_notes("openai/qwen2.5-7b", None, None, limits)


def test_an_ollama_model_no_table_knows_gets_the_window_its_server_reports(llm_server):
    llm_server.show_model("tiny-local:8b", 8192)
    result = cli_chat(llm_server, model="ollama/tiny-local:8b", stdin="/model\n/context\n")

    assert result.exit_code == 0, result.output
    assert "model ollama/tiny-local:8b · window 8.2K · compaction at 6.6K" in result.stderr
    assert "is 8.2K, as its server reports" in result.stderr  # said once, at start-up
    assert "not known" not in result.stderr
    assert llm_server.show_requests == [{"model": "tiny-local:8b"}]  # asked once, not per command


def test_a_lemonade_model_gets_the_context_size_its_server_runs_it_with(llm_server):
    llm_server.show_model("tiny-lemon", 8192)  # GET /models/tiny-lemon, as litellm asks it
    result = cli_chat(llm_server, model="lemonade/tiny-lemon", stdin="/model\n")

    assert result.exit_code == 0, result.output
    assert "model lemonade/tiny-lemon · window 8.2K" in result.stderr
    assert "is 8.2K, as its server reports" in result.stderr
    assert llm_server.show_requests == [{"name": "tiny-lemon"}]


def test_a_window_given_is_not_asked_of_the_server(llm_server):
    llm_server.show_model("tiny-local:8b", 8192)
    given = cli_chat(llm_server, "--context-window", "4000", model="ollama/tiny-local:8b")

    assert given.exit_code == 0
    assert llm_server.show_requests == []


def test_a_server_that_does_not_know_the_model_leaves_the_guess_and_its_warning(llm_server):
    result = cli_chat(llm_server, model="ollama/unheard-of", stdin="/model\n")

    assert llm_server.show_requests == [{"model": "unheard-of"}]  # answered 404
    assert "the context window of ollama/unheard-of is not known" in result.stderr
    assert "window 32.8K" in result.stderr  # a local server's guess: small, not 256K


def test_a_server_that_keeps_the_window_question_waiting_is_given_up_on(llm_server):
    llm_server.show_model("slow-model", 8192, delay=30)
    started = time.monotonic()
    limits = server_limits("ollama/slow-model", llm_server.base_url, timeout=0.5)
    assert limits is None
    assert time.monotonic() - started < 10  # not the server's 30 s
    assert llm_server.show_requests == [{"model": "slow-model"}]


def test_litellm_is_asked_only_for_providers_whose_server_it_can_query():
    assert asks_server("ollama/qwen2.5-coder:7b") and asks_server("ollama_chat/x")
    assert asks_server("lemonade/Qwen3-8B-GGUF")
    assert not asks_server("openai/local-model")  # an OpenAI-compatible server: no public call
    assert not asks_server("ollama")
    assert server_limits("openai/local-model", "http://127.0.0.1:9/v1") is None


# -- cost -----------------------------------------------------------------------------------


def test_cost_comes_from_the_servers_usage_with_the_cache_discount(llm_server):
    # gpt-4o-mini: $0.15 per M input, $0.075 per M cached input, $0.60 per M output.
    llm_server.reply_text("one", usage=(10_000, 1_000, 8_000))
    result = cli_chat(llm_server, "-p", "hi", model="openai/gpt-4o-mini")
    expected = 2_000 * 0.15e-6 + 8_000 * 0.075e-6 + 1_000 * 0.6e-6  # $0.0015
    assert result.exit_code == 0, result.output
    assert "│ $0.0015" in result.stderr

    listed = json.loads(runner.invoke(app, ["sessions", "list", "--json"]).stdout)
    usage = listed[0]["usage"]
    assert usage == {
        "model_calls": 1,
        "input_tokens": 10_000,
        "cached_tokens": 8_000,
        "cache_write_tokens": 0,
        "output_tokens": 1_000,
        "total_tokens": 11_000,
        "cost_usd": pytest.approx(expected),
        "unpriced_calls": 0,
        "summaries": NO_SUMMARIES,
        "subagents": NO_SUBAGENTS,
    }
    shown = json.loads(runner.invoke(app, ["sessions", "show", listed[0]["id"], "--json"]).stdout)
    assert shown["usage"] == usage


def test_an_unpriced_model_shows_no_cost_and_json_says_null(llm_server):
    llm_server.reply_text("one", usage=(100, 10))
    result = cli_chat(llm_server, "-p", "hi")
    assert "$" not in result.stderr
    [info] = json.loads(runner.invoke(app, ["sessions", "list", "--json"]).stdout)
    assert info["usage"]["cost_usd"] is None and info["usage"]["unpriced_calls"] == 1


def test_context_shows_the_session_cost(llm_server):
    llm_server.reply_text("one", usage=(10_000, 1_000))
    result = cli_chat(llm_server, model="openai/gpt-4o-mini", stdin="hi\n/context\n")
    assert re.search(r"session cost\s+\$0\.0021", result.stderr)
    assert result.stderr.count("│ $0.0021") == 2  # the turn's token line and /context's


def test_a_compaction_summary_call_is_counted_in_the_sessions_tokens_and_cost(llm_server):
    # gpt-4o-mini: $0.15 per M input, $0.60 per M output.
    for i in range(4):  # long answers: a summary of the first two pays for itself
        llm_server.reply_text(f"answer {i} " + "a" * 2000, usage=(1_000, 100))  # 4 x $0.00021
    llm_server.reply_text("**Goal:** four questions", usage=(20_000, 500))  # $0.0033
    stdin = "one\ntwo\nthree\nfour\n/compact\n/context\n"
    result = cli_chat(
        llm_server, "--strategy", "summarize", model="openai/gpt-4o-mini", stdin=stdin
    )

    assert result.exit_code == 0, result.output
    assert llm_server.pending == 0  # the fifth reply went to the summary call
    assert "Summarize the conversation" in llm_server.requests[4]["messages"][-1]["content"]
    assert re.search(r"session usage \(5 calls\)\s+in 24K, out 900", result.stderr)
    assert re.search(r"session cost\s+\$0\.0041", result.stderr)
    assert re.search(r"of which summaries\s+1 call, 20K in, 500 out, \$0\.0033", result.stderr)
    [info] = json.loads(runner.invoke(app, ["sessions", "list", "--json"]).stdout)
    assert info["usage"]["model_calls"] == 5
    assert info["usage"]["total_tokens"] == 24_900
    assert info["usage"]["cost_usd"] == pytest.approx(4 * 0.00021 + 0.0033)
    assert info["usage"]["summaries"] == {
        "model_calls": 1,
        "input_tokens": 20_000,
        "output_tokens": 500,
        "cost_usd": pytest.approx(0.0033),
        "unpriced_calls": 0,
    }
    shown = json.loads(runner.invoke(app, ["sessions", "show", info["id"], "--json"]).stdout)
    assert shown["usage"] == info["usage"]


def test_call_cost_is_none_for_a_model_without_prices():
    assert call_cost("openai/test-model", Usage(100, 10)) is None
    assert call_cost("openai/gpt-4o-mini", Usage(1_000_000, 0)) == pytest.approx(0.15)


# -- token line and /model -------------------------------------------------------------------


def test_the_token_line_is_printed_once_per_turn_not_per_tool_step(llm_server, tmp_path):
    llm_server.reply_tool_calls([("c1", "bash", '{"command": "true"}')], usage=(100, 5))
    llm_server.reply_tool_calls([("c2", "bash", '{"command": "true"}')], usage=(200, 5))
    llm_server.reply_text("done", usage=(300, 5))
    result = cli_chat(llm_server, "--yes", "--workdir", str(tmp_path), "-p", "go")
    assert result.stderr.count("ctx ") == 1 and "ctx 300/" in result.stderr


def test_model_switches_the_model_and_recomputes_the_window(llm_server):
    llm_server.reply_text("from mini")
    result = cli_chat(
        llm_server,
        "--context-window",
        "8000",
        stdin="/model openai/gpt-4o-mini\nhi\n/model\n/model openai/other 4000\n",
    )
    assert result.exit_code == 0, result.output
    assert llm_server.requests[0]["model"] == "gpt-4o-mini"
    assert "switched to openai/gpt-4o-mini · window 128K · compaction at 102.4K" in result.stderr
    assert "model openai/gpt-4o-mini · window 128K" in result.stderr
    assert "switched to openai/other · window 4K · compaction at 3.2K" in result.stderr


def test_model_with_a_bad_window_is_one_error_line(llm_server):
    result = cli_chat(llm_server, stdin="/model openai/x lots\n")
    assert result.exit_code == 0
    assert "error: the window after /model NAME takes a number of tokens from 1,024" in (
        result.stderr
    )


def test_on_shown_runs_once_after_the_first_prompt_is_drawn():
    calls: list[str] = []
    with create_pipe_input() as pipe:
        read = prompt_reader(
            ["/help"],
            None,
            pt_input=pipe,
            pt_output=DummyOutput(),
            on_shown=lambda: calls.append("x"),
        )
        assert calls == []  # nothing before the prompt is drawn
        pipe.send_text("one\r")
        read("› ")
        pipe.send_text("two\r")
        read("› ")
    assert calls == ["x"]


# -- the real entry point in a pseudo-terminal ------------------------------------------------


def run_in_pty(argv: list[str], env: dict[str, str], timeout: float = 120) -> str:
    """Run ``python -m harness9 ARGV`` with stdin/stdout/stderr on a pty; all it printed."""
    return drive_pty(argv, env, [], timeout)[0]


@pytest.mark.slow
def test_in_a_terminal_the_reply_is_rendered_and_no_color_keeps_the_source(
    llm_server, harness9_home
):
    source = "```python\nx = 1\n```\n"
    env = {"HARNESS9_HOME": str(harness9_home), "OPENAI_API_KEY": "sk-test", "COLUMNS": "80"}
    argv = ["chat", "--model", "openai/gpt-4o-mini", "--api-base", llm_server.base_url, "hi"]

    llm_server.reply_text(source)
    rendered = run_in_pty(argv, env)
    llm_server.reply_text(source)
    plain = run_in_pty(argv, {**env, "NO_COLOR": "1"})

    assert "\x1b[" in rendered  # colours: a terminal
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", rendered)
    assert "x = 1" in text and "```" not in text  # a highlighted block, no fences
    assert "```python\r\nx = 1\r\n```" in plain  # the pty turns \n into \r\n


@pytest.mark.slow
def test_at_a_terminal_the_prompt_does_not_wait_for_the_servers_window(llm_server, harness9_home):
    # Asking an Ollama server needs litellm (seconds to import): the prompt comes first,
    # and the answer is settled before the first command that needs the window.
    llm_server.show_model("tiny-local:8b", 8192)
    env = {"HARNESS9_HOME": str(harness9_home), "COLUMNS": "100"}
    argv = ["chat", "--model", "ollama/tiny-local:8b", "--api-base", llm_server.base_url]

    # No cursor-position request: nothing on this pty would answer it.
    env["PROMPT_TOOLKIT_NO_CPR"] = "1"
    steps = [("›", b"/context\r"), ("compaction threshold", b""), ("›", b"\x04")]
    printed, code = drive_pty(argv, env, steps, timeout=90)
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", printed)

    assert code == 0  # Ctrl-D at the second prompt left
    first_prompt = screen.index("›")
    reported = screen.index("as its server reports")
    assert first_prompt < reported
    assert re.search(r"window\s+8\.2K", screen[reported:])  # /context, on the new window
    assert "not known" not in screen
    assert llm_server.show_requests == [{"model": "tiny-local:8b"}]
