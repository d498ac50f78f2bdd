"""What a compaction keeps when it cannot do its best (issue 24: 2, 5, 21).

A failed summary keeps the previous checkpoint's summary and truncates only what came
after it; a compaction with nothing new to fold calls no model; ``/compact`` over the
threshold compacts the protected tail as a last resort, or says what would help.
"""

from __future__ import annotations

from typer.testing import CliRunner

from harness9.cli import app
from harness9.config import ContextOptions, db_path
from harness9.context.policy import ContextPolicy
from harness9.context.stubs import is_summary
from harness9.context.view import load_view
from harness9.schema import Message, ToolCall
from harness9.store import Manager
from tests.support.history import ScriptedSummarizer, exchanges
from tests.support.llm_server import TextReply

runner = CliRunner()
SYSTEM = Message("system", "You are a coding agent.")
WINDOW = 4000


def policy(summarizer: ScriptedSummarizer, strategy: str = "summarize") -> ContextPolicy:
    opts = ContextOptions(strategy=strategy, smart_triggers=False, offload=False)
    return ContextPolicy(opts, summarizer, WINDOW)


def add_pairs(session, start: int, n: int, size: int = 400) -> None:
    session.add_messages(exchanges(n, size, start))


def test_a_failed_summary_keeps_the_previous_summary_and_truncates_after_it():
    summarizer = ScriptedSummarizer("**Goal:** ship v2. FACT-ALPHA stays.")
    pol = policy(summarizer)
    with Manager(db_path()) as m:
        session = m.new_session()
        add_pairs(session, 0, 12)
        first = pol.compact(session, SYSTEM, force=True)
        assert first is not None and first.fallback_reason is None
        add_pairs(session, 12, 12)
        summarizer.error = RuntimeError("the summary model is down")

        notice = pol.compact(session, SYSTEM, force=True)

        assert notice is not None and "down" in (notice.fallback_reason or "")
        latest = session.latest_checkpoint()
        assert latest is not None and "FACT-ALPHA" in latest.summary
        view = load_view(session, SYSTEM).messages
        assert is_summary(view[1]) and "FACT-ALPHA" in view[1].content
        # Truncated after the summary: the oldest new exchanges went, the newest stayed.
        texts = [m.content for m in view[2:]]
        assert any(t.startswith("answer 23 ") for t in texts)
        assert not any(t.startswith("question 12 ") for t in texts)
        assert notice.tokens_after < notice.tokens_before


def test_a_second_compaction_with_nothing_new_calls_no_model():
    summarizer = ScriptedSummarizer("**Goal:** ship v2.")
    pol = policy(summarizer)
    with Manager(db_path()) as m:
        session = m.new_session()
        add_pairs(session, 0, 12)
        assert pol.compact(session, SYSTEM, force=True) is not None
        calls = len(summarizer.calls)

        again = pol.compact(session, SYSTEM, force=True)

        assert again is None
        assert len(summarizer.calls) == calls
        assert not any("New conversation to merge:\n\n" in p for p in summarizer.prompts)


def test_a_second_slash_compact_bills_nothing(llm_server):
    llm_server.respond_with(
        lambda body: TextReply("**Goal:** ship.") if not body.get("tools") else None
    )
    for i in range(5):
        llm_server.reply_text(f"fine {i} " + "y" * 2000)
    argv = ["chat", "--model", "openai/test-model", "--api-base", llm_server.base_url, "--yes"]
    stdin = "".join(f"message {i}\n" for i in range(5)) + "/compact\n/compact\n"

    result = runner.invoke(app, [*argv, "--strategy", "summarize"], input=stdin)

    assert result.exit_code == 0, result.output
    summaries = [b for b in llm_server.requests if not b.get("tools")]
    assert len(summaries) == 1  # the first /compact's; the second has nothing to fold
    assert result.output.count("nothing to compact") == 1


