"""Phase-2 and compaction controls, wired into `harness9 chat` end to end."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from harness9.cli import app
from harness9.config import ContextOptions, db_path, tool_results_dir
from harness9.context.policy import ContextPolicy
from harness9.engine import events as ev
from harness9.engine.engine import AgentEngine
from harness9.engine.prompt import PromptBuilder
from harness9.provider import LLMProvider
from harness9.schema import Message
from harness9.store import Manager
from harness9.tools import default_registry
from tests.support.cli import chat, runner, write_config
from tests.support.llm_server import is_summary_request


def test_a_50kb_tool_output_is_offloaded_and_recalled_in_full(llm_server, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    big = "".join(f"line {i:05d}: {'data ' * 8}\n" for i in range(1100))  # ~50 KB
    (work / "big.log").write_text(big)
    llm_server.reply_tool_calls([("c1", "read_file", json.dumps({"path": "big.log"}))])

    def recall_then_answer(body):
        tool_msgs = [m for m in body["messages"] if m["role"] == "tool"]
        if len(tool_msgs) == 1:
            marker = tool_msgs[0]["content"]
            offload_id = marker.split("[offload:", 1)[1].split("]", 1)[0]
            from tests.support.llm_server import ToolCallsReply

            return ToolCallsReply(calls=(("c2", "offload_recall", json.dumps({"id": offload_id})),))
        return None

    llm_server.respond_with(recall_then_answer)
    llm_server.reply_text("I have the whole log.")

    result = runner.invoke(
        app,
        [
            "chat",
            "--model",
            "openai/test-model",
            "--api-base",
            llm_server.base_url,
            "--workdir",
            str(work),
        ],
        input="read big.log\n",
    )

    assert result.exit_code == 0, result.output
    first_result = [m for m in llm_server.requests[1]["messages"] if m["role"] == "tool"][0][
        "content"
    ]
    assert first_result.startswith("📂 [offload:") and len(first_result) < 3000
    [session_dir] = tool_results_dir().iterdir()
    offload_id = first_result.split("[offload:", 1)[1].split("]", 1)[0]
    assert "line 01099" in (session_dir / f"{offload_id}.txt").read_text()
    recalled = [m for m in llm_server.requests[2]["messages"] if m["role"] == "tool"][1]["content"]
    assert recalled.startswith("     1\tline 00000") or "line 00000" in recalled[:200]
    assert len(recalled) >= 8000  # the first page of the full content, not the summary


def test_search_command_finds_an_old_session_and_resumes_it(llm_server):
    llm_server.reply_text("Noted the flamingo.")
    chat(llm_server, "remember the pink flamingo\n")
    llm_server.reply_text("Back on flamingos.")

    result = chat(llm_server, "/search flamingo\n1\nwhat bird?\n")

    assert result.exit_code == 0, result.output
    assert "flamingo" in result.stderr and "resumed session" in result.stderr
    sent = [m["content"] for m in llm_server.requests[-1]["messages"][1:]]
    assert sent == ["remember the pink flamingo", "Noted the flamingo.", "what bird?"]


def test_search_with_bad_syntax_is_one_line_and_the_chat_goes_on(llm_server):
    llm_server.reply_text("still here")

    result = chat(llm_server, '/search "unbalanced\nhello\n')

    assert result.exit_code == 0
    assert "error:" in result.stderr and result.stdout == "still here\n"


def test_retention_removes_idle_sessions_at_start_up_with_one_line(llm_server):
    write_config("retention_days = 7\n")
    with Manager(db_path()) as m:
        old = m.new_session()
        old.add_messages([Message("user", "ancient")])
    con = sqlite3.connect(db_path())
    con.execute("update sessions set updated_at = ?", (time.time() - 30 * 86400,))
    con.commit()
    con.close()
    llm_server.reply_text("fresh")

    result = chat(llm_server, "hello\n")

    assert result.exit_code == 0, result.output
    assert "Removed 1 session not updated in 7 days" in result.stderr
    with Manager(db_path()) as m:
        assert [i.title for i in m.list_sessions()] == ["hello"]


def test_a_malformed_config_file_is_a_one_line_error_naming_it():
    write_config("[compaction\nstrategy = 'x'\n")

    result = runner.invoke(app, ["chat", "--api-base", "http://127.0.0.1:9/v1"], input="")

    assert result.exit_code == 1
    assert "config.toml" in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("retention_dayz = 30\n", "unknown key retention_dayz"),
        ("[foo]\nx = 1\n", "unknown table [foo]"),
    ],
)
def test_an_unknown_top_level_key_or_table_is_a_one_line_error_naming_it(
    llm_server, text: str, named: str
):
    write_config(text)

    result = chat(llm_server, "hi\n")

    assert result.exit_code == 1
    assert result.stderr.startswith(f"harness9: {named} in ")
    assert (
        "(known: retention_days, database_url, [compaction], [offload], [topics], [tools], "
        "[provider], [subagents], [mcp])" in result.stderr
    )
    assert result.stderr.count("\n") == 1
    assert llm_server.requests == []


def test_an_unknown_strategy_in_the_config_names_the_key(llm_server):
    write_config('[compaction]\nstrategy = "magic"\n')

    result = chat(llm_server, "")

    assert result.exit_code == 1 and "compaction.strategy" in result.stderr


def _long_history_session(pairs: int = 20) -> str:
    with Manager(db_path()) as m:
        s = m.new_session()
        for i in range(pairs):
            s.add_messages(
                [
                    Message("user", f"question {i} " + "q" * 400),
                    Message("assistant", f"answer {i} " + "a" * 400),
                ]
            )
        return s.session_id


def test_with_auto_compaction_off_an_overflow_is_announced_not_compacted(llm_server):
    write_config("[compaction]\nauto = false\n")
    sid = _long_history_session()
    llm_server.reply_text("ok")

    result = chat(llm_server, "next\n", "--resume", sid, "--context-window", "4000")

    assert result.exit_code == 0, result.output
    assert "automatic compaction is off: run /compact" in result.stderr
    # The threshold is named as the threshold (80 % of 4000), the size as the size.
    assert "is over the compaction threshold (3.2K tokens)" in result.stderr
    assert not any(map(is_summary_request, llm_server.requests))
    assert "⚡" not in result.stderr


def test_summary_model_flag_sends_summaries_to_that_model(llm_server):
    sid = _long_history_session()
    llm_server.respond_with(
        lambda body: "**Goal:** cheap summary" if is_summary_request(body) else None
    )
    llm_server.reply_text("ok")

    result = chat(
        llm_server,
        "next\n",
        "--resume",
        sid,
        "--context-window",
        "4000",
        "--summary-model",
        "openai/cheap-model",
    )

    assert result.exit_code == 0, result.output
    summaries = [b for b in llm_server.requests if is_summary_request(b)]
    assert summaries and {b["model"] for b in summaries} == {"cheap-model"}
    assert {b["model"] for b in llm_server.requests if not is_summary_request(b)} == {"test-model"}


def test_compact_command_passes_focus_instructions_to_the_summariser(llm_server):
    sid = _long_history_session(12)
    llm_server.respond_with(lambda body: "**Goal:** focused" if is_summary_request(body) else None)

    result = chat(llm_server, "/compact keep the database decisions\n", "--resume", sid)

    assert result.exit_code == 0, result.output
    [summary_request] = [b for b in llm_server.requests if is_summary_request(b)]
    assert (
        "Focus especially on: keep the database decisions"
        in summary_request["messages"][1]["content"]
    )
    assert "⚡ context compacted" in result.stderr


def test_phase2_alias_runs_hybrid_which_stubs_old_tool_results_before_summarising(
    llm_server, tmp_path
):
    work = tmp_path / "w"
    work.mkdir()
    (work / "f.txt").write_text("x")
    with Manager(db_path()) as m:
        s = m.new_session()
        for i in range(12):
            s.add_messages(
                [
                    Message("user", f"step {i}"),
                    Message(
                        "assistant",
                        "",
                        [
                            __import__("harness9.schema", fromlist=["ToolCall"]).ToolCall(
                                f"c{i}", "bash", '{"command":"cat big"}'
                            )
                        ],
                    ),
                    Message(
                        "tool",
                        "\n".join(f"row {i}-{j} " + "z" * 60 for j in range(60)),
                        tool_call_id=f"c{i}",
                    ),
                    Message("assistant", f"done {i}"),
                ]
            )
        sid = s.session_id
    llm_server.reply_text("ok")

    result = chat(
        llm_server,
        "continue\n",
        "--resume",
        sid,
        "--context-window",
        "16000",
        "--strategy",
        "phase2",
    )

    assert result.exit_code == 0, result.output
    assert "⚡ context compacted" in result.stderr
    sent = llm_server.requests[-1]["messages"]
    stubs = [m for m in sent if m["role"] == "tool" and m["content"].startswith("[stubbed]")]
    assert stubs and not any(map(is_summary_request, llm_server.requests))
    assert all('offload_recall(id="msg_' in m["content"] for m in stubs)  # each recallable
    with Manager(db_path()) as m:  # stubs live in the checkpoint: the log is untouched
        stored = [x for x in m.open_session(sid).get_messages() if x.role == "tool"]
    assert all(x.content.startswith("row ") for x in stored)


def test_the_smart_trigger_compacts_before_the_threshold_when_growth_predicts_it(
    llm_server, tmp_path
):
    # Window 10K, threshold 8K. Each tool round adds ~1.3K tokens; at ~5.5K the growth
    # predicts crossing 8K within two calls, so it compacts below the threshold.
    with Manager(tmp_path / "s.db") as m:
        session = m.new_session()
        provider = LLMProvider("openai/test-model", api_base=llm_server.base_url, backoff_base=0.01)
        seen: list[ev.Event] = []
        engine = AgentEngine(
            provider,
            default_registry(),
            tmp_path,
            session=session,
            policy=ContextPolicy(
                ContextOptions(strategy="budget", offload=False), provider, 10_000
            ),
            prompt_builder=PromptBuilder(tmp_path),
            on_event=seen.append,
        )
        (tmp_path / "chunk.txt").write_text("\n".join(f"entry {i} " + "w" * 40 for i in range(110)))
        for i in range(6):
            llm_server.reply_tool_calls([(f"r{i}", "read_file", json.dumps({"path": "chunk.txt"}))])
        llm_server.reply_text("done")

        engine.run_turn("read it many times")

    estimates = [e.tokens for e in seen if isinstance(e, ev.TokenUpdate) and not e.actual]
    compactions = [e for e in seen if isinstance(e, ev.Compaction)]
    assert compactions, estimates
    assert (
        compactions[0].tokens_before < 8_000 + 1_000
    )  # messages + tool definitions, below 8K messages
    assert max(estimates) < 10_000
