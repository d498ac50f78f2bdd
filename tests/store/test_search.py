"""Manager.search: the query language, ranking, snippets, and an index that never goes stale."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from freezegun import freeze_time

from harness9.schema import Message, ToolCall
from harness9.store import Checkpoint, Manager, SessionNotFoundError, StoreError
from harness9.store.backend import SessionStore, open_url
from harness9.store.migrations import MIGRATIONS, NO_FTS5, SchemaError, migrate
from harness9.store.search import (
    HIGHLIGHT_CLOSE,
    HIGHLIGHT_OPEN,
    SearchHit,
    SearchQueryError,
    plain_snippet,
    snippet_parts,
    to_fts_query,
)

H, E = HIGHLIGHT_OPEN, HIGHLIGHT_CLOSE


@pytest.fixture
def manager(store_url: str) -> Iterator[SessionStore]:
    with open_url(store_url) as m:
        yield m


def found(manager: Manager, query: str, **kw) -> list[str]:
    """The plain text of each hit's snippet, best match first."""
    return [plain_snippet(h.snippet) for h in manager.search(query, **kw)]


def add(manager: Manager, *texts: str) -> str:
    s = manager.new_session()
    s.add_messages([Message("user", t) for t in texts])
    return s.session_id


def indexed_rows(db: Path) -> list[int]:
    """The message ids the FTS5 index holds, checked for consistency first."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')")
        return [r for (r,) in conn.execute("SELECT rowid FROM messages_fts ORDER BY rowid")]
    finally:
        conn.close()


def indexed_upto(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        (upto,) = conn.execute("SELECT indexed_upto FROM fts_state").fetchone()
        return upto
    finally:
        conn.close()


# -- the query language -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expr"),
    [
        ("parser", '"parser"'),
        ("parser error", '"parser" AND "error"'),
        ('"fix the parser" now', '"fix the parser" AND "now"'),
        ("foo.py -x", '"foo.py" AND "-x"'),
        ("AND OR NOT NEAR", '"AND" AND "OR" AND "NOT" AND "NEAR"'),
        ("pars*", '"pars" *'),
        ('say"hi"', '"say" AND "hi"'),
        ('a "" - b', '"a" AND "b"'),
    ],
)
def test_user_text_becomes_a_safe_fts5_expression(text: str, expr: str):
    assert to_fts_query(text) == expr


def test_an_unbalanced_quote_is_a_query_error():
    with pytest.raises(SearchQueryError, match=r"unbalanced quote: '\"fix the'$"):
        to_fts_query('"fix the')


@pytest.mark.parametrize("text", ["", "   ", "-", '""', "*", "_ ."])
def test_a_query_with_no_words_is_a_query_error(text: str):
    with pytest.raises(SearchQueryError, match="no words to search for"):
        to_fts_query(text)


def test_bare_words_are_anded(manager: Manager):
    add(manager, "the parser fails", "the lexer fails", "parser and lexer both fail")
    assert found(manager, "parser lexer") == ["parser and lexer both fail"]


def test_a_quoted_phrase_matches_only_the_words_in_order(manager: Manager):
    add(manager, "fix the parser please", "the parser, fix it")
    assert found(manager, '"fix the parser"') == ["fix the parser please"]


def test_punctuation_in_a_word_is_searched_not_parsed(manager: Manager):
    add(manager, "edit foo.py with -x", "foo and py, far apart: py")
    assert found(manager, "foo.py") == ["edit foo.py with -x"]
    assert found(manager, "-x") == ["edit foo.py with -x"]


def test_fts5_operators_are_plain_words(manager: Manager):
    add(manager, "black AND white", "black or white")
    assert found(manager, "black AND white") == ["black AND white"]
    assert found(manager, "NEAR") == []


def test_a_trailing_star_matches_a_prefix(manager: Manager):
    add(manager, "compilation failed", "compiler crashed", "decompile")
    assert sorted(found(manager, "compil*")) == ["compilation failed", "compiler crashed"]


def test_case_and_accents_do_not_matter(manager: Manager):
    add(manager, "Café Résumé")
    assert found(manager, "cafe resume") == ["Café Résumé"]


def test_search_with_a_bad_query_raises_before_touching_the_store(manager: Manager):
    with pytest.raises(SearchQueryError):
        manager.search('"open')


# -- what is indexed, and what a hit says -----------------------------------------------------


def test_tool_results_and_tool_call_arguments_are_searchable(manager: Manager):
    s = manager.new_session()
    s.add_messages(
        [
            Message("user", "run the tests"),
            Message(
                "assistant",
                "",
                [ToolCall("call_1", "bash", '{"command": "cd src\\npytest -k tokenizer"}')],
            ),
            Message("tool", "3 passed in 0.2s", tool_call_id="call_1"),
        ]
    )
    # The argument's "\n" is decoded, so "pytest" is a word of its own, not "npytest".
    assert [(h.role, plain_snippet(h.snippet)) for h in manager.search("pytest tokenizer")] == [
        ("assistant", "bash cd src pytest -k tokenizer")
    ]
    assert [h.role for h in manager.search("passed")] == ["tool"]


def test_a_hit_names_session_message_role_time_title_and_highlights_the_match(
    manager: Manager,
):
    with freeze_time("2026-05-17 14:30:00"):
        s = manager.new_session()
        ids = s.add_messages(
            [Message("user", "Refactor the tokenizer"), Message("assistant", "The lexer is done")]
        )
    (hit,) = manager.search("lexer")
    assert hit == SearchHit(
        session_id=s.session_id,
        message_id=ids[1],
        role="assistant",
        created_at=1779028200.0,
        title="Refactor the tokenizer",
        snippet=f"The {H}lexer{E} is done",
        rank=hit.rank,
    )
    assert hit.rank < 0  # bm25: more negative is better


def test_a_long_message_gives_a_one_line_snippet_around_the_match(manager: Manager):
    words = [f"w{i}" for i in range(200)]
    words[120] = "needle"
    add(manager, "\n".join(words))
    (hit,) = manager.search("needle")
    assert "\n" not in hit.snippet
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…")
    assert f"w119 {H}needle{E} w121" in hit.snippet
    assert len(hit.snippet.split()) == 16


def test_markers_inside_stored_text_are_never_taken_for_highlights(manager: Manager):
    add(manager, f"fake {H}bold{E} text with a needle")
    (hit,) = manager.search("needle")
    assert snippet_parts(hit.snippet) == [
        ("fake bold text with a ", False),
        ("needle", True),
    ]


def test_the_better_bm25_match_comes_first(manager: Manager):
    add(manager, "parser " + "filler " * 40, "parser parser parser")
    assert found(manager, "parser")[0] == "parser parser parser"


def test_limit_caps_the_number_of_hits(manager: Manager):
    add(manager, *[f"note {i}" for i in range(30)])
    assert len(manager.search("note")) == 20
    assert len(manager.search("note", limit=3)) == 3


def test_session_id_restricts_the_search_to_one_session(manager: Manager):
    a = add(manager, "deploy to staging")
    add(manager, "deploy to production")
    assert [h.session_id for h in manager.search("deploy", session_id=a)] == [a]


def test_a_malformed_session_id_is_not_found(manager: Manager):
    with pytest.raises(SessionNotFoundError):
        manager.search("x", session_id="../etc")


# -- the index never goes stale ----------------------------------------------------------


def test_a_popped_message_is_never_found_again(manager: Manager):
    s = manager.new_session()
    s.add_messages([Message("user", "keep this"), Message("assistant", "undo this secret")])
    s.pop_message()
    assert found(manager, "secret") == []
    assert found(manager, "keep") == ["keep this"]


def test_cleared_messages_are_never_found_again(manager: Manager):
    s = manager.new_session()
    ids = s.add_messages([Message("user", "alpha one"), Message("assistant", "alpha two")])
    s.add_checkpoint(Checkpoint(ids[1], "sum", "summarization", 10, 5, 2, 1))
    other = add(manager, "alpha elsewhere")
    s.clear()
    assert [h.session_id for h in manager.search("alpha")] == [other]


def test_a_deleted_sessions_messages_are_never_found_again(manager: Manager):
    gone = add(manager, "password hunter2")
    kept = add(manager, "password reset link")
    manager.delete_session(gone)
    assert [h.session_id for h in manager.search("password")] == [kept]


def test_a_message_added_after_a_pop_is_found_under_its_new_id(manager: Manager):
    s = manager.new_session()
    s.add_messages([Message("user", "first draft")])
    s.pop_message()
    (new_id,) = s.add_messages([Message("user", "second draft")])
    assert [(h.message_id, plain_snippet(h.snippet)) for h in manager.search("draft")] == [
        (new_id, "second draft")
    ]


def test_a_hand_edit_of_an_already_indexed_row_is_reindexed(manager: Manager, db: Path):
    s = manager.new_session()
    (mid,) = s.add_messages([Message("user", "old wording")])
    assert found(manager, "wording") == ["old wording"]
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("UPDATE messages SET content = 'new wording' WHERE id = ?", (mid,))
    conn.close()
    assert found(manager, "old") == []
    assert found(manager, "new") == ["new wording"]
    assert indexed_rows(db) == [mid]


def test_a_hand_edited_row_is_reindexed(manager: Manager, db: Path):
    s = manager.new_session()
    (mid,) = s.add_messages([Message("user", "old wording")])
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("UPDATE messages SET content = 'new wording' WHERE id = ?", (mid,))
    conn.close()
    assert found(manager, "old") == []
    assert found(manager, "new") == ["new wording"]


def test_a_row_with_corrupt_tool_calls_is_still_written_and_found_by_its_text(
    manager: Manager, db: Path
):
    add(manager, "seed")
    sid = add(manager, "other")
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(
        "INSERT INTO messages (session_id, role, content, tool_calls, created_at) "
        "VALUES (?, 'assistant', 'calling a tool', '[{\"id\": ', 1)",
        (sid,),
    )
    conn.close()
    assert found(manager, "calling") == ["calling a tool"]


def test_a_row_of_invalid_utf8_does_not_break_search(manager: Manager, db: Path):
    s = manager.new_session()
    ids = s.add_messages([Message("user", "needle one"), Message("user", "needle two")])
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(
        "UPDATE messages SET content = CAST(X'6E6565646C6520FF' AS TEXT) WHERE id = ?", (ids[0],)
    )
    conn.close()
    assert sorted(found(manager, "needle")) == ["needle two", "needle \ufffd"]


# -- deferred indexing: writes leave the index alone, the next search catches up --------------


def test_adding_messages_leaves_the_index_untouched_until_a_search(manager: Manager, db: Path):
    s = manager.new_session()
    ids = s.add_messages([Message("user", "lazy one"), Message("user", "lazy two")])
    assert (indexed_rows(db), indexed_upto(db)) == ([], 0)
    assert sorted(found(manager, "lazy")) == ["lazy one", "lazy two"]
    assert (indexed_rows(db), indexed_upto(db)) == (ids, ids[-1])


def test_a_message_added_after_a_search_is_found_by_the_next_search(manager: Manager):
    s = manager.new_session()
    s.add_messages([Message("user", "first report")])
    assert found(manager, "report") == ["first report"]
    s.add_messages([Message("assistant", "second report")])
    assert sorted(found(manager, "report")) == ["first report", "second report"]


def test_a_message_added_and_popped_before_any_search_is_never_found(manager: Manager, db: Path):
    s = manager.new_session()
    (kept,) = s.add_messages([Message("user", "visible note")])
    assert found(manager, "note") == ["visible note"]  # the mark is now at the kept message
    s.add_messages([Message("assistant", "secret note")])
    s.pop_message()  # deletes a row the index never held
    (later,) = s.add_messages([Message("user", "later note")])
    assert sorted(found(manager, "note")) == ["later note", "visible note"]
    assert found(manager, "secret") == []
    assert indexed_rows(db) == [kept, later]


def test_a_hand_edit_of_a_row_not_yet_indexed_leaves_it_to_the_next_search(
    manager: Manager, db: Path
):
    s = manager.new_session()
    (mid,) = s.add_messages([Message("user", "first wording")])
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("UPDATE messages SET content = 'second wording' WHERE id = ?", (mid,))
    conn.close()
    assert indexed_rows(db) == []
    assert found(manager, "wording") == ["second wording"]


def test_a_stray_index_row_above_the_mark_does_not_break_the_catch_up(manager: Manager, db: Path):
    s = manager.new_session()
    (mid,) = s.add_messages([Message("user", "real text")])
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("INSERT INTO messages_fts (rowid, body) VALUES (?, 'stray text')", (mid,))
    conn.close()
    assert found(manager, "text") == ["real text"]
    assert found(manager, "stray") == []


@pytest.mark.sqlite_only
def test_catch_up_index_returns_how_many_messages_it_indexed(manager: Manager):
    add(manager, "a", "b", "c")
    assert manager.catch_up_index() == 3
    assert manager.catch_up_index() == 0


def test_a_message_added_through_another_manager_is_found(db: Path):
    with Manager(db) as writer, Manager(db) as reader:
        s = writer.new_session()
        s.add_messages([Message("user", "written by one process")])
        assert found(reader, "process") == ["written by one process"]
        s.add_messages([Message("assistant", "another process reads it")])
        assert sorted(found(reader, "process")) == [
            "another process reads it",
            "written by one process",
        ]
        assert found(writer, "reads") == ["another process reads it"]


def test_a_search_with_nothing_to_index_does_not_wait_for_the_write_lock(
    manager: Manager, db: Path
):
    add(manager, "ready")
    assert found(manager, "ready") == ["ready"]
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process mid-write
    try:
        assert found(manager, "ready") == ["ready"]
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_an_imported_session_whose_ids_lie_below_the_mark_is_found(manager: Manager, db: Path):
    sid = add(manager, "restore the backup", "backup restored")
    assert len(manager.search("backup")) == 2
    snap = manager.snapshot(sid)
    manager.delete_session(sid)
    assert found(manager, "backup") == []
    manager.restore(snap)
    # Ids 1 and 2 were free, so they were kept: below the mark, where no catch-up looks.
    assert indexed_upto(db) == 2
    hits = manager.search("backup")
    assert sorted((h.message_id, plain_snippet(h.snippet)) for h in hits) == [
        (1, "restore the backup"),
        (2, "backup restored"),
    ]


def test_an_import_straddling_the_mark_is_indexed_exactly_once(manager: Manager, db: Path):
    sid = add(manager, "alpha report", "beta report")
    assert len(manager.search("report")) == 2  # the mark is at 2
    snap = manager.snapshot(sid)
    manager.delete_session(sid)
    snap.records[1].id = 7  # one id below the mark, one above it
    manager.restore(snap)
    assert indexed_rows(db) == [1]  # the import indexed its row below the mark only
    assert sorted(found(manager, "report")) == ["alpha report", "beta report"]
    assert indexed_rows(db) == [1, 7]


# -- migration --------------------------------------------------------------------------


def create_at_version(db: Path, version: int) -> sqlite3.Connection:
    """A database built by the first ``version`` migrations only, as an older harness9 left it."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
        "applied_at REAL NOT NULL)"
    )
    for number, (name, sql) in enumerate(MIGRATIONS[:version], start=1):
        conn.executescript(sql)
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 0)", (number, name))
    conn.execute(f"PRAGMA user_version = {version}")
    return conn


