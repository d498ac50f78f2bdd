import json

import pytest

from harness9.context.facts import (
    PRESERVED_HEADING,
    KeyInfoFingerprint,
    extract_fingerprint,
    facts_focus,
    repair_summary,
    validate_markers,
)
from harness9.context.stubs import offloaded_message, summary_message
from harness9.context.summarize import (
    STRUCTURED_COMPRESSION_PROMPT,
    SummaryError,
    marker_summarizer,
    structured_summary,
)
from harness9.schema import Message, ToolCall
from harness9.store.session import OffloadLink
from tests.support.history import ScriptedSummarizer

MODELS_PY = "class User:\n    pass\n\ndef create_all(engine):\n    pass\n"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "src/db/migrate.py", line 3, in <module>\n'
    "sqlalchemy.exc.OperationalError: no such table: users\n"
)


def conversation() -> list[Message]:
    write = ToolCall(
        "c1", "write_file", json.dumps({"path": "src/db/models.py", "content": MODELS_PY})
    )
    return [
        Message("system", "You are harness9. Edit files under /etc/never-this.conf"),
        Message("user", "The migration in src/db/migrate.py fails. Let's use alembic for it."),
        Message("assistant", "I will add the models first.", [write]),
        Message("tool", "wrote 5 lines", tool_call_id="c1"),
        Message("assistant", "", [ToolCall("c2", "bash", '{"command": "pytest -q"}')]),
        Message(
            "tool",
            TRACEBACK
            + "except ValueError:\nFAILED tests/test_db.py::test_migrate - AssertionError",
            tool_call_id="c2",
        ),
        Message("assistant", "We decided to create the users table in the first revision."),
    ]


def test_extracts_paths_from_content_and_tool_arguments_not_system_by_last_mention():
    # migrate.py is mentioned first by the user and again in the traceback.
    fp = extract_fingerprint(conversation())
    assert fp.file_paths == ["src/db/models.py", "src/db/migrate.py", "tests/test_db.py"]


def test_extracts_declared_names_from_written_file_content():
    assert extract_fingerprint(conversation()).identifiers == ["User", "create_all"]


def test_extracts_traceback_last_line_and_failed_lines_but_not_code():
    assert extract_fingerprint(conversation()).errors == [
        "sqlalchemy.exc.OperationalError: no such table: users",
        "FAILED tests/test_db.py::test_migrate - AssertionError",
    ]


def test_extracts_decisions_from_user_and_assistant_text():
    assert extract_fingerprint(conversation()).decisions == [
        "The migration in src/db/migrate.py fails. Let's use alembic for it.",
        "We decided to create the users table in the first revision.",
    ]


def test_chinese_decision_is_recognised():
    fp = extract_fingerprint([Message("assistant", "我们决定使用 SQLite 作为存储")])
    assert fp.decisions == ["我们决定使用 SQLite 作为存储"]


def test_previous_summary_markers_are_carried_forward():
    prev = summary_message(
        "@file:lib/old.go\n@func:Handle\n@error:panic: nil map\n@decision:keep gRPC"
    )
    fp = extract_fingerprint([prev])
    assert fp == KeyInfoFingerprint(["lib/old.go"], ["Handle"], ["panic: nil map"], ["keep gRPC"])


def test_every_distinct_path_is_kept_without_a_cap():
    msgs = [Message("user", f"look at pkg/file_{i}.py and ./pkg/file_{i}.py") for i in range(500)]
    paths = extract_fingerprint(msgs).file_paths
    assert len(paths) == 500 and paths[0] == "pkg/file_0.py" and paths[-1] == "pkg/file_499.py"


def test_validate_lists_each_missing_kind():
    fp = KeyInfoFingerprint(["src/a.py"], ["load"], ["KeyError: 'name'"], ["use postgres"])
    assert validate_markers("nothing relevant", fp) == [
        "file: src/a.py",
        "identifier: load",
        "error: KeyError: 'name'",
        "decision: use postgres",
    ]


def test_validate_accepts_markers_and_plain_mentions():
    fp = KeyInfoFingerprint(["src/a.py"], ["load"], ["KeyError: 'name'"], ["use postgres"])
    summary = "@file:src/a.py\n@func:load()\n@error:KeyError 'name' fixed\nWe use Postgres now."
    assert validate_markers(summary, fp) == []


