"""A chat whose session another harness9 deletes (`sessions delete` from a cron job or a
second terminal) while it runs: it says so in one line, says how to go on, and leaves
cleanly; nothing it holds for the gone session fails every later turn."""

from __future__ import annotations

from harness9.config import store_location
from harness9.store import open_manager
from tests.support.cli import chat
from tests.support.llm_server import ScriptedLLMServer, TextReply


def delete_everything_during(server: ScriptedLLMServer, word: str) -> None:
    """While the model answers the message containing ``word``, another process's
    `sessions delete` removes every stored session; every request is answered "ok"."""

    def respond(request: dict) -> TextReply:
        if word in str(request["messages"][-1]["content"]):
            with open_manager(store_location()) as other:
                for info in other.list_sessions():
                    other.delete_session(info.id)
        return TextReply("ok")

    server.respond_with(respond)


def stored_texts() -> list[list[str]]:
    with open_manager(store_location()) as m:
        return [
            [msg.content for msg in m.open_session(i.id).get_messages()] for i in m.list_sessions()
        ]


def test_the_turn_that_finds_its_session_deleted_says_how_to_go_on(llm_server, workdir):
    delete_everything_during(llm_server, "first")

    result = chat(llm_server, "first\n", workdir=workdir)

    [line] = [x for x in result.stderr.splitlines() if "was deleted" in x]
    assert line.startswith("error: session ")
    assert line.endswith(
        " was deleted by another harness9, so this turn was not saved; /new starts a new session"
    )


def test_leaving_a_chat_whose_session_was_deleted_is_not_an_error(llm_server, workdir):
    delete_everything_during(llm_server, "first")

    result = chat(llm_server, "first\n", workdir=workdir)

    assert not [x for x in result.stderr.splitlines() if x.startswith("harness9: ")]
    assert "Traceback" not in result.output
    assert stored_texts() == []


def test_new_after_the_session_was_deleted_saves_the_next_turns(llm_server, workdir):
    delete_everything_during(llm_server, "first")

    result = chat(llm_server, "first\n/new\nthird\n", workdir=workdir)

    assert stored_texts() == [["third", "ok"]]
    assert result.stderr.count("was deleted") == 1
