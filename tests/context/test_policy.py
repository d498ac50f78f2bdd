"""The context policy: one threshold for every strategy, and per-session state it owns."""

from __future__ import annotations

import io
import json
import re

import pytest
from typer.testing import CliRunner

from harness9.cli import app
from harness9.cli.env import Environment
from harness9.config import ContextOptions, Settings, context_options, db_path
from harness9.context import (
    Compactor,
    SpanSummarizer,
    TopicDetector,
    format_token_count,
)
from harness9.context.pipeline import (
    STRATEGIES,
    Pipeline,
    TokenBudgetCompactor,
    topic_compactor,
)
from harness9.context.policy import ContextPolicy, build_compactor
from harness9.engine import events as ev
from harness9.engine.setup import build_engine
from harness9.errors import UsageError
from harness9.schema import Message, ToolCall
from harness9.store.sqlite import open_manager
from harness9.tokens import (
    BYTES_PER_TOKEN,
    estimate_tokens,
    estimate_tool_tokens,
    message_bytes,
)
from tests.support.history import ScriptedSummarizer

runner = CliRunner()
WINDOW = 20_000
THRESHOLD = 16_000  # compaction.threshold 0.8 (the default) of the window


def fill(session, groups: int = 8) -> None:
    """Tool rounds with large results (so eviction has something to evict), then a chat."""
    for i in range(groups):
        call = ToolCall(f"c{i}", "bash", json.dumps({"command": f"cat part{i}.log"}))
        session.add_messages(
            [
                Message("user", f"look at part {i}"),
                Message("assistant", "", [call]),
                Message("tool", f"row {i}: " + "r" * 6_000, tool_call_id=call.id),
                Message("assistant", f"part {i} looks fine"),
            ]
        )


def pad_to(session, system: Message, tokens: int, tool_tokens: int) -> None:
    """Adds one user message so that the request's estimate (the view plus the tool
    definitions, the one count every decision uses) is exactly ``tokens``."""
    msgs = [system, *session.get_messages()]
    missing = (tokens - tool_tokens) * BYTES_PER_TOKEN - sum(message_bytes(m) for m in msgs)
    assert missing > 100, "the session is already too big for this window"
    session.add_messages([Message("user", "p" * missing)])
    assert estimate_tokens([system, *session.get_messages()]) + tool_tokens == tokens


def compactions_at(llm_server, strategy: str, tokens: int, tmp_path) -> list[ev.Event]:
    """Events of the first model call of ``chat``'s engine on a view of ``tokens``."""
    llm_server.reply_text("**Goal:** g\n**Progress:** p")  # a summary, if one is asked for
    with open_manager(db_path()) as manager:
        session = manager.new_session()
        fill(session)
        settings = Settings.from_env(
            model="openai/test-model", api_base=llm_server.base_url, context_window=WINDOW
        )
        engine = build_engine(
            settings, context_options(strategy=strategy), session, tmp_path, WINDOW
        )
        system = engine.system_message()
        tools = engine.registry.definitions()
        pad_to(session, system, tokens, estimate_tool_tokens(tools))
        seen: list[ev.Event] = []
        try:
            engine.policy.prepare(session, system, tools, [], emit=seen.append)
        finally:
            engine.close()  # and any summary it began preparing ahead
    return [e for e in seen if isinstance(e, ev.CompactionStarted)]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_context_the_trigger_and_dry_run_report_the_same_threshold(strategy, llm_server, tmp_path):
    common = ["--strategy", strategy, "--context-window", str(WINDOW)]
    common += ["--model", "openai/test-model", "--api-base", llm_server.base_url]
    with open_manager(db_path()) as manager:
        session = manager.new_session()
        fill(session)
        sid = session.session_id

    dry = runner.invoke(app, ["compact", "--dry-run", "--json", "--session", sid, *common])
    chat = runner.invoke(app, ["chat", "--resume", sid, *common], input="/context\n")

    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["threshold"] == THRESHOLD
    assert chat.exit_code == 0, chat.output
    shown = re.search(r"compaction threshold\s+(\S+)", chat.output)
    assert shown is not None and shown.group(1) == format_token_count(THRESHOLD) == "16K"
    # The engine chat runs compacts once the view reaches that threshold, not a token before.
    assert compactions_at(llm_server, strategy, THRESHOLD - 1, tmp_path) == []
    assert compactions_at(llm_server, strategy, THRESHOLD, tmp_path) != []


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_takes_its_threshold_from_the_options(strategy):
    opts = ContextOptions(strategy=strategy, threshold=0.5)
    policy = ContextPolicy(opts, ScriptedSummarizer(), WINDOW)
    assert policy.threshold_tokens == policy.compactor.threshold_tokens == WINDOW // 2