def test_identifier_must_match_as_a_whole_word():
    fp = KeyInfoFingerprint(identifiers=["load"])
    assert validate_markers("@func:load_all", fp) == ["identifier: load"]


def test_error_matches_by_most_of_its_words():
    fp = KeyInfoFingerprint(errors=["sqlalchemy.exc.OperationalError: no such table: users"])
    assert validate_markers("@error:OperationalError, table users missing (sqlalchemy)", fp) == []
    assert validate_markers("@error:something failed", fp) != []


def test_repair_appends_missing_items_under_preserved_facts():
    fp = KeyInfoFingerprint(["src/a.py", "src/b.py"], ["Loader"], ["ValueError: x"], [])
    repaired = repair_summary("Progress: edited src/a.py", fp)
    assert repaired == (
        "Progress: edited src/a.py\n\n"
        f"{PRESERVED_HEADING}\n@file:src/b.py\n@type:Loader\n@error:ValueError: x"
    )
    assert validate_markers(repaired, fp) == []


def test_repair_leaves_complete_summary_unchanged_and_is_idempotent():
    fp = extract_fingerprint(conversation())
    once = repair_summary("short", fp)
    assert repair_summary(once, fp) == once
    assert validate_markers(once, fp) == []


def test_marker_summariser_cuts_tool_results_to_200_chars_but_keeps_offload_markers():
    marker = "📂 [offload:ofl_0123456789ab] 9000 tokens offloaded\n" + "m" * 400
    msgs = [
        Message("assistant", "", [ToolCall("a", "bash", "{}"), ToolCall("b", "bash", "{}")]),
        Message("tool", "x" * 500, tool_call_id="a"),
        # An offloaded result, as the view shows it: its link is data.
        offloaded_message(
            Message("tool", marker, tool_call_id="b"), OffloadLink("ofl_0123456789ab", 9000)
        ),
    ]
    s = ScriptedSummarizer("ok")
    marker_summarizer(s, window=10**6).summarize(msgs)
    prompt = s.calls[0][1].content
    assert f"[bash result]: {'x' * 200}… [300 more characters]" in prompt
    assert "x" * 201 not in prompt and prompt.endswith(f"[bash result]: {marker}")


def test_marker_summariser_merges_a_previous_summary():
    s = ScriptedSummarizer("ok")
    head = [summary_message("@file:a.py"), Message("user", "next step")]
    marker_summarizer(s, window=10**6).summarize(head)
    assert "<previous-summary>\n@file:a.py\n</previous-summary>" in s.calls[0][1].content


def test_structured_summary_uses_marker_prompt_and_repairs_omissions():
    s = ScriptedSummarizer("@file:src/db/migrate.py\nProgress: migration half done")
    summary = structured_summary(marker_summarizer(s, window=10**6), conversation()[1:])[0]
    sent = s.calls[0]
    assert sent[0].content == STRUCTURED_COMPRESSION_PROMPT
    assert "<facts-to-keep>\n@file:src/db/models.py\n@file:src/db/migrate.py" in sent[1].content
    assert summary.startswith("@file:src/db/migrate.py\nProgress: migration half done\n\n")
    assert "@file:src/db/models.py" in summary and "@type:User" in summary
    assert validate_markers(summary, extract_fingerprint(conversation())) == []


def test_structured_summary_rejects_an_empty_reply():
    with pytest.raises(SummaryError):
        structured_summary(
            marker_summarizer(ScriptedSummarizer("   "), window=10**6), conversation()[1:]
        )


def test_prompt_names_every_marker():
    for marker in ("@file:", "@func:", "@type:", "@error:", "@decision:", "@todo:", "@config:"):
        assert marker in STRUCTURED_COMPRESSION_PROMPT


def test_near_identical_decision_with_another_id_does_not_count_as_present():
    summary = "@decision:Decided to use optimistic locking for cache_batch_1111, retries are cheap"
    fp = KeyInfoFingerprint(
        decisions=["Decided to use optimistic locking for cache_batch_2222, retries are cheap"]
    )
    assert validate_markers(summary, fp) == [f"decision: {fp.decisions[0]}"]
    assert validate_markers(summary.replace("1111", "2222"), fp) == []


