"""A window learnt from the server's refusal mid-turn: announced once, shown at once, and a
message it can never hold ends the turn saying so (and is not kept, as one refused before
sending is not)."""

from __future__ import annotations

from harness9.config import db_path
from harness9.store import open_manager
from tests.support.window_chat import chat, note
from tests.support.window_server import LocalServer


def stored_contents() -> list[str]:
    with open_manager(db_path()) as m:
        return [
            msg.content
            for info in m.list_sessions()
            for msg in m.open_session(info.id).get_messages()
        ]


def test_a_message_larger_than_the_window_the_server_names_ends_the_turn_about_the_message(
    llm_server,
):
    # The window is not known up front (32.8K assumed), so the ~3K-token message is sent;
    # the server refuses it naming its 2,048 tokens, which the message alone exceeds.
    llm_server.respond_with(LocalServer("openai", 2048))

    result = chat(llm_server, note(1, tokens=3000), "hello")

    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [
        "error: this message is about 2.9K tokens and can never fit the 2K-token context "
        "window; the server refused it and it was not kept (save it to a file in the "
        "working directory and ask the agent to read it)"
    ]
    assert result.exit_code == 1  # a piped turn failed
    assert result.stdout == "noted.\n"  # the next message is answered
    assert stored_contents() == ["hello", "noted."]


def test_a_learnt_window_is_announced_once_not_again_in_the_refusals_words(llm_server):
    llm_server.respond_with(LocalServer("openai", 2048))

    result = chat(llm_server, note(1, tokens=3000))

    assert result.stderr.count("the server's window is 2,048 tokens, not 32.8K") == 1
    assert "maximum context length" not in result.stderr
    assert "compacting and retrying" not in result.stderr


def test_the_token_line_after_compacting_to_a_learnt_window_shows_that_window(llm_server):
    llm_server.respond_with(LocalServer("openai", 4096))

    result = chat(llm_server, *(note(i) for i in range(14)))

    lines = result.stderr.splitlines()
    learnt = lines.index("the server's window is 4,096 tokens, not 32.8K: compacting to it")
    compacted = next(i for i, ln in enumerate(lines) if i > learnt and ln.startswith("⚡"))
    assert "/4.1K (" in lines[compacted + 1], lines[compacted + 1]


def test_a_server_whose_template_drops_the_tools_is_not_told_they_crowd_its_window(llm_server):
    # llama-cpp-python's chat template leaves the tool definitions out: as it counts them,
    # the system prompt and tools are a few hundred tokens, far under a 2K window's target.
    local = LocalServer("llama-cpp-python", 2048, counts_tools=False)
    llm_server.respond_with(local)

    result = chat(llm_server, *(note(i) for i in range(10)))

    assert result.exit_code == 0, result.output
    assert "⚡ context compacted" in result.stderr
    assert "the system prompt and tool definitions take" not in result.stderr


def test_a_new_session_starts_with_the_window_the_server_named_in_an_earlier_chat(llm_server):
    local = LocalServer("openai", 4096)
    llm_server.respond_with(local)
    first = chat(llm_server, *(note(i) for i in range(14)))
    assert "the server's window is 4,096 tokens, not 32.8K: compacting to it" in first.stderr
    refused = local.refusals

    second = chat(llm_server, *(note(i) for i in range(14)))  # a new session

    assert second.exit_code == 0, second.output
    assert local.refusals == refused  # it started with the window: nothing went over it
    assert (
        "the context window of openai/smol is 4,096 tokens, as its server said when it refused "
        "a longer request (not 32.8K); set --context-window N if it now runs with more."
    ) in second.stderr
    token_lines = [ln for ln in second.stderr.splitlines() if ln.startswith("openai/smol │")]
    assert "/4.1K (" in token_lines[0], token_lines[0]


def test_a_window_given_on_the_command_line_wins_over_the_one_a_server_named_before(
    llm_server,
):
    local = LocalServer("openai", 4096)
    llm_server.respond_with(local)
    chat(llm_server, *(note(i) for i in range(14)))

    result = chat(llm_server, note(0), extra=("--context-window", "8192"))

    assert "as its server said" not in result.stderr
    assert "/8.2K (" in result.stderr
