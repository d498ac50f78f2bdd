"""A small window (a local model's 4K) is managed as well as a large one.

A tool result kept inline is at most a twelfth of the window (the ``offload`` option's
2,000 tokens from a 24K window up), a recalled page no bigger, and a compaction asked for
(``/compact``, an overflow) that leaves the protected tail over the threshold stubs that
tail too instead of letting the next request overflow.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from harness9.cli import app
from harness9.config import ContextOptions, db_path
from harness9.context.pipeline import HybridCompactor
from harness9.context.policy import ContextPolicy
from harness9.context.summarize import CLIPPED_NOTE, clipped
from harness9.context.view import load_view
from harness9.schema import Message, ToolCall
from harness9.store import Manager
from harness9.store.offloads import RECALL_MAX_CHARS
from harness9.tokens import ServerCount, estimate_tokens
from harness9.tools.offload import offload_limit, offload_store
from tests.support.cli import stored_session
from tests.support.history import ScriptedSummarizer, exchanges
from tests.support.llm_server import ErrorReply

runner = CliRunner()
SYSTEM = Message("system", "you are a test agent")


def test_the_inline_limit_is_the_option_up_to_a_twelfth_of_the_window():
    assert offload_limit(2000, 128_000) == 2000
    assert offload_limit(2000, 24_000) == 2000  # where the default starts to bind
    assert offload_limit(2000, 8_000) == 666
    assert offload_limit(2000, 4_000) == 333
    assert offload_limit(500, 128_000) == 500  # a lower setting is kept


def test_a_result_of_a_sixth_of_a_small_window_is_offloaded_not_kept_inline(tmp_path):
    content = "line of build output\n" * 130  # ~680 tokens: under 2,000, a sixth of 4K
    with Manager(db_path()) as m:
        sid = m.new_session().session_id
    small = offload_store(ContextOptions(), 4_000)
    large = offload_store(ContextOptions(), 128_000)

    kept, link = small.offload_result(sid, "bash", json.dumps({"command": "make"}), content)
    inline, no_link = large.offload_result(sid, "bash", json.dumps({"command": "make"}), content)

    assert link is not None and link.tokens == len(content) // 4
    assert kept.startswith("📂 [offload:") and len(kept) < len(content) // 2
    assert (inline, no_link) == (content, None)


def test_a_small_windows_recall_pages_fit_as_a_result_does(llm_server, tmp_path):
    llm_server.reply_text("hello")
    argv = ["chat", "--model", "openai/test-model", "--api-base", llm_server.base_url]
    result = runner.invoke(app, [*argv, "--yes", "--context-window", "4000"], input="hi\n")
    assert result.exit_code == 0, result.output
    llm_server.reply_text("hello")
    result = runner.invoke(app, [*argv, "--yes", "--context-window", "128000"], input="hi\n")
    assert result.exit_code == 0, result.output

    def page_limit(body: dict) -> int:
        [tool] = [t for t in body["tools"] if t["function"]["name"] == "offload_recall"]
        limit = tool["function"]["parameters"]["properties"]["limit"]
        assert f"at most {limit['maximum']} characters" in tool["function"]["description"]
        return limit["maximum"]

    small, large = llm_server.requests
    assert page_limit(small) == 333 * 4
    assert page_limit(large) == RECALL_MAX_CHARS


def _tool_group(i: int, size: int) -> list[Message]:
    call = ToolCall(f"c{i}", "bash", json.dumps({"command": f"cat big{i}.log"}))
    return [Message("assistant", "", [call]), Message("tool", "x" * size, tool_call_id=f"c{i}")]


def test_a_compaction_asked_for_stubs_a_protected_tail_that_is_over_the_threshold(tmp_path):
    # Offload off: three newest tool groups of ~1,100 tokens each, which hybrid keeps
    # whole, are alone over a 4K window's threshold (3,200 tokens).
    opts = ContextOptions(offload=False)
    policy = ContextPolicy(opts, ScriptedSummarizer("**Goal:** read the logs."), 4_000)
    with Manager(db_path()) as m:
        session = m.new_session()
        history = exchanges(6, 200)
        for i in range(3):
            history += _tool_group(i, 4_400)
        session.add_messages(history)

        notice = policy.compact(session, SYSTEM)

        after = load_view(session, SYSTEM).messages
        assert notice is not None and notice.strategy == "protected-tail"
        assert estimate_tokens(after) <= policy.threshold_tokens
        # Every result is still recallable: its stub names its message's handle.
        tools = [msg for msg in after if msg.role == "tool"]
        assert tools and all('offload_recall(id="msg_' in msg.content for msg in tools)
        # Nothing was removed from the log itself.
        assert len(session.get_records()) == len(history)


def test_compact_says_when_the_context_is_over_the_threshold_with_nothing_to_fold(llm_server):
    # Offload off when these results were logged: the three newest tool groups alone are
    # over a 4K window's threshold, which no strategy folds unless asked to; nothing is
    # before them (as right after a compaction).
    msgs: list[Message] = []
    for i in range(3):
        msgs += _tool_group(i, 4_400)
    sid = stored_session(*msgs, Message("assistant", "all three read"))
    llm_server.respond_with(lambda body: "**Goal:** read the logs.")
    args = ["-s", sid, "--context-window", "4000", "--model", "openai/test-model"]
    args += ["--api-base", llm_server.base_url]

    dry = runner.invoke(app, ["compact", "--dry-run", *args], env={"COLUMNS": "160"})
    plain = runner.invoke(app, ["compact", *args])
    forced = runner.invoke(app, ["compact", "--force", *args])

    assert dry.exit_code == 0, dry.output
    assert "over the threshold, but the strategy finds nothing more to fold" in dry.output
    assert "under the threshold" not in dry.output
    assert plain.exit_code == 0, plain.output
    assert "4.7K tokens is over the 3.2K-token threshold, but" in plain.output
    assert forced.exit_code == 0, forced.output
    assert "[protected-tail]" in forced.output
    with Manager(db_path()) as m:
        session = m.open_session(sid)
        assert estimate_tokens(load_view(session, SYSTEM).messages) <= 3200
        assert len(session.get_records()) == len(msgs) + 1


def test_window_strategy_recovers_when_the_model_counts_more_than_the_estimate(llm_server):
    # Many small messages: the server's count (their framing) is over a 4K window while
    # harness9's estimate is under the threshold. The overflow forces the token-aware
    # window to keep half the history, and the retry fits.
    sid = stored_session(*exchanges(30, 60))
    too_long = (
        "This model's maximum context length is 4000 tokens. "
        "However, your messages resulted in 4100 tokens."
    )

    def model(body: dict):
        if len(body["messages"]) > 40:
            return ErrorReply(
                400, too_long, type="invalid_request_error", code="context_length_exceeded"
            )
        return "fits now"

    llm_server.respond_with(model)
    argv = ["chat", "--model", "openai/test-model", "--api-base", llm_server.base_url]
    argv += ["--yes", "--context-window", "4000", "--strategy", "window", "--resume", sid]

    result = runner.invoke(app, argv, input="go on\n")

    assert result.exit_code == 0, result.output
    assert "fits now" in result.output and "[window]" in result.output
    sizes = [len(body["messages"]) for body in llm_server.requests]
    assert sizes[0] > 40 and sizes[-1] <= 40
    with Manager(db_path()) as m:  # the log keeps every message
        assert len(m.open_session(sid).get_records()) == 60 + 2


def test_a_window_session_cuts_before_a_call_the_server_would_count_over_the_window():
    # The last call's usage says the server counts ~40 tokens a message more than the
    # estimate: the next call's expected count is over the threshold, so the window cuts
    # before sending, although its estimate alone is under.
    policy = ContextPolicy(ContextOptions(strategy="window"), ScriptedSummarizer(), 4_000)
    with Manager(db_path()) as m:
        session = m.new_session()
        session.add_messages(exchanges(30, 60))
        first = policy.prepare(session, SYSTEM, [], [])
        assert len(first.messages) == 61 and first.estimated < policy.threshold_tokens

        policy.observe_usage(first, first.estimated + 40 * 61)
        second = policy.prepare(session, SYSTEM, [], [])

        assert len(second.messages) <= 31
        assert second.estimated + 40 * len(second.messages) < policy.threshold_tokens
        assert second.messages[-1] == first.messages[-1]


def test_the_servers_count_is_fitted_as_a_ratio_and_a_fixed_part():
    # Tool schemas the server counts 300 tokens larger, and a tokenizer 10 % denser: learnt
    # on a small view after a compaction, the fixed part is not scaled on a larger one.
    model = ServerCount()
    model.observe(1000, 1100 + 300)
    assert model.count(1000) == 1400  # one call: the larger of ratio alone and fixed alone
    for estimate in (1000, 2000, 2500, 3000, 1200):
        model.observe(estimate, round(1.1 * estimate) + 300)
    assert round(model.fixed) == 300 and model.ratio == pytest.approx(1.1)
    assert model.count(4000) == 4400 + 300
    model.observe(5000, 1000)  # a server that counts less moves the fit down, not clamped at 0
    assert model.count(5000) < 5000


def test_a_summary_over_half_the_room_beside_the_system_message_is_clipped_keeping_facts():
    # A faithful model's summary of a long session: 120 fact lines, ~1,300 tokens, in a
    # 4K window whose system message and tool definitions take 1,600: beside them the
    # newest turn's tool results would find no room under the 3,200-token threshold.
    system = Message("system", "you are a test agent" + " " * 6_400)
    long_summary = "**Goal:** audit the logs.\n" + "\n".join(
        f"FACT-{i:04d} in logs/app{i}.log is v{i:07x}" for i in range(120)
    )
    head = [Message("user", "never push to main; read logs/app7.log"), *exchanges(40, 300)]
    msgs = [system, *head, *exchanges(3, 100, start=50)]
    compactor = HybridCompactor(ScriptedSummarizer(long_summary), 4_000)

    res = compactor.compact(msgs, force=True)

    assert res.summary is not None and CLIPPED_NOTE in res.summary
    assert res.summary.startswith("**Goal:** audit the logs.\nFACT-0000")
    text, _, facts = res.summary.partition("## Preserved facts")
    assert len(text.encode()) <= (3_200 - estimate_tokens([system])) // 2 * 4
    assert "never push to main" in facts  # the fingerprint's repair came after the cut
    assert clipped("short", 10) == "short" and clipped("x" * 100, None) == "x" * 100
    # Beside a small system message the same summary fits, whole.
    whole = HybridCompactor(ScriptedSummarizer(long_summary), 4_000).compact(
        [SYSTEM, *msgs[1:]], force=True
    )
    assert whole.summary is not None and long_summary in whole.summary


def test_a_budget_too_small_for_the_note_leaves_the_summary_whole():
    text = "**Goal:** g.\n" + "detail\n" * 50
    assert clipped(text, 1) == text and clipped(text, -5) == text
    cut = clipped(text, 60)
    assert cut.endswith(CLIPPED_NOTE) and cut.startswith("**Goal:** g.\ndetail")
    assert len(cut.encode()) <= 60 * 4