def test_each_session_gets_its_own_state_and_forget_resets_it():
    policy = ContextPolicy(ContextOptions(), ScriptedSummarizer(), 50_000)
    a = policy.state("s1")
    a.iterations = 4
    a.compacted()
    assert policy.state("s1") is a and policy.state("s2") is not a
    policy.forget("s1")
    fresh = policy.state("s1")
    assert fresh is not a and not fresh.in_cooldown(5)


def test_the_cooldown_length_comes_from_the_options():
    policy = ContextPolicy(ContextOptions(cooldown_iterations=7), ScriptedSummarizer(), 50_000)
    assert policy.state("s1").cooldown_iterations == 7


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_fills_in_the_compactor_seam(strategy):
    comp = build_compactor(strategy, ScriptedSummarizer(), 10_000, threshold_tokens=8_000)
    msgs = [Message("system", "s")]
    for i in range(12):
        call = ToolCall(f"c{i}", "bash", "{}")
        msgs += [
            Message("assistant", "", [call]),
            Message("tool", "x" * 4_000, tool_call_id=f"c{i}"),
        ]

    plan = comp.plan(msgs, force=True)
    result = comp.compact(
        msgs, force=True, instructions="keep paths", on_progress=lambda i, n: None
    )

    assert isinstance(comp, Compactor) and comp.threshold_tokens == 8_000
    assert plan.threshold == result.plan.threshold == 8_000
    assert plan.would_compact and estimate_tokens(result.messages) < estimate_tokens(msgs)


def test_topic_isolation_summarises_with_a_span_summariser_not_a_compactor():
    topics = topic_compactor(TopicDetector(), ScriptedSummarizer(), summarizer_window=4_000)
    assert isinstance(topics, Compactor) and topics.threshold_tokens == 0
    assert isinstance(topics.span, SpanSummarizer) and topics.span.window == 4_000


def test_a_program_brings_its_own_compactor_to_chat_through_the_environment(llm_server):
    """No registry: the compactor factory rides in the Environment a program passes, and
    replaces the strategy's compactor (what scripts/bench_session.py does for its peers)."""
    built: list[tuple[int, int]] = []

    def factory(summarizer, window: int, threshold: int) -> Compactor:
        built.append((window, threshold))
        return TokenBudgetCompactor(threshold)

    llm_server.reply_text("hello")
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdin=io.StringIO(""), stdout=out, stderr=err, compactor_factory=factory)
    argv = ["chat", "-p", "hi", "--model", "openai/test-model", "--api-base", llm_server.base_url]
    res = runner.invoke(app, [*argv, "--context-window", str(WINDOW)], obj=env)

    assert res.exit_code == 0, err.getvalue()
    assert out.getvalue().strip() == "hello"
    assert built == [(WINDOW, THRESHOLD)]


def test_the_command_line_cannot_name_a_program_s_compactor():
    with pytest.raises(UsageError, match="unknown compaction strategy 'codex'"):
        build_compactor("codex", ScriptedSummarizer(), WINDOW, threshold_tokens=THRESHOLD)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_each_strategy_of_the_table_is_offered_accepted_and_built_as_the_one_pipeline(strategy):
    # One table: --help lists it, the options accept it, the policy builds its steps.
    shown = " ".join(runner.invoke(app, ["compact", "--help"]).output.split())
    assert f"{strategy} ({STRATEGIES[strategy].help.split()[0]}" in shown
    assert context_options(strategy=strategy).strategy == strategy
    comp = build_compactor(strategy, ScriptedSummarizer(), WINDOW, 16_000)
    assert type(comp) is Pipeline and comp.steps == STRATEGIES[strategy].steps(WINDOW, 16_000, 0.4)


def test_a_name_outside_the_table_is_refused_with_the_tables_names():
    with pytest.raises(UsageError, match="choose one of: hybrid, summarize, budget, window, evict"):
        build_compactor("phase3", ScriptedSummarizer(), WINDOW, 16_000)
