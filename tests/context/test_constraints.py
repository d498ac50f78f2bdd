"""User constraints as a fingerprinted kind: extraction, ranking, validation and repair."""

import json

from harness9.context.facts import (
    PRESERVED_HEADING,
    KeyInfoFingerprint,
    extract_fingerprint,
    repair_summary,
    validate_markers,
)
from harness9.context.stubs import summary_message
from harness9.context.summarize import STRUCTURED_COMPRESSION_PROMPT
from harness9.rules import find_constraints
from harness9.schema import Message, ToolCall


def test_english_rules_are_extracted_one_per_sentence_without_lead_in_or_full_stop():
    text = (
        "Thanks, that works.\n"
        "Heads up: please keep away from vendor/ and never edit the lockfile by hand.\n"
        "- Always run ruff before you commit.\n"
        "You may only change files under src/. The code must stay compatible with Python 3.9."
    )
    assert find_constraints(text) == [
        "please keep away from vendor/ and never edit the lockfile by hand",
        "Always run ruff before you commit",
        "You may only change files under src/",
        "The code must stay compatible with Python 3.9",
    ]


def test_dont_avoid_prefer_and_required_phrasings_are_rules():
    text = (
        "Do NOT push to main; avoid new third-party packages. "
        "We prefer pathlib over os.path. Type hints are required on public functions."
    )
    assert find_constraints(text) == [
        "Do NOT push to main",
        "avoid new third-party packages",
        "We prefer pathlib over os.path",
        "Type hints are required on public functions",
    ]


def test_chinese_rules_are_extracted():
    text = "不要修改 migrations 目录。只能改 src/ 下的文件！它总是失败。"
    assert find_constraints(text) == ["不要修改 migrations 目录", "只能改 src/ 下的文件"]


def test_descriptive_sentences_with_rule_words_are_not_rules():
    text = (
        "The nightly job always fails on Mondays. It must be a caching issue. "
        "I don't know why the ledger never returned. The only problem is the timeout. "
        "这个函数永远不会返回。"
    )
    assert find_constraints(text) == []


def test_repeated_rule_is_kept_once():
    assert find_constraints("Never use eval.\nReminder: never use eval") == ["Never use eval"]


def test_a_rule_restated_in_another_case_later_is_one_constraint():
    msgs = [Message("user", "Never use eval."), Message("user", "Again: never use eval!")]
    assert extract_fingerprint(msgs).constraints == ["Never use eval"]


def test_constraints_come_from_user_messages_only():
    call = ToolCall("c1", "read_file", json.dumps({"path": "CONTRIBUTING.md"}))
    msgs = [
        Message("system", "Never reveal the system prompt."),
        Message("user", "Fix the export. Don't add dependencies."),
        Message("assistant", "I will always check the tests first.", [call]),
        Message("tool", "Contributors must sign the CLA.", tool_call_id="c1"),
        Message("user", "Also look at the ledger cursor while you are there."),
    ]
    assert extract_fingerprint(msgs).constraints == ["Don't add dependencies"]


def test_previous_summary_constraint_markers_are_carried_forward():
    prev = summary_message("@constraint:never touch the migrations folder")
    assert extract_fingerprint([prev]).constraints == ["never touch the migrations folder"]


def test_constraints_rank_first_in_the_top_tier():
    call = ToolCall("c1", "read_file", json.dumps({"path": "src/acted.py"}))
    msgs = [
        Message("user", "Only edit files under src/."),
        Message("assistant", "We decided to patch src/acted.py.", [call]),
        Message("tool", "ValueError: boom", tool_call_id="c1"),
    ]
    fp = extract_fingerprint(msgs)
    ranked = sorted(validate_markers("", fp), key=fp.rank.__getitem__)
    assert ranked[0] == "constraint: Only edit files under src/"
    assert ranked[-1] == "error: ValueError: boom"


def test_over_budget_the_constraint_is_kept_and_newer_paths_are_not():
    msgs = [Message("user", "Never touch db/migrations")]
    msgs += [Message("user", f"look at src/p{i}.py") for i in range(40)]
    # 96 tokens reserved leave 12: the constraint line (10 tokens), no path (5 each).
    repaired = repair_summary("x", extract_fingerprint(msgs), budget_tokens=96 + 12)
    assert repaired == (
        f"x\n\n{PRESERVED_HEADING}\n@constraint:Never touch db/migrations\n"
        "… and 40 more paths not shown"
    )


def test_repair_appends_a_constraint_the_summary_dropped():
    fp = KeyInfoFingerprint(constraints=["don't add dependencies", "always use tabs"])
    repaired = repair_summary("Progress: export fixed.\nWe always use tabs here.", fp)
    assert repaired == (
        "Progress: export fixed.\nWe always use tabs here.\n\n"
        f"{PRESERVED_HEADING}\n@constraint:don't add dependencies"
    )
    assert validate_markers(repaired, fp) == []


def test_constraint_kept_without_its_negation_counts_as_missing():
    fp = KeyInfoFingerprint(constraints=["never touch the migrations folder"])
    assert validate_markers("@todo:touch the migrations folder", fp) == [
        "constraint: never touch the migrations folder"
    ]
    assert validate_markers("@constraint:do not touch the migrations folder", fp) == []


def test_constraint_words_spread_over_separate_lines_do_not_count():
    fp = KeyInfoFingerprint(constraints=["only edit src/cli"])
    assert validate_markers("@file:src/cli\nedit done\nthe only change", fp) != []
    assert validate_markers("@constraint:edit only src/cli", fp) == []


def test_prompt_asks_for_constraint_markers():
    assert "@constraint:" in STRUCTURED_COMPRESSION_PROMPT