def test_an_old_database_is_indexed_when_opened(db: Path):
    conn = create_at_version(db, 3)
    sid = "6f1c3a52-1b9e-4b52-9a86-0f3d5b3f9c11"
    conn.execute(
        "INSERT INTO sessions (id, created_at, updated_at, title) VALUES (?, 1, 1, 'T')", (sid,)
    )
    conn.executemany(
        "INSERT INTO messages (session_id, role, content, tool_calls, created_at) "
        "VALUES (?, ?, ?, ?, 1)",
        [
            (sid, "user", "migrate the legacy database", None),
            (
                sid,
                "assistant",
                "",
                '[{"id": "c1", "name": "bash", "arguments": "{\\"command\\": \\"alembic upgrade\\"}"}]',
            ),
        ],
    )
    assert (
        conn.execute("SELECT name FROM sqlite_master WHERE name = 'messages_fts'").fetchone()
        is None
    )
    conn.close()
    with Manager(db) as m:
        assert found(m, "legacy") == ["migrate the legacy database"]
        assert found(m, "alembic") == ["bash alembic upgrade"]
        assert m.search("legacy")[0].title == "T"
        # and the triggers created by the migration keep it in sync from then on
        m.open_session(sid).pop_message()
        assert found(m, "alembic") == []


def test_a_database_indexed_by_migration_4_keeps_its_index_and_indexes_lazily_after(db: Path):
    conn = create_at_version(db, 4)
    sid = "6f1c3a52-1b9e-4b52-9a86-0f3d5b3f9c11"
    conn.execute(
        "INSERT INTO sessions (id, created_at, updated_at, title) VALUES (?, 1, 1, 'T')", (sid,)
    )
    conn.executemany(
        "INSERT INTO messages (session_id, role, content, created_at) VALUES (?, 'user', ?, 1)",
        [(sid, "legacy one"), (sid, "legacy two")],
    )
    conn.close()
    with Manager(db) as m:
        assert (indexed_rows(db), indexed_upto(db)) == ([1, 2], 2)
        (new,) = m.open_session(sid).add_messages([Message("user", "legacy three")])
        assert indexed_rows(db) == [1, 2]  # migration 5 dropped the insert trigger
        assert sorted(found(m, "legacy")) == ["legacy one", "legacy three", "legacy two"]
    assert indexed_rows(db) == [1, 2, new]


