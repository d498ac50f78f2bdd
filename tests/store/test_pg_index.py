"""The PostgreSQL store's search documents: a chat's writes are indexed as they are written,
bulk writes at the next search, and a search is exact whichever state a row is in (issue 23).
"""

from __future__ import annotations

import json
import threading
import time

import psycopg
import pytest

from harness9.schema import Message, ToolCall
from harness9.store.export import SessionSnapshot
from harness9.store.pg_index import EAGER_ROWS
from harness9.store.pg_migrations import MIGRATIONS
from harness9.store.postgres import PostgresManager
from harness9.store.session import SessionInfo, StoredMessage
from tests.support.history import user

SID = "0b6f3c9e-2d4a-4e8b-9c1d-7a5e3f2b1c0d"
READ_ONLY = "?options=-c%20default_transaction_read_only%3Don"


def unindexed_ids(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT id FROM harness9.messages WHERE search IS NULL ORDER BY id"
        ).fetchall()
    return [r[0] for r in rows]


def documents(url: str, ids: list[int]) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT search::text FROM harness9.messages WHERE id = ANY(%s) ORDER BY id", (ids,)
        ).fetchall()
    return [r[0] for r in rows]


VARIED = [
    user("fix the parser, then compile foo.py again"),
    Message("assistant", "Café naïve: the parser is fine"),
    Message(
        "assistant",
        "reading it",
        [ToolCall("c1", "read_file", json.dumps({"path": "src/parser.c", "limit": 40}))],
    ),
    Message("tool", "int main(void) { return compile(); }", tool_call_id="c1"),
    Message("assistant", "", [ToolCall("c2", "bash", "{not json")]),
    user("日本語 and the exact phrase here"),
]


def test_a_chat_sized_write_is_indexed_as_it_is_written(pg_url):
    with PostgresManager(pg_url) as m:
        s = m.new_session()
        s.add_messages([user("one reply")])
        s.add_messages([Message("tool", f"result {k}", tool_call_id=f"c{k}") for k in range(20)])
        s.add_messages([user(f"up to the limit {k}") for k in range(EAGER_ROWS)])
        assert m.unindexed_count() == 0
    assert unindexed_ids(pg_url) == []


def test_a_batch_is_written_without_documents_and_the_next_search_indexes_it(pg_url):
    with PostgresManager(pg_url) as m:
        ids = m.new_session().add_messages([user(f"walrus {k}") for k in range(EAGER_ROWS + 1)])
        assert unindexed_ids(pg_url) == ids
        assert m.unindexed_count() == EAGER_ROWS + 1
        assert len(m.search("walrus", limit=0)) == EAGER_ROWS + 1
        assert m.unindexed_count() == 0
    assert unindexed_ids(pg_url) == []


def test_an_import_is_written_without_documents_and_found_by_the_next_search(pg_url):
    n = EAGER_ROWS * 3
    records = [StoredMessage(k + 1, user(f"narwhal {k}"), 1000.0 + k) for k in range(n)]
    snap = SessionSnapshot(SessionInfo("", 1000.0, 2000.0, n, "narwhal"), records, [], [])
    with PostgresManager(pg_url) as m:
        sid = m.restore(snap, new_id=True)
        assert m.unindexed_count() == n
        hits = m.search("narwhal", limit=0)
    assert {h.session_id for h in hits} == {sid} and len(hits) == n
    assert unindexed_ids(pg_url) == []


def test_a_document_computed_later_is_the_one_computed_as_it_was_written(pg_url):
    with PostgresManager(pg_url) as m:
        s = m.new_session()
        at_once = [s.add_messages([msg])[0] for msg in VARIED]
        padding = [user(f"padding {k}") for k in range(EAGER_ROWS)]
        later = s.add_messages(VARIED + padding)[: len(VARIED)]
        assert unindexed_ids(pg_url)[: len(VARIED)] == later
        m.catch_up_index()
    assert documents(pg_url, later) == documents(pg_url, at_once)
    assert documents(pg_url, at_once)[1] == "'cafe':1 'fine':6 'is':5 'naive':2 'parser':4 'the':3"