def test_a_compaction_that_cannot_shrink_is_not_billed(llm_server):
    # The user's words are the bulk and are kept verbatim: folding them cannot shrink the
    # context. Neither /compact asks the model: that is known before a summary is paid for.
    llm_server.respond_with(
        lambda body: TextReply("**Goal:** ship.") if not body.get("tools") else None
    )
    for i in range(5):
        llm_server.reply_text(f"fine {i}")
    argv = ["chat", "--model", "openai/test-model", "--api-base", llm_server.base_url, "--yes"]
    stdin = "".join(f"message {i} {'x' * 400}\n" for i in range(5)) + "/compact\n/compact\n"

    result = runner.invoke(app, [*argv, "--strategy", "summarize"], input=stdin)

    assert result.exit_code == 0, result.output
    summaries = [b for b in llm_server.requests if not b.get("tools")]
    assert summaries == []
    assert result.output.count("nothing to compact") == 2


def test_slash_compact_over_the_threshold_compacts_the_protected_tail(llm_server):
    # Four big messages fill 90 % of a 4K window: all inside the protected tail.
    with Manager(db_path()) as m:
        session = m.new_session()
        session.add_messages(
            [
                Message("user", "first " + "u" * 3000),
                Message("assistant", "reply " + "a" * 3000),
                Message("user", "second " + "v" * 3000),
                Message("assistant", "reply " + "b" * 3000),
            ]
        )
        sid = session.session_id
    argv = ["chat", "--model", "openai/test-model", "--api-base", llm_server.base_url]
    argv += ["--context-window", str(WINDOW), "--strategy", "hybrid", "--resume", sid]

    result = runner.invoke(app, argv, input="/compact\n")

    assert result.exit_code == 0, result.output
    assert "already as small" not in result.output
    with Manager(db_path()) as m:
        cp = m.open_session(sid).latest_checkpoint()
    assert cp is not None and cp.tokens_after <= WINDOW * 80 // 100


def test_slash_compact_says_what_would_help_when_one_message_fills_the_window(llm_server):
    with Manager(db_path()) as m:
        session = m.new_session()
        session.add_messages([Message("user", "huge " + "u" * 12_500)])
        sid = session.session_id
    argv = ["chat", "--model", "openai/test-model", "--api-base", llm_server.base_url]
    argv += ["--context-window", str(WINDOW), "--resume", sid]

    result = runner.invoke(app, argv, input="/compact\n")

    assert result.exit_code == 0, result.output
    assert "already as small" not in result.output
    assert "/new" in result.output and "--context-window" in result.output


def test_evict_keeps_a_long_session_of_small_results_under_a_strict_servers_window():
    """A server that counts 16 tokens of framing a message (the estimate counts none), as
    ``bench_session``'s does: once every old result is evicted the conversation itself
    outgrows the window, and ``evict`` then folds it, with no model call, instead of the
    session stopping on "context window exceeded"."""
    window, framing = 24_000, 16
    opts = ContextOptions(strategy="evict", offload=False)
    pol = ContextPolicy(opts, ScriptedSummarizer(error=AssertionError("no model call")), window)
    folds = 0
    with Manager(db_path()) as m:
        session = m.new_session()
        for i in range(300):
            call = ToolCall(f"c{i}", "bash", f'{{"command": "cat part{i}.log"}}')
            session.add_messages(
                [
                    Message("user", f"step {i}: " + "u" * 400),
                    Message("assistant", "", [call]),
                    Message("tool", f"FACT-{i} " + "r" * 2_000, tool_call_id=call.id),
                ]
            )
            request = pol.prepare(session, SYSTEM, [], ["bash"])
            served = request.estimated + framing * len(request.messages)
            if served > window:  # the engine's path: compact once, then retry
                assert pol.after_overflow(session, SYSTEM, [], "too long") is None
                request = pol.prepare(session, SYSTEM, [], ["bash"], may_compact=False)
                served = request.estimated + framing * len(request.messages)
            assert served <= window, f"call {i}: {served} tokens"
            pol.observe_usage(request, served)
        cp = session.latest_checkpoint()
        folds = sum(c.messages_after < c.messages_before for c in session.list_checkpoints())
    assert cp is not None and cp.strategy == "evict" and folds >= 1