def test_repair_keeps_each_of_two_decisions_that_differ_only_in_an_id():
    fp = KeyInfoFingerprint(decisions=["Decided to lock batch_1111", "Decided to lock batch_2222"])
    repaired = repair_summary("Decided to lock batch_1111", fp)
    assert repaired.endswith("@decision:Decided to lock batch_2222")


# ---- the "Preserved facts" budget ------------------------------------------------


def ten_paths() -> list[Message]:
    return [Message("user", f"look at src/p{i}.py") for i in range(10)]


def test_all_missing_facts_are_written_when_they_fit_the_budget():
    # Heading 5 tokens + ten "@file:src/pN.py" lines of 4 tokens = 45 tokens.
    fp = extract_fingerprint(ten_paths())
    repaired = repair_summary("x", fp, budget_tokens=45)
    assert repaired.count("@file:") == 10 and "not shown" not in repaired


def forty_paths() -> list[Message]:
    return [Message("user", f"look at src/p{i}.py") for i in range(10, 50)]


def test_over_budget_keeps_the_newest_and_says_how_many_were_left_out():
    # 40 lines of 5 tokens do not fit 108. 96 tokens are reserved for the heading and
    # the "… and N more" lines, which leaves 15: three paths.
    fp = extract_fingerprint(forty_paths())
    repaired = repair_summary("x", fp, budget_tokens=96 + 15)
    assert repaired == (
        f"x\n\n{PRESERVED_HEADING}\n@file:src/p47.py\n@file:src/p48.py\n@file:src/p49.py\n"
        "… and 37 more paths not shown"
    )


def test_facts_the_agent_acted_on_outrank_newer_facts_seen_only_in_tool_output():
    call = ToolCall("c1", "read_file", json.dumps({"path": "src/acted.py"}))
    seen = "".join(f"see lib/seen_{i}.py\n" for i in range(40))
    msgs = [Message("assistant", "", [call]), Message("tool", seen, tool_call_id="c1")]
    fp = extract_fingerprint(msgs)
    assert fp.rank["file: src/acted.py"] < fp.rank["file: lib/seen_39.py"]
    repaired = repair_summary("x", fp, budget_tokens=96 + 5)  # room for one path line
    assert (
        repaired == f"x\n\n{PRESERVED_HEADING}\n@file:src/acted.py\n… and 40 more paths not shown"
    )


def test_errors_of_each_commands_last_failing_run_outrank_older_errors():
    runs = [
        ("c1", "pytest -q", "ValueError: first run"),
        ("c2", "make build", "KeyError: build step"),
        ("c3", "pytest -q", "TypeError: second run"),
    ]
    msgs = []
    for cid, cmd, err in runs:
        msgs.append(Message("assistant", "", [ToolCall(cid, "bash", json.dumps({"command": cmd}))]))
        msgs.append(Message("tool", err, tool_call_id=cid))
    fp = extract_fingerprint(msgs)
    ranked = sorted(validate_markers("", fp), key=fp.rank.__getitem__)
    assert ranked == [
        "error: TypeError: second run",  # pytest's last failing run, newest
        "error: KeyError: build step",  # make's last failing run
        "error: ValueError: first run",  # an older run of pytest
    ]


def test_among_tool_output_facts_errors_then_names_then_paths():
    out = "ValueError: boom\ndef load_all():\n    pass\nsee src/other.py\n"
    msgs = [
        Message("assistant", "", [ToolCall("c1", "bash", "{}"), ToolCall("c2", "bash", "{}")]),
        Message("tool", "RuntimeError: older", tool_call_id="c1"),
        Message("tool", out, tool_call_id="c2"),
    ]
    fp = extract_fingerprint(msgs)
    ranked = sorted(validate_markers("", fp), key=fp.rank.__getitem__)
    assert ranked == [
        "error: ValueError: boom",  # the last failing run of "bash {}"
        "error: RuntimeError: older",
        "identifier: load_all",
        "file: src/other.py",
    ]


def test_facts_focus_lists_only_what_fits_the_budget():
    focus = facts_focus(extract_fingerprint(forty_paths()), 96 + 15)
    assert focus.endswith("@file:src/p49.py\n… and 37 more paths not shown\n</facts-to-keep>")
    assert "src/p46.py" not in focus and "@file:src/p47.py" in focus
