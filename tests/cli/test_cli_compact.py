"""`harness9 compact`: the dry-run preview writes nothing; a real run stores a checkpoint."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest
from typer.testing import CliRunner

from harness9.cli import app
from harness9.config import db_path
from harness9.schema import Message, ToolCall
from harness9.store import Checkpoint, Manager
from tests.support.cli import stored_session, terminal
from tests.support.history import exchanges

runner = CliRunner()


def make_session(pairs: int = 20, size: int = 400) -> str:
    return stored_session(*exchanges(pairs, size))


def row_counts() -> tuple[int, int]:
    con = sqlite3.connect(db_path())
    try:
        return (
            con.execute("select count(*) from messages").fetchone()[0],
            con.execute("select count(*) from compactions").fetchone()[0],
        )
    finally:
        con.close()


def test_dry_run_json_reports_the_plan_and_changes_nothing():
    make_session()
    before = row_counts()
    db_bytes = db_path().read_bytes()

    result = runner.invoke(
        app,
        ["compact", "--dry-run", "--json", "--context-window", "4000", "--strategy", "summarize"],
    )

    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["would_compact"] is True and plan["strategy"] == "summarize"
    assert plan["context_window"] == 4000 and plan["threshold"] == 3200
    assert plan["messages_to_summarize"] + plan["messages_kept"] == 40
    assert plan["messages_kept"] >= 6
    assert plan["tokens_after"] < plan["tokens_before"]
    assert row_counts() == before == (40, 0)
    assert db_path().read_bytes() == db_bytes


def test_dry_run_table_marks_folded_and_kept_messages():
    make_session()

    result = runner.invoke(
        app, ["compact", "--dry-run", "--context-window", "4000", "--strategy", "budget"]
    )

    assert result.exit_code == 0, result.output
    assert "drop" in result.stdout and "keep" in result.stdout
    assert "would drop" in result.stdout and "threshold 3.2K" in result.stdout


def tool_rounds(n: int = 8) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        call = ToolCall(f"c{i}", "bash", f'{{"command": "cat x{i}.log"}}')
        out += [Message("user", f"look at x{i}"), Message("assistant", "", [call])]
        out.append(Message("tool", "r" * 2000, tool_call_id=call.id))
    return out


@pytest.mark.parametrize(
    ("window", "verdict"),
    [
        ("6500", "would evict old tool results and keep all 24 messages"),  # eviction lands
        ("4000", "would fold 18 messages and keep 6"),  # it does not: old messages fold
    ],
)
def test_an_evict_dry_run_says_whether_it_evicts_results_or_folds_messages(window, verdict):
    stored_session(*tool_rounds())

    result = runner.invoke(
        app, ["compact", "--dry-run", "--context-window", window, "--strategy", "evict"]
    )

    assert result.exit_code == 0, result.output
    assert verdict in " ".join(result.stdout.split())


def test_dry_run_rows_are_numbered_as_sessions_show_and_fit_a_120_column_terminal():
    sid = make_session()
    with Manager(db_path()) as m:  # the first 10 messages are already folded
        s = m.open_session(sid)
        tenth = s.get_records()[9].id
        s.add_checkpoint(
            Checkpoint(tenth, "Goal: answer questions", "summarization", 900, 300, 10, 1)
        )
    env = terminal(columns=120)

    result = runner.invoke(
        app, ["compact", "--dry-run", "--context-window", "4000", "--strategy", "budget"], obj=env
    )

    out = re.sub(r"\x1b\[[0-9;]*m", "", env.stdout.getvalue())
    assert result.exit_code == 0, out
    assert all(len(line) <= 120 for line in out.splitlines())
    rows = [[c.strip() for c in re.split("[│┃]", line)[1:-1]] for line in out.splitlines()]
    rows = [r for r in rows if len(r) == 5]
    assert rows[0] == ["#", "role", "tokens", "action", "content"]  # no header cut short
    assert rows[1][:2] == ["summary", "user (summary)"]
    # The first message after the checkpoint is #11, as `sessions show` numbers it.
    assert rows[2][0] == "#11" and rows[2][1] == "user" and rows[2][4].startswith("question 5 ")
    assert not any("…" in cell for row in rows for cell in row[:4])


def test_dry_run_under_the_threshold_says_nothing_would_be_compacted():
    make_session(pairs=2)

    result = runner.invoke(app, ["compact", "--dry-run", "--json"])

    plan = json.loads(result.stdout)
    assert plan["would_compact"] is False and plan["messages_to_summarize"] == 0
    assert plan["messages_kept"] == 4


def test_compact_with_budget_stores_a_checkpoint_that_sessions_show_displays():
    sid = make_session()

    result = runner.invoke(
        app, ["compact", "--session", sid[:6], "--strategy", "budget", "--context-window", "4000"]
    )

    assert result.exit_code == 0, result.output
    assert "⚡ context compacted" in result.stdout
    assert row_counts() == (40, 1)  # messages are never deleted
    shown = runner.invoke(app, ["sessions", "show", sid, "--json"])
    [cp] = json.loads(shown.stdout)["checkpoints"]
    assert cp["strategy"] == "budget"


def test_compact_summarize_calls_the_model_and_stores_its_summary(llm_server):
    sid = make_session()
    llm_server.respond_with(lambda body: "**Goal:** answer forty questions")

    result = runner.invoke(
        app,
        [
            "compact",
            "--last",
            "--json",
            "--context-window",
            "4000",
            "--model",
            "openai/test-model",
            "--api-base",
            llm_server.base_url,
            "--strategy",
            "summarize",
        ],
    )

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["compacted"] is True and out["strategy"] == "summarize"
    with Manager(db_path()) as m:
        [cp] = m.open_session(sid).list_checkpoints()
    assert cp.summary == "**Goal:** answer forty questions"


def test_compact_counts_the_summary_calls_usage_and_cost_in_the_session(llm_server):
    sid = make_session()
    # In a 4,000-token window the summary takes three calls: two parts, then their merge.
    for _ in range(3):
        llm_server.reply_text("**Goal:** answer forty questions", usage=(1_000, 100))

    result = runner.invoke(
        app,
        ["compact", "--session", sid, "--context-window", "4000", "--strategy", "summarize"]
        + ["--model", "openai/gpt-4o-mini", "--api-base", llm_server.base_url],
    )

    assert result.exit_code == 0, result.output
    shown = json.loads(runner.invoke(app, ["sessions", "show", sid, "--json"]).stdout)
    cost = 3_000 * 0.15e-6 + 300 * 0.6e-6  # gpt-4o-mini's prices: $0.00063
    assert shown["usage"]["model_calls"] == 3
    assert shown["usage"]["cost_usd"] == pytest.approx(cost)
    assert shown["usage"]["summaries"] == {
        "model_calls": 3,
        "input_tokens": 3_000,
        "output_tokens": 300,
        "cost_usd": pytest.approx(cost),
        "unpriced_calls": 0,
    }


def test_compact_summarises_with_the_summary_model_when_given_one(llm_server):
    make_session()
    llm_server.respond_with(lambda body: f"summary by {body['model']}")

    result = runner.invoke(
        app,
        ["compact", "--json", "--context-window", "4000", "--model", "openai/chat-model"]
        + ["--summary-model", "openai/cheap-model", "--api-base", llm_server.base_url]
        + ["--timeout", "30"],
    )

    assert result.exit_code == 0, result.output
    assert {r["model"] for r in llm_server.requests} == {"cheap-model"}


def test_compact_under_the_threshold_does_nothing_without_force():
    make_session(pairs=2)

    result = runner.invoke(app, ["compact", "--strategy", "budget"])

    assert result.exit_code == 0 and "nothing to compact" in result.stdout
    assert row_counts() == (4, 0)


def test_compact_with_no_sessions_is_an_error_not_a_usage_error_and_creates_no_database(
    harness9_home,
):
    result = runner.invoke(app, ["compact", "--dry-run"])

    assert result.exit_code == 1
    assert result.stderr == "harness9: there are no sessions to compact\n"
    assert not harness9_home.exists()


def test_the_window_strategy_speaks_in_messages_not_tokens():
    make_session(pairs=10)

    plain = runner.invoke(app, ["compact", "--strategy", "window"])
    forced = runner.invoke(app, ["compact", "--strategy", "window", "--force"])
    preview = runner.invoke(app, ["compact", "--strategy", "window", "--dry-run"])

    expected = "nothing to compact: 21 messages fit in the 100-message window and "
    assert plain.exit_code == 0 and plain.stdout.startswith(expected)
    assert plain.stdout.endswith("-token threshold\n")
    assert "under the 100 threshold" not in plain.stdout  # 100 is a message count
    assert (forced.exit_code, forced.stdout) == (0, plain.stdout)  # --force keeps the last 100
    assert "nothing would be compacted" in preview.stdout
    assert row_counts() == (20, 0)


def test_a_forced_compaction_that_folds_nothing_does_not_suggest_force():
    make_session(pairs=3)

    result = runner.invoke(app, ["compact", "--strategy", "evict", "--force"])

    assert result.exit_code == 0
    assert result.stdout == "nothing to compact: nothing left to fold\n"


def test_an_unknown_strategy_is_a_usage_error():
    make_session(pairs=1)

    result = runner.invoke(app, ["compact", "--strategy", "magic"])

    assert result.exit_code == 2 and "magic" in result.stderr