def test_the_search_migration_is_recorded_as_version_4(db: Path):
    create_at_version(db, 3).close()
    Manager(db).close()
    conn = sqlite3.connect(db)
    assert conn.execute(
        "SELECT version, name FROM schema_migrations WHERE version = 4"
    ).fetchone() == (
        4,
        "create_messages_fts",
    )


class _SQLiteWithoutFTS5:
    """Stands in for a Python whose SQLite lacks FTS5: none of ours does, so it cannot be real."""

    def execute(self, sql: str):
        assert sql == "PRAGMA compile_options"
        return iter([("ENABLE_JSON1",), ("THREADSAFE=1",)])


def test_a_sqlite_without_fts5_is_refused_with_one_line():
    with pytest.raises(SchemaError) as info:
        migrate(_SQLiteWithoutFTS5())  # type: ignore[arg-type]
    assert str(info.value) == NO_FTS5
    assert "\n" not in NO_FTS5 and "FTS5" in NO_FTS5


def test_a_store_error_is_not_mistaken_for_a_query_error(manager: Manager):
    manager.close()
    with pytest.raises(StoreError, match="closed"):
        manager.search("x")


def test_hits_are_numbered_within_their_session(manager: SessionStore):
    other = manager.new_session()
    other.add_messages([Message("user", "a"), Message("assistant", "b"), Message("user", "c")])
    s = manager.new_session()
    ids = s.add_messages([Message("user", "first"), Message("assistant", "rollout done")])
    (hit,) = manager.number_hits(manager.search("rollout"))
    assert (hit.session_id, hit.message_id, hit.number) == (s.session_id, ids[1], 2)
    assert manager.search("rollout")[0].number == 0  # until numbered
