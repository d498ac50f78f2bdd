"""Search finds CJK words inside sentences (trigram index), and keeps bm25 for the rest."""

from __future__ import annotations

import json
import sqlite3

from typer.testing import CliRunner

from harness9.cli import app
from harness9.config import db_path
from harness9.schema import Message, ToolCall
from harness9.store import open_manager
from harness9.store.migrations import MIGRATIONS, SCHEMA_VERSION

runner = CliRunner()


def search(*words: str) -> list[dict]:
    result = runner.invoke(app, ["sessions", "search", "--json", *words])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def store(*msgs: Message) -> list[int]:
    with open_manager(db_path()) as m:
        return m.new_session().add_messages(list(msgs))


def test_a_two_character_chinese_word_is_found_inside_a_sentence():
    [mid, _] = store(
        Message("user", "我们今天讨论中文分词的问题，然后写测试。"),
        Message("assistant", "no chinese here"),
    )

    [hit] = search("中文")

    assert hit["message_id"] == mid
    assert hit["snippet"] == "我们今天讨论中文分词的问题，然后写测试。"
    start, end = hit["highlights"][0]
    assert hit["snippet"][start:end] == "中文"


def test_longer_cjk_terms_are_ranked_and_anded():
    ids = store(
        Message("user", "数据库迁移失败了，需要检查数据库迁移脚本和数据库迁移日志"),
        Message("user", "数据库迁移完成"),
        Message("user", "只是数据库"),
    )

    hits = search("数据库迁移")
    assert {h["message_id"] for h in hits} == {ids[0], ids[1]}
    assert sorted(h["rank"] for h in hits) == [h["rank"] for h in hits]  # bm25, best first
    assert search("数据库迁移", "日志") and [h["message_id"] for h in search("迁移", "日志")] == [
        ids[0]
    ]


def test_japanese_and_korean_and_tool_arguments_are_found():
    ids = store(
        Message("user", "ファイルを読み込んでください"),
        Message(
            "assistant", "", [ToolCall("c1", "bash", json.dumps({"command": "echo 안녕하세요"}))]
        ),
    )
    assert [h["message_id"] for h in search("読み込")] == [ids[0]]
    assert [h["message_id"] for h in search("안녕")] == [ids[1]]


def test_latin_search_still_uses_words_and_bm25():
    ids = store(Message("user", "the parser fails on foo.py"), Message("user", "中文 parser"))
    assert {h["message_id"] for h in search("parser")} == set(ids)
    assert [h["message_id"] for h in search("pars")] == []  # words, not substrings


def test_deleted_and_undone_cjk_messages_are_never_found():
    with open_manager(db_path()) as m:
        s = m.new_session()
        s.add_messages([Message("user", "删除这个中文消息")])
        assert search("中文")
        s.pop_message()
    assert search("中文") == []


def test_an_existing_store_is_back_filled_by_the_migration():
    store(Message("user", "旧的中文消息"))
    search("旧的")  # indexed under the current schema
    cjk = [name for name, _ in MIGRATIONS].index("index_cjk_trigram") + 1  # its version
    conn = sqlite3.connect(db_path())
    with conn:  # undo the CJK migration as if the file predated it
        conn.execute("DROP TABLE messages_cjk")
        conn.execute("DROP TRIGGER messages_cjk_delete")
        conn.execute("DROP TRIGGER messages_cjk_update")
        # ... and every later migration (tables or columns of their own).
        summary_columns = ("calls", "input_tokens", "output_tokens", "cost_usd", "unpriced_calls")
        for name, _ in MIGRATIONS[cjk:]:
            undo = {
                "checkpoint_recall_index_rewrites_and_state": ["DROP TABLE compaction_details"],
                "session_model_and_context_window": ["DROP TABLE session_settings"],
                "track_unfinished_imports": ["DROP TABLE session_imports"],
                "pins_forks_and_checkpoint_instructions": [
                    f"DROP TABLE {t}"
                    for t in ("session_pins", "session_forks", "compaction_instructions")
                ],
                "subagent_sessions": ["DROP TABLE subagent_sessions"],
                "forks_share_their_origins_messages": [
                    "DROP TRIGGER sessions_hand_over_shared",
                    *(
                        f"DROP TABLE {t}"
                        for t in ("shared_hand_overs", "inherited_messages", "todo_lists")
                    ),
                ],
                "checkpoint_data_as_json": ["DROP TABLE compaction_data"],
                "session_usage_summary_calls": [
                    f"ALTER TABLE session_usage DROP COLUMN summary_{c}" for c in summary_columns
                ],
                "session_imported_at": ["ALTER TABLE sessions DROP COLUMN imported_at"],
                "session_usage_cache_writes": [
                    "ALTER TABLE session_usage DROP COLUMN cache_write_tokens"
                ],
                "message_offload_link": [
                    f"ALTER TABLE messages DROP COLUMN offload_{c}" for c in ("id", "tokens")
                ],
                "message_result_metadata": ["ALTER TABLE messages DROP COLUMN metadata"],
                "checkpoint_facts": ["ALTER TABLE compactions DROP COLUMN facts"],
            }.get(name, [])
            for statement in undo:
                conn.execute(statement)
        conn.execute("DELETE FROM schema_migrations WHERE version >= ?", (cjk,))
        conn.execute(f"PRAGMA user_version = {cjk - 1}")
    conn.close()
    assert cjk <= SCHEMA_VERSION

    assert [h["snippet"] for h in search("中文")] == ["旧的中文消息"]
