"""The agent engine against the scripted OpenAI-compatible server, through real litellm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness9.config import ContextOptions
from harness9.context import is_valid_tool_sequence
from harness9.context.policy import ContextPolicy
from harness9.context.stubs import repair_orphaned_tool_pairs
from harness9.context.view import load_view
from harness9.context_events import discard
from harness9.engine import events as ev
from harness9.engine.engine import INTERRUPTED_STUB, AgentEngine, EngineOptions
from harness9.engine.prepared import AheadOfThreshold, PreparedAnswers, PreparedRun
from harness9.engine.prompt import PromptBuilder
from harness9.provider import LLMProvider
from harness9.schema import Message, ToolDefinition
from harness9.tools import ToolResult, default_registry
from tests.support.history import exchanges
from tests.support.llm_server import is_summary_request

SUMMARY_REPLY = "**Goal:** build the parser\n**Critical Context:** parser.py line 42"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    return d


def make_engine(
    server,
    session,
    workdir: Path,
    *,
    context_window: int = 128_000,
    strategy: str | None = None,
    **kw,
) -> tuple[AgentEngine, list[ev.Event]]:
    """An engine on the default context policy (``strategy`` None), or on one strategy."""
    provider = LLMProvider("openai/test-model", api_base=server.base_url, backoff_base=0.01)
    seen: list[ev.Event] = []
    opts = ContextOptions() if strategy is None else ContextOptions(strategy=strategy)
    engine = AgentEngine(
        provider,
        kw.pop("registry", None) or default_registry(),
        workdir,
        session=session,
        policy=ContextPolicy(opts, provider, context_window),
        prompt_builder=PromptBuilder(workdir),
        on_event=seen.append,
        options=EngineOptions(assume_yes=True, **kw),
    )
    return engine, seen


def test_a_text_turn_is_saved_and_reports_estimate_then_actual_tokens(llm_server, manager, workdir):
    llm_server.reply_text("Hello there!", usage=(321, 4))
    session = manager.new_session()
    engine, seen = make_engine(llm_server, session, workdir)

    result = engine.run_turn("hi")

    assert result.reply is not None and result.reply.content == "Hello there!"
    stored = manager.open_session(session.session_id).get_messages()
    assert [(m.role, m.content) for m in stored] == [("user", "hi"), ("assistant", "Hello there!")]
    updates = [e for e in seen if isinstance(e, ev.TokenUpdate)]
    assert [u.actual for u in updates] == [False, True]
    assert updates[1].tokens == 321 and updates[1].context_window == 128_000
    assert "".join(e.text for e in seen if isinstance(e, ev.TextDelta)) == "Hello there!"


def test_the_system_prompt_is_sent_but_never_stored_and_includes_agents_md(
    llm_server, manager, workdir
):
    (workdir / "AGENTS.md").write_text("Always answer in French.")
    llm_server.reply_text("Bonjour")
    session = manager.new_session()
    engine, _ = make_engine(llm_server, session, workdir)

    engine.run_turn("hi")

    sent = llm_server.requests[0]["messages"]
    assert sent[0]["role"] == "system" and "Always answer in French." in sent[0]["content"]
    assert all(m.role != "system" for m in session.get_messages())


def test_parallel_tool_calls_run_and_every_result_is_saved_before_the_next_call(
    llm_server, manager, workdir
):
    (workdir / "a.txt").write_text("alpha\n")
    (workdir / "b.txt").write_text("beta\n")
    llm_server.reply_tool_calls(
        [
            ("call_a", "read_file", json.dumps({"path": "a.txt"})),
            ("call_b", "read_file", json.dumps({"path": "b.txt"})),
        ]
    )
    llm_server.reply_text("Both files read.")
    session = manager.new_session()
    engine, seen = make_engine(llm_server, session, workdir)

    engine.run_turn("read both files")

    roles = [(m.role, m.tool_call_id) for m in session.get_messages()]
    assert roles == [
        ("user", ""),
        ("assistant", ""),
        ("tool", "call_a"),
        ("tool", "call_b"),
        ("assistant", ""),
    ]
    second = llm_server.requests[1]["messages"]
    tool_msgs = [m for m in second if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["call_a", "call_b"]
    assert "alpha" in tool_msgs[0]["content"] and "beta" in tool_msgs[1]["content"]
    assert [e.call.id for e in seen if isinstance(e, ev.ToolStarted)] == ["call_a", "call_b"]


def test_malformed_tool_arguments_become_an_error_result_and_the_turn_continues(
    llm_server, manager, workdir
):
    llm_server.reply_tool_calls([("call_1", "read_file", '{"path": ')])
    llm_server.reply_text("Sorry, retrying later.")
    session = manager.new_session()
    engine, _ = make_engine(llm_server, session, workdir)

    result = engine.run_turn("read it")

    assert result.error is None and result.reply.content == "Sorry, retrying later."
    tool_msg = session.get_messages()[2]
    assert tool_msg.role == "tool" and tool_msg.content.startswith("error:")


def test_a_500_then_200_is_retried_within_the_turn(llm_server, manager, workdir):
    llm_server.reply_error(500, "upstream exploded")
    llm_server.reply_text("recovered")
    session = manager.new_session()
    engine, _ = make_engine(llm_server, session, workdir)

    result = engine.run_turn("hi")

    assert result.reply.content == "recovered"
    assert len(llm_server.requests) == 2


def test_a_401_ends_the_turn_with_one_line_naming_the_key_variable(llm_server, manager, workdir):
    llm_server.reply_error(
        401, "Incorrect API key provided", type="invalid_request_error", code="invalid_api_key"
    )
    session = manager.new_session()
    engine, seen = make_engine(llm_server, session, workdir)

    result = engine.run_turn("hi")

    assert result.error is not None and "OPENAI_API_KEY" in result.error
    assert "\n" not in result.error
    assert [e.message for e in seen if isinstance(e, ev.Error)] == [result.error]
    assert [m.role for m in session.get_messages()] == ["user"]  # the question is kept


def _fill(session, pairs: int, size: int = 400) -> None:
    session.add_messages(exchanges(pairs, size))


def test_over_threshold_the_turn_compacts_once_and_stores_a_checkpoint(
    llm_server, manager, workdir
):
    session = manager.new_session()
    _fill(session, 20)  # ~4.2K tokens of history against a 4K window (threshold 3.2K)
    llm_server.respond_with(lambda body: SUMMARY_REPLY if is_summary_request(body) else None)
    llm_server.reply_text("first answer")
    llm_server.reply_text("second answer")
    engine, seen = make_engine(
        llm_server, session, workdir, context_window=4000, strategy="summarize"
    )

    engine.run_turn("next question")
    summary_calls_after_first_turn = sum(map(is_summary_request, llm_server.requests))
    engine.run_turn("and another")

    notices = [e for e in seen if isinstance(e, ev.Compaction)]
    assert len(notices) == 1 and notices[0].tokens_after < notices[0].tokens_before
    # The 4K-token head does not fit one call of a 4K window: it is summarised in parts.
    assert summary_calls_after_first_turn >= 1
    assert sum(map(is_summary_request, llm_server.requests)) == summary_calls_after_first_turn
    chat_calls = [b for b in llm_server.requests if not is_summary_request(b)]
    for body in chat_calls:
        contents = [m["content"] or "" for m in body["messages"]]
        assert contents[1].startswith("[Conversation Summary]\n**Goal:** build the parser")
        assert not any(c.startswith("question 0 ") for c in contents)
    stored = manager.open_session(session.session_id)
    assert len(stored.get_messages()) == 40 + 4  # every message is still in the database
    assert [cp.strategy for cp in stored.list_checkpoints()] == ["summarize"]


def test_resume_rebuilds_the_compacted_view_without_summarising_again(llm_server, manager, workdir):
    session = manager.new_session()
    _fill(session, 20)
    llm_server.respond_with(lambda body: SUMMARY_REPLY if is_summary_request(body) else None)
    llm_server.reply_text("first answer")
    engine, _ = make_engine(llm_server, session, workdir, context_window=4000, strategy="summarize")
    engine.run_turn("next question")
    before = len(llm_server.requests)

    resumed = manager.open_session(session.session_id)
    llm_server.reply_text("after resume")
    engine2, seen2 = make_engine(
        llm_server, resumed, workdir, context_window=4000, strategy="summarize"
    )
    engine2.run_turn("continuing")

    new_requests = llm_server.requests[before:]
    assert len(new_requests) == 1 and not is_summary_request(new_requests[0])
    assert new_requests[0]["messages"][1]["content"].startswith("[Conversation Summary]")
    assert not [e for e in seen2 if isinstance(e, ev.Compaction)]


def test_a_context_length_error_forces_a_compaction_and_one_retry(llm_server, manager, workdir):
    session = manager.new_session()
    _fill(session, 10)  # well under our threshold: only the API knows it is too long
    llm_server.respond_with(lambda body: SUMMARY_REPLY if is_summary_request(body) else None)
    llm_server.reply_error(
        400,
        "This model's maximum context length is 4096 tokens. However, your messages resulted in 9000 tokens.",
        type="invalid_request_error",
        code="context_length_exceeded",
    )
    llm_server.reply_text("fits now")
    engine, seen = make_engine(llm_server, session, workdir)

    result = engine.run_turn("go on")

    assert result.error is None and result.reply.content == "fits now"
    assert len([e for e in seen if isinstance(e, ev.Compaction)]) == 1
    retried = [b for b in llm_server.requests if not is_summary_request(b)][-1]
    assert retried["messages"][1]["content"].startswith("[Conversation Summary]")


TOO_LONG = (
    "This model's maximum context length is 4096 tokens. "
    "However, your messages resulted in 9000 tokens."
)


def test_each_model_call_of_a_turn_recovers_from_one_overflow(llm_server, manager, workdir):
    # A long agent turn can overflow more than once: every model call gets its compaction
    # and one retry (a turn that stopped at the second overflow lost its work).
    (workdir / "a.txt").write_text("alpha\n")
    session = manager.new_session()
    _fill(session, 10)
    llm_server.respond_with(lambda body: SUMMARY_REPLY if is_summary_request(body) else None)
    too_long = {"type": "invalid_request_error", "code": "context_length_exceeded"}
    llm_server.reply_error(400, TOO_LONG, **too_long)
    llm_server.reply_tool_calls([("c1", "read_file", json.dumps({"path": "a.txt"}))])
    llm_server.reply_error(400, TOO_LONG, **too_long)
    llm_server.reply_text("read it")
    engine, _ = make_engine(llm_server, session, workdir)

    result = engine.run_turn("read a.txt")

    assert result.error is None and result.reply.content == "read it"
    assert len([b for b in llm_server.requests if not is_summary_request(b)]) == 4


def test_a_retry_rejected_again_is_one_clear_error(llm_server, manager, workdir):
    session = manager.new_session()
    _fill(session, 10)
    llm_server.respond_with(lambda body: SUMMARY_REPLY if is_summary_request(body) else None)
    too_long = {"type": "invalid_request_error", "code": "context_length_exceeded"}
    llm_server.reply_error(400, TOO_LONG, **too_long)
    llm_server.reply_error(400, TOO_LONG, **too_long)
    engine, _ = make_engine(llm_server, session, workdir)

    result = engine.run_turn("go on")

    assert result.error is not None and "context" in result.error
    assert len([b for b in llm_server.requests if not is_summary_request(b)]) == 2
    assert manager.open_session(session.session_id).get_messages()[-1].content == "go on"


def test_a_failing_summariser_falls_back_to_truncation_and_says_why(llm_server, manager, workdir):
    session = manager.new_session()
    _fill(session, 20)
    llm_server.respond_with(lambda body: None)
    failures = {"n": 0}

    def responder(body):
        if is_summary_request(body):
            failures["n"] += 1
            from tests.support.llm_server import ErrorReply

            return ErrorReply(400, "summaries are not allowed here")
        return None

    llm_server.respond_with(responder)
    llm_server.reply_text("answer")
    engine, seen = make_engine(
        llm_server, session, workdir, context_window=4000, strategy="summarize"
    )

    engine.run_turn("next")

    notice = next(e for e in seen if isinstance(e, ev.Compaction))
    assert notice.strategy == "budget" and "summaries are not allowed here" in (
        notice.fallback_reason or ""
    )
    chat = [b for b in llm_server.requests if not is_summary_request(b)][0]
    assert not chat["messages"][1]["content"].startswith("[Conversation Summary]")


class InterruptingTool:
    """A tool whose run is interrupted, as Ctrl-C does to a long command."""

    name = "slow"

    def definition(self) -> ToolDefinition:
        return ToolDefinition("slow", "takes forever", {"type": "object", "properties": {}})

    def run(self, args, ctx) -> ToolResult:
        raise KeyboardInterrupt


def test_an_interrupt_mid_tool_keeps_completed_results_and_stubs_the_rest(
    llm_server, manager, workdir
):
    (workdir / "a.txt").write_text("alpha\n")
    registry = default_registry()
    registry.register(InterruptingTool())
    llm_server.reply_tool_calls(
        [
            ("c1", "read_file", json.dumps({"path": "a.txt"})),
            ("c2", "slow", "{}"),
            ("c3", "read_file", json.dumps({"path": "a.txt"})),
        ]
    )
    session = manager.new_session()
    engine, _ = make_engine(llm_server, session, workdir, registry=registry)

    result = engine.run_turn("do three things")

    assert result.interrupted
    stored = manager.open_session(session.session_id).get_messages()
    assert is_valid_tool_sequence(stored)
    tool_contents = {m.tool_call_id: m.content for m in stored if m.role == "tool"}
    assert "alpha" in tool_contents["c1"]
    assert tool_contents["c2"] == INTERRUPTED_STUB and tool_contents["c3"] == INTERRUPTED_STUB


def test_after_an_interrupt_the_session_resumes_with_a_valid_sequence(llm_server, manager, workdir):
    registry = default_registry()
    registry.register(InterruptingTool())
    llm_server.reply_tool_calls([("c1", "slow", "{}")])
    session = manager.new_session()
    engine, _ = make_engine(llm_server, session, workdir, registry=registry)
    engine.run_turn("start")

    llm_server.reply_text("ok, continuing")
    resumed = manager.open_session(session.session_id)
    engine2, _ = make_engine(llm_server, resumed, workdir)
    result = engine2.run_turn("continue")

    assert result.reply.content == "ok, continuing"
    sent = [Message.from_dict(m) for m in llm_server.requests[-1]["messages"]]
    assert is_valid_tool_sequence(sent) and sent == repair_orphaned_tool_pairs(sent)


def test_a_stream_broken_mid_reply_keeps_the_partial_text_and_reports_it(
    llm_server, manager, workdir
):
    llm_server.reply_stream_break("The answer is forty")
    session = manager.new_session()
    engine, seen = make_engine(llm_server, session, workdir)

    result = engine.run_turn("question")

    assert result.error is not None
    last = session.get_messages()[-1]
    assert last.role == "assistant" and last.content.startswith("The answer is forty")


def test_the_iteration_cap_stops_a_runaway_tool_loop(llm_server, manager, workdir):
    for i in range(3):
        llm_server.reply_tool_calls([(f"c{i}", "read_todos", "{}")])
    session = manager.new_session()
    engine, _ = make_engine(llm_server, session, workdir, max_iterations=3)

    result = engine.run_turn("loop forever")

    assert result.error is not None and "3 model calls" in result.error
    assert is_valid_tool_sequence(session.get_messages())


def test_context_breakdown_counts_system_tools_summary_and_messages(llm_server, manager, workdir):
    session = manager.new_session()
    _fill(session, 2, size=40)
    engine, _ = make_engine(llm_server, session, workdir, context_window=10_000)

    b = engine.context_breakdown()

    assert b.message_count == 4 and b.summary == 0
    assert b.system > 50 and b.tools > 100 and b.messages > 40
    assert b.total == b.system + b.tools + b.summary + b.messages
    assert b.context_window == 10_000 and b.threshold == 8_000


def test_context_breakdown_over_the_threshold_compacts_nothing_and_calls_no_model(
    llm_server, manager, workdir
):
    session = manager.new_session()
    _fill(session, 20)  # ~4.2K tokens of history against a 4K window (threshold 3.2K)
    engine, seen = make_engine(llm_server, session, workdir, context_window=4000)

    b = engine.context_breakdown()

    assert b.total > b.threshold == 3200 and b.message_count == 40
    assert session.latest_checkpoint() is None
    assert llm_server.requests == [] and seen == []


class HeldPreparer:
    """A ``Preparer`` that takes each preparation and never runs it: it stays under way."""

    def start(self, run: PreparedRun) -> bool:
        return True


def test_context_breakdown_counts_the_summaries_the_engine_prepares_ahead(
    llm_server, manager, workdir
):
    session = manager.new_session()
    _fill(session, 2, size=40)
    engine, _ = make_engine(llm_server, session, workdir, context_window=10_000)
    sid = session.session_id
    ahead = AheadOfThreshold(HeldPreparer(), PreparedAnswers(None), lookahead=1, share=0.5)
    ahead.applied[sid], ahead.discarded[sid], ahead.discarded["another session"] = 2, 1, 5
    view = load_view(session, Message("system", "s"))
    yes = lambda *_: True  # noqa: E731 - past the mark, needing a model
    assert ahead.consider(sid, view, None, 0, yes, yes, lambda msgs: None, discard)
    engine.preparations = ahead

    b = engine.context_breakdown()

    assert (b.prepared_applied, b.prepared_discarded, b.preparing) == (2, 1, True)


# -- a reply cut off mid-stream: one rule for Ctrl-C and a dropped connection ---------------


def test_ctrl_c_mid_stream_keeps_the_shown_part_marked_as_interrupted(llm_server, manager, workdir):
    llm_server.reply_text("one two three four five six seven eight", chunk_size=4)
    session = manager.new_session()
    engine, seen = make_engine(llm_server, session, workdir)
    shown: list[str] = []

    def press_ctrl_c_on_the_third_chunk(event: ev.Event) -> None:
        if isinstance(event, ev.TextDelta):
            shown.append(event.text)
            if len(shown) == 3:
                raise KeyboardInterrupt

    engine.on_event = press_ctrl_c_on_the_third_chunk
    result = engine.run_turn("count")

    assert result.interrupted
    stored = manager.open_session(session.session_id).get_messages()
    assert [(m.role, m.content) for m in stored] == [
        ("user", "count"),
        ("assistant", "".join(shown) + "\n[reply interrupted]"),
    ]


def test_a_dropped_stream_keeps_the_shown_part_the_same_way(llm_server, manager, workdir):
    llm_server.reply_stream_break("one two three", chunk_size=4)
    session = manager.new_session()
    engine, _ = make_engine(llm_server, session, workdir)

    result = engine.run_turn("count")

    assert result.error is not None and "broke off" in result.error
    stored = manager.open_session(session.session_id).get_messages()
    assert [(m.role, m.content) for m in stored] == [
        ("user", "count"),
        ("assistant", "one two three\n[reply interrupted]"),
    ]
