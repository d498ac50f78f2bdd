"""A compaction is paid for only when it pays for itself, and what is paid for is kept
(issue 36: 1, 2, 3).

Asked for under the threshold (``/compact``, ``harness9 compact --force``), a compaction
that would save under 5 % of the context is declined before any summary is asked for, and
the person is told what it would have saved; ``compact --dry-run`` says the same. After an
overflow, the last resort cuts after the summary it just paid for instead of dropping it.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness9.config import db_path
from harness9.schema import Message, ToolCall
from harness9.store import Manager
from tests.support.cli import chat, cli, stored_session
from tests.support.history import exchanges
from tests.support.llm_server import ErrorReply, ScriptedLLMServer, is_summary_request
from tests.support.pty_terminal import PtyProcess

FOUR_TURNS = "one alpha\ntwo beta\nthree gamma\nfour delta\n"
# The reason a declined compaction gives, after "nothing to compact: " or "nothing would be
# compacted: " (the figures are the estimate's: the system prompt and tools are ~1.4K with edit_file).
DECLINED = (
    "summarising 2 messages would save 0 of 1.4K tokens (0 %), under the 5 % it takes to "
    "pay for the summary call and the prompt cache a compaction breaks"
)


def echo(body: dict) -> str:
    """The chat model echoes the user; the summariser answers a short summary."""
    if is_summary_request(body):
        return "Progress: the user said four words."
    return "echo: " + body["messages"][-1]["content"][:40]


def four_short_turns(server: ScriptedLLMServer, window: str = "32768") -> str:
    server.respond_with(echo)
    result = chat(server, FOUR_TURNS, "--context-window", window)
    assert result.exit_code == 0, result.output
    [info] = json.loads(cli("sessions", "list", "--json").stdout)
    return info["id"]


def test_compact_force_on_four_short_turns_asks_no_model_and_says_why(llm_server):
    sid = four_short_turns(llm_server)
    sent = len(llm_server.requests)
    args = ["-s", sid, "--context-window", "32768"]

    dry = cli("compact", "--dry-run", "--force", *args)
    done = cli("compact", "--force", *args, "--api-base", llm_server.base_url)

    assert dry.exit_code == 0, dry.output
    assert f"nothing would be compacted: {DECLINED}; tokens 1.4K → 1.4K" in dry.stdout
    assert "would summarize" not in dry.stdout
    assert done.exit_code == 0, done.output
    assert done.stdout == f"nothing to compact: {DECLINED}\n"
    assert len(llm_server.requests) == sent  # no summary was asked for
    with Manager(db_path()) as m:
        assert m.open_session(sid).list_checkpoints() == []


def test_compact_dry_run_json_says_a_declined_compaction_changes_nothing(llm_server):
    sid = four_short_turns(llm_server)

    dry = cli("compact", "--dry-run", "--force", "--json", "-s", sid, "--context-window", "32768")

    plan = json.loads(dry.stdout)
    assert (plan["would_compact"], plan["too_small"]) == (False, True)
    assert plan["tokens_after"] == plan["tokens_before"]
    assert plan["messages_to_summarize"] == 0 and plan["messages_kept"] == 8


def test_slash_compact_on_four_short_turns_bills_no_summary(llm_server):
    llm_server.respond_with(echo)

    result = chat(llm_server, FOUR_TURNS + "/compact\n", "--context-window", "32768")

    assert result.exit_code == 0, result.output
    assert not any(is_summary_request(b) for b in llm_server.requests)
    assert f"nothing to compact: {DECLINED}\n" in result.output
    assert "⚡ context compacted" not in result.output
    [info] = json.loads(cli("sessions", "list", "--json").stdout)
    assert info["usage"]["summaries"]["model_calls"] == 0


def test_slash_compact_typed_in_a_terminal_after_four_short_turns_asks_no_model(
    llm_server, workdir, harness9_home: Path
):
    llm_server.respond_with(echo)
    argv = ["chat", "--model", "openai/test-model", "--api-base", llm_server.base_url]
    env = {"HARNESS9_HOME": str(harness9_home), "OPENAI_API_KEY": "sk-test"}

    with PtyProcess(
        [*argv, "--context-window", "32768"], cwd=workdir, env=env, columns=200
    ) as term:
        at = term.expect("›")
        for word in ("one alpha", "two beta", "three gamma", "four delta"):
            term.send(word + "\r")
            at = term.expect("›", after=term.expect(f"echo: {word}", after=at))
        term.send("/compact\r")
        term.expect("nothing to compact: summarising 2 messages would save 0 of 1.4K", after=at)
        term.send("\x04")  # Ctrl-D
        assert term.wait(30) == 0

    assert not any(is_summary_request(b) for b in llm_server.requests)
    assert len(llm_server.requests) == 4


def test_slash_compact_in_a_4k_window_that_would_fold_25_tokens_is_declined(llm_server):
    # Four short turns and a 350-token reply in a 4K window: the tail kept whole is the
    # newest six messages, so a summary could fold only the first two turns (~25 tokens).
    replies = iter(["ok 0", "ok 1", "ok 2", "ok 3", "a long reply " + "r" * 1400])
    llm_server.respond_with(
        lambda body: "Progress: short." if is_summary_request(body) else next(replies)
    )
    stdin = "q 0\nq 1\nq 2\nq 3\nq 4\n/compact\n"

    result = chat(llm_server, stdin, "--context-window", "4096")

    assert result.exit_code == 0, result.output
    assert not any(is_summary_request(b) for b in llm_server.requests)
    assert "⚡ context compacted" not in result.output
    assert "nothing to compact: summarising 4 messages would save 0 of" in result.output
    assert "under the 5 % it takes to pay for the summary call" in result.output


def test_a_compaction_that_pays_for_itself_is_still_made(llm_server):
    # Long answers: summarising the first turns saves far more than 5 %.
    sid = stored_session(*exchanges(6, 2000))
    llm_server.respond_with(lambda body: "Progress: six long answers.")

    done = cli("compact", "--force", "--json", "-s", sid, "--api-base", llm_server.base_url)

    out = json.loads(done.stdout)
    assert out["compacted"] is True and out["strategy"] == "hybrid"
    assert out["tokens_after"] < out["tokens_before"] * 0.95
    assert sum(is_summary_request(b) for b in llm_server.requests) == 1


TOO_LONG = (
    "This model's maximum context length is 4000 tokens. "
    "However, your messages resulted in 4100 tokens."
)
PAID_SUMMARY = (  # longer than the two short messages it folds
    "Progress: the user asked two questions about the build, both answered.\n"
    + "@todo:more work to be done on the build of the project\n" * 8
)


def test_after_an_overflow_the_last_resort_keeps_the_summary_it_paid_for(llm_server, monkeypatch):
    # A short first turn, then three long ones: after the 400, the summary of the first
    # messages is longer than they are, so the last resort must still cut; it cuts after
    # the summary, which stays in the checkpoint and in the retried request.
    # The resumed context is past the early mark: preparing ahead would add a background
    # summary call to the one this test counts.
    monkeypatch.setenv("HARNESS9_PREPARE_AHEAD", "false")
    sid = stored_session(*exchanges(1, 20), *exchanges(3, 880, start=1))
    chat_calls: list[dict] = []

    def model(body: dict):
        if is_summary_request(body):
            return PAID_SUMMARY
        chat_calls.append(body)
        if len(chat_calls) == 1:
            return ErrorReply(
                400, TOO_LONG, type="invalid_request_error", code="context_length_exceeded"
            )
        return "fits now"

    llm_server.respond_with(model)

    result = chat(llm_server, "go on\n", "--context-window", "4000", "--resume", sid)

    assert result.exit_code == 0, result.output
    assert "fits now" in result.output
    assert "⚡ context compacted — 2.7K → 2K tokens (10 → 4 messages) [protected-tail]" in (
        result.output
    )
    with Manager(db_path()) as m:
        latest = m.open_session(sid).latest_checkpoint()
    assert latest is not None and latest.strategy == "protected-tail"
    assert latest.summary == PAID_SUMMARY.strip()
    retried = chat_calls[-1]["messages"]
    assert retried[1]["content"].startswith("[Conversation Summary]\nProgress: the user asked two")
    assert retried[-1]["content"] == "go on"
    shown = json.loads(cli("sessions", "show", sid, "--json").stdout)
    assert shown["usage"]["summaries"]["model_calls"] == 1


def test_a_model_free_compaction_saving_under_5_percent_is_declined_too():
    # Long exchanges, then four small tool results: forced, evict would replace the oldest
    # result (outside the newest three groups) by a stub, saving a few dozen tokens.
    msgs = exchanges(3, 2000)
    for i in range(4):
        msgs += [
            Message("assistant", "", [ToolCall(f"c{i}", "bash", '{"command": "ls"}')]),
            Message("tool", f"listing {i} " + "f" * 400, tool_call_id=f"c{i}"),
        ]
    sid = stored_session(*msgs, Message("assistant", "listed"))
    args = ["-s", sid, "--strategy", "evict", "--force"]

    done = cli("compact", *args)
    dry = json.loads(cli("compact", "--dry-run", "--json", *args).stdout)

    assert done.exit_code == 0, done.output
    assert done.stdout.startswith("nothing to compact: ")
    assert done.stdout.endswith(
        "under the 5 % it takes to pay for the prompt cache a compaction breaks\n"
    )
    assert (dry["would_compact"], dry["too_small"]) == (False, True)
    with Manager(db_path()) as m:
        assert m.open_session(sid).list_checkpoints() == []