@pytest.mark.parametrize("query", ["parser compile", '"exact phrase"', "pars*", "read_file 40"])
def test_rows_not_yet_indexed_are_found_and_ranked_as_indexed_ones(pg_url, query):
    # A role that may not write (here: read-only transactions) cannot catch the index up,
    # so its search reads those rows through their text.
    with PostgresManager(pg_url) as m, PostgresManager(pg_url + READ_ONLY) as reader:
        s = m.new_session()
        s.add_messages(VARIED)  # indexed at once
        s.add_messages(VARIED * (EAGER_ROWS // len(VARIED) + 1))  # left to the next search
        backlog = m.unindexed_count()
        assert backlog > EAGER_ROWS
        unindexed = reader.search(query, limit=0)
        assert reader.catch_up_index() == 0 and m.unindexed_count() == backlog
        indexed = m.search(query, limit=0)
        assert m.unindexed_count() == 0
    assert unindexed == indexed
    assert len(indexed) > len(VARIED) // 2  # the query matched rows of both kinds


def test_the_catch_up_reports_progress_and_indexes_each_message_once(pg_url):
    n = 2_000
    with PostgresManager(pg_url) as m:
        m.new_session().add_messages([user(f"okapi {k}") for k in range(n)])
        calls: list[tuple[int, int]] = []
        assert m.catch_up_index(lambda done, total: calls.append((done, total))) == n
        assert m.catch_up_index() == 0
    assert calls[0] == (0, n) and calls[-1] == (n, n)
    assert len(calls) > 2  # in steps
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_two_searches_catching_up_at_once_index_each_message_once(pg_url):
    n = 3_000
    with PostgresManager(pg_url) as m:
        m.new_session().add_messages([user(f"tapir {k}") for k in range(n)])
    barrier = threading.Barrier(2)
    indexed: list[int] = []
    found: list[int] = []

    def search() -> None:
        with PostgresManager(pg_url) as mine:
            barrier.wait()
            indexed.append(mine.catch_up_index())
            found.append(len(mine.search("tapir", limit=0)))

    threads = [threading.Thread(target=search) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sum(indexed) == n and found == [n, n]


def test_a_search_during_a_bulk_write_neither_waits_for_it_nor_sees_it(pg_url):
    with PostgresManager(pg_url) as m, psycopg.connect(pg_url) as writer:
        m.new_session().add_messages([user(f"ibex {k}") for k in range(EAGER_ROWS + 1)])
        sid = m.new_session().session_id
        writer.execute(
            "INSERT INTO harness9.messages (session_id, role, content, created_at) "
            "SELECT %s, 'user', 'ibex held', 0 FROM generate_series(1, 500)",
            (sid,),
        )  # uncommitted: a bulk write still running on another machine
        t0 = time.monotonic()
        hits = m.search("ibex", limit=0)
        assert time.monotonic() - t0 < 5
        assert len(hits) == EAGER_ROWS + 1
        writer.commit()
        assert len(m.search("ibex", limit=0)) == EAGER_ROWS + 501


def test_a_parallel_plan_computes_search_documents(pg_url):
    # search_body's EXCEPTION blocks cannot run in a parallel worker: before the functions
    # were PARALLEL RESTRICTED, a parallel scan computing documents failed.
    calls = [ToolCall("c", "bash", json.dumps({"command": "make"}))]
    with PostgresManager(pg_url) as m:
        m.new_session().add_messages(
            [Message("assistant", f"step {k}", calls) for k in range(3000)]
        )
    with psycopg.connect(pg_url) as conn:
        for setting in (
            "parallel_setup_cost",
            "parallel_tuple_cost",
            "min_parallel_table_scan_size",
        ):
            conn.execute(f"SET {setting} = 0")
        (count,) = conn.execute(
            "SELECT count(*) FROM harness9.messages "
            "WHERE harness9.search_document(content, tool_calls) @@ 'make'::tsquery"
        ).fetchone()
    assert count == 3000


def test_an_upgraded_database_keeps_its_documents_and_indexes_bulk_writes_later(pg_fresh_url):
    with psycopg.connect(pg_fresh_url, autocommit=True) as conn, conn.transaction():
        conn.execute("CREATE SCHEMA harness9")
        conn.execute(
            "CREATE TABLE harness9.schema_migrations (version integer PRIMARY KEY, "
            "name text NOT NULL, applied_at double precision NOT NULL)"
        )
        before = [name for name, _ in MIGRATIONS].index("index_bulk_writes_at_the_next_search")
        for number, (name, sql) in enumerate(MIGRATIONS[:before], start=1):
            conn.execute(sql.encode())
            conn.execute(
                "INSERT INTO harness9.schema_migrations VALUES (%s, %s, 0)", (number, name)
            )
        conn.execute(
            "INSERT INTO harness9.sessions (id, created_at, updated_at) VALUES (%s, 0, 0)", (SID,)
        )
        conn.execute(
            "INSERT INTO harness9.messages (session_id, role, content, created_at) "
            "SELECT %s, 'user', 'old gnu ' || k, 0 FROM generate_series(1, 500) AS k",
            (SID,),
        )  # the old trigger computes every document
    with PostgresManager(pg_fresh_url) as m:
        assert m.unindexed_count() == 0
        ids = m.open_session(SID).add_messages([user(f"new gnu {k}") for k in range(500)])
        assert unindexed_ids(pg_fresh_url) == ids
        assert len(m.search("gnu", limit=0)) == 1000


@pytest.mark.parametrize("size", [5, EAGER_ROWS + 5])
def test_a_batch_with_a_lone_surrogate_or_a_nul_is_stored_and_found(pg_url, size):
    msgs = [user(f"quokka {k}") for k in range(size - 2)]
    msgs += [user("quokka bad \ud800 char"), user("quokka nul\x00byte")]
    with PostgresManager(pg_url) as m:
        s = m.new_session()
        s.add_messages(msgs)
        stored = [msg.content for msg in s.get_messages()]
        assert stored[-2:] == ["quokka bad \ufffd char", "quokka nul\ufffdbyte"]
        assert len(m.search("quokka", limit=0)) == size
        assert len(m.search("byte", limit=0)) == 1


def test_a_fork_of_a_batch_not_yet_indexed_finds_its_messages_before_and_after_indexing(
    pg_url,
):
    n = EAGER_ROWS * 2
    with PostgresManager(pg_url) as m, PostgresManager(pg_url + READ_ONLY) as reader:
        origin = m.new_session()
        origin.add_messages([user(f"marmot {k}") for k in range(n)])
        fork = m.fork_session(origin.session_id, at=n // 2)
        before = reader.search("marmot", limit=0, session_id=fork)
        assert m.unindexed_count() == n
        after = m.search("marmot", limit=0, session_id=fork)
    assert before == after
    assert [h.session_id for h in after] == [fork] * (n // 2)
