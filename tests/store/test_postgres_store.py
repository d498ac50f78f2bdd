"""What only the PostgreSQL store has to show: selection, migrations, concurrency, blobs, moving.

The behaviour both stores share is specified once and run on both (test_session_behaviour,
test_store, test_search, test_retention, test_export_import); this file covers the server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from harness9.cli import app
from harness9.config import use_database_url
from harness9.schema import Message, TodoItem, ToolCall
from harness9.store import Manager, SessionNotFoundError, StoreError
from harness9.store.backend import open_url
from harness9.store.export import SessionSnapshot
from harness9.store.offloads import OffloadNotFoundError
from harness9.store.pg_migrations import ADVISORY_LOCK_KEY, MIGRATIONS, SCHEMA_VERSION
from harness9.store.postgres import PostgresManager
from harness9.store.session import Checkpoint, SessionInfo, StoredMessage
from harness9.tools.offload import OffloadConfig, OffloadStore
from tests.support.cli import cli_env, run_cli, run_python, wait_until
from tests.support.history import user

runner = CliRunner()


def cli(*args: str, input: str | None = None):
    result = runner.invoke(app, list(args), input=input)
    use_database_url(None)  # the flag is per process; CliRunner shares this one
    return result


# -- selection -----------------------------------------------------------------------------


def test_the_environment_url_selects_postgresql(pg_url, monkeypatch, harness9_home):
    monkeypatch.setenv("HARNESS9_DATABASE_URL", pg_url)
    with PostgresManager(pg_url) as m:
        m.new_session().add_messages([user("kept on the server")])
    result = cli("sessions", "list", "--json")
    assert result.exit_code == 0, result.stderr
    assert [s["title"] for s in json.loads(result.stdout)] == ["kept on the server"]
    assert not (harness9_home / "sessions.db").exists()


def test_the_flag_selects_postgresql_on_any_command_group(pg_url):
    with PostgresManager(pg_url) as m:
        m.new_session().add_messages([user("flagged")])
    for argv in (
        ["--database-url", pg_url, "sessions", "list", "--json"],
        ["sessions", "--database-url", pg_url, "list", "--json"],
    ):
        result = cli(*argv)
        assert result.exit_code == 0, result.stderr
        assert [s["title"] for s in json.loads(result.stdout)] == ["flagged"]


def test_database_url_in_config_toml_selects_postgresql(pg_url, harness9_home):
    harness9_home.mkdir()
    (harness9_home / "config.toml").write_text(f'database_url = "{pg_url}"\n')
    with PostgresManager(pg_url) as m:
        m.new_session().add_messages([user("configured")])
    result = cli("sessions", "list", "--json")
    assert [s["title"] for s in json.loads(result.stdout)] == ["configured"]


def test_nothing_set_means_the_sqlite_file(harness9_home):
    result = cli("sessions", "import", "-", input="")
    assert result.exit_code != 0  # (not JSON) -- but it opened nothing on a server
    with Manager(harness9_home / "sessions.db") as m:
        m.new_session().add_messages([user("local")])
    listed = cli("sessions", "list", "--json")
    assert [s["title"] for s in json.loads(listed.stdout)] == ["local"]


def test_a_url_that_is_not_postgresql_is_a_one_line_usage_error():
    result = cli("--database-url", "mysql://x/y", "sessions", "list")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "harness9: --database-url must be a postgresql:// URL, got 'mysql://x/y'"
    ]


def test_an_unreachable_server_is_one_line_without_the_password(monkeypatch):
    from tests.support.pg_server import free_port

    url = f"postgresql://alice:s3cret@127.0.0.1:{free_port()}/db"
    monkeypatch.setenv("HARNESS9_DATABASE_URL", url)
    result = cli("sessions", "list")
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("harness9: cannot connect to session database postgresql://alice:***@")
    assert "s3cret" not in result.stderr


def test_a_bad_database_url_in_config_toml_is_one_line_naming_the_key(harness9_home):
    harness9_home.mkdir()
    (harness9_home / "config.toml").write_text('database_url = "sqlite:///x.db"\n')
    result = cli("sessions", "list")
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"harness9: database_url in {harness9_home / 'config.toml'} must be a postgresql:// "
        "URL, got 'sqlite:///x.db'"
    ]


def test_migrate_refuses_to_copy_a_store_onto_itself(harness9_home):
    with Manager(harness9_home / "sessions.db") as m:
        m.new_session().add_messages([user("here")])
    result = cli("sessions", "migrate", "--to", str(harness9_home / "." / "sessions.db"))
    assert result.exit_code == 2
    assert "already in" in result.stderr and result.stderr.count("\n") == 1


def test_sessions_list_on_sqlite_does_not_import_psycopg(harness9_home):
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from harness9.cli import app\n"
        "r = CliRunner().invoke(app, ['sessions', 'list'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print('psycopg' in sys.modules)\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# -- migrations ----------------------------------------------------------------------------


def test_migrations_are_recorded_by_name_in_their_own_schema(pg_fresh_url):
    PostgresManager(pg_fresh_url).close()
    with psycopg.connect(pg_fresh_url) as conn:
        rows = conn.execute(
            "SELECT version, name FROM harness9.schema_migrations ORDER BY version"
        ).fetchall()
        public = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
    assert rows == [(i, name) for i, (name, _) in enumerate(MIGRATIONS, start=1)]
    assert len(rows) == SCHEMA_VERSION
    assert public == (0,)  # nothing of ours outside the harness9 schema


def test_several_first_connections_at_once_migrate_exactly_once(pg_fresh_url):
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            PostgresManager(pg_fresh_url).close()
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with psycopg.connect(pg_fresh_url) as conn:
        (count,) = conn.execute("SELECT count(*) FROM harness9.schema_migrations").fetchone()
    assert count == SCHEMA_VERSION


def test_a_migration_waits_for_the_advisory_lock(pg_fresh_url):
    holder = psycopg.connect(pg_fresh_url)
    holder.execute("SELECT pg_advisory_lock(%s)", (ADVISORY_LOCK_KEY,))
    opened = threading.Event()
    t = threading.Thread(target=lambda: (PostgresManager(pg_fresh_url).close(), opened.set()))
    t.start()
    assert not opened.wait(0.5)  # queued behind the lock, not migrating alongside
    holder.execute("SELECT pg_advisory_unlock(%s)", (ADVISORY_LOCK_KEY,))
    t.join(10)
    holder.close()
    assert opened.is_set()


def test_a_newer_schema_is_refused_with_one_line(pg_fresh_url):
    PostgresManager(pg_fresh_url).close()
    with psycopg.connect(pg_fresh_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO harness9.schema_migrations VALUES (%s, 'from the future', 0)",
            (SCHEMA_VERSION + 1,),
        )
    with pytest.raises(StoreError, match="knows only up to") as info:
        PostgresManager(pg_fresh_url)
    assert "\n" not in str(info.value)


# -- concurrency -----------------------------------------------------------------------------


def test_two_writers_on_one_session_keep_both_appends_in_commit_order(pg_url):
    with PostgresManager(pg_url) as m:
        sid = m.new_session().session_id
    barrier = threading.Barrier(2)

    def write(tag: str) -> None:
        with PostgresManager(pg_url) as mine:
            s = mine.open_session(sid)
            barrier.wait()
            for i in range(50):
                s.add_messages([user(f"{tag}{i}a"), user(f"{tag}{i}b")])

    threads = [threading.Thread(target=write, args=(tag,)) for tag in "xy"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with PostgresManager(pg_url) as m:
        texts = [msg.content for msg in m.open_session(sid).get_messages()]
        info = m.session_info(sid)
    assert len(texts) == 200 and info.message_count == 200
    for tag in "xy":
        mine = [t for t in texts if t[0] == tag]
        assert mine == [f"{tag}{i}{part}" for i in range(50) for part in "ab"]
    # Each batch is contiguous: nothing of the other writer lands inside it.
    for k in range(0, 200, 2):
        assert texts[k][:-1] == texts[k + 1][:-1]


def waits_for_a_lock(url: str) -> bool:
    """Whether a harness9 connection to ``url``'s database is waiting for a lock now
    (a fresh look: each statement outside a transaction reads pg_stat_activity anew)."""
    with psycopg.connect(url, autocommit=True) as watcher:
        row = watcher.execute(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'harness9' AND wait_event_type = 'Lock'"
        ).fetchone()
    return row is not None


def test_a_writer_queued_behind_another_gets_the_later_ids(pg_url):
    with PostgresManager(pg_url) as m:
        sid = m.new_session().session_id
    blocker = psycopg.connect(pg_url)
    blocker.execute("BEGIN")
    blocker.execute("UPDATE harness9.sessions SET title = title WHERE id = %s", (sid,))
    result: list[int] = []
    with PostgresManager(pg_url) as m:
        t = threading.Thread(
            target=lambda: result.extend(m.open_session(sid).add_messages([user("late")]))
        )
        t.start()
        wait_until(lambda: waits_for_a_lock(pg_url), "the writer queues behind the blocker")
        with PostgresManager(pg_url) as other:
            # A writer to another session is not held up by this one.
            (other_id,) = other.new_session().add_messages([user("elsewhere")])
        blocker.execute("COMMIT")
        t.join(10)
    blocker.close()
    assert result and result[0] > other_id


def test_concurrent_pops_return_each_message_once(pg_url):
    with PostgresManager(pg_url) as m:
        s = m.new_session()
        s.add_messages([user(str(i)) for i in range(40)])
        sid = s.session_id
    popped: list[str] = []
    lock = threading.Lock()

    def pop_some() -> None:
        with PostgresManager(pg_url) as mine:
            session = mine.open_session(sid)
            for _ in range(10):
                msg = session.pop_message()
                with lock:
                    popped.append(msg.content if msg else "<none>")

    threads = [threading.Thread(target=pop_some) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(popped, key=int) == [str(i) for i in range(40)]
    with PostgresManager(pg_url) as m:
        assert m.session_info(sid).message_count == 0


def test_delete_older_than_skips_a_session_written_while_it_waited(pg_url):
    with PostgresManager(pg_url) as m:
        s = m.new_session()
        s.add_messages([user("old")])
        sid = s.session_id
    cutoff = time.time() + 60  # the session is "old" by this cutoff...
    writer = psycopg.connect(pg_url)
    writer.execute("BEGIN")
    # ...but a chat is writing to it right now (newer than the cutoff once committed).
    writer.execute("UPDATE harness9.sessions SET updated_at = %s WHERE id = %s", (cutoff + 1, sid))
    deleted: list[str] = []
    with PostgresManager(pg_url) as m:
        t = threading.Thread(
            target=lambda: deleted.extend(m.delete_sessions([sid], updated_before=cutoff))
        )
        t.start()
        wait_until(lambda: waits_for_a_lock(pg_url), "the delete waits for the writer")
        writer.execute("COMMIT")
        t.join(10)
        assert deleted == []
        assert m.session_info(sid).id == sid
    writer.close()


def test_retention_skips_a_session_written_while_it_waited(pg_url):
    with PostgresManager(pg_url) as m:
        sid = m.new_session().session_id
    cutoff = time.time() + 60
    writer = psycopg.connect(pg_url)
    writer.execute("BEGIN")
    writer.execute("UPDATE harness9.sessions SET updated_at = %s WHERE id = %s", (cutoff + 1, sid))
    deleted: list[str] = []
    with PostgresManager(pg_url) as m:
        t = threading.Thread(target=lambda: deleted.extend(m.delete_sessions_older_than(cutoff)))
        t.start()
        wait_until(lambda: waits_for_a_lock(pg_url), "the delete waits for the writer")
        writer.execute("COMMIT")
        t.join(10)
        assert deleted == [] and [i.id for i in m.list_sessions()] == [sid]
    writer.close()


# -- stored rows ----------------------------------------------------------------------------------


def test_a_corrupt_tool_calls_row_is_skipped_and_reported(pg_url):
    with PostgresManager(pg_url) as m:
        s = m.new_session()
        ids = s.add_messages(
            [user("fine"), Message("assistant", "", [ToolCall("c", "bash", "{}")])]
        )
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE harness9.messages SET tool_calls = '{not json' WHERE id = %s", (ids[1],)
            )
        assert s.get_messages() == [user("fine")]
        assert [(r.id, r.reason) for r in s.corrupt_rows] == [
            (ids[1], "tool_calls is not valid JSON")
        ]
        with pytest.raises(StoreError, match="corrupt"):
            s.pop_message()
        assert [r.id for r in s.get_records()] == [ids[0]]  # the pop kept it
        assert m.search("fine")[0].message_id == ids[0]


@pytest.fixture
def refuse_boom(pg_url):
    """A trigger that fails any insert of the text "boom": a write failing half-way."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION harness9.boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.content = 'boom' THEN RAISE EXCEPTION 'boom refused'; END IF; "
            "RETURN NEW; END $$"
        )
        for table in ("messages", "todos"):
            conn.execute(
                f"CREATE TRIGGER boom BEFORE INSERT ON harness9.{table} "
                "FOR EACH ROW EXECUTE FUNCTION harness9.boom()"
            )
    yield
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP FUNCTION harness9.boom() CASCADE")


@pytest.mark.parametrize("batch", [1, 3, 40])
def test_a_write_failing_half_way_leaves_nothing_behind(pg_url, refuse_boom, batch):
    with PostgresManager(pg_url) as m:
        s = m.new_session()
        s.add_messages([user("kept")])
        before = m.session_info(s.session_id)
        msgs = [Message("assistant", f"m{i}") for i in range(batch - 1)] + [user("boom")]
        with pytest.raises(StoreError, match="boom refused"):
            s.add_messages(msgs)
        assert s.get_messages() == [user("kept")]
        assert m.session_info(s.session_id) == before  # count, title and time untouched
        s.add_messages([user("still writable")])
        assert len(s.get_messages()) == 2


def test_a_failed_todo_save_keeps_the_old_list(pg_url, refuse_boom):
    from harness9.schema import TodoItem

    with PostgresManager(pg_url) as m:
        s = m.new_session()
        s.save_todos([TodoItem("old")])
        with pytest.raises(StoreError):
            s.save_todos([TodoItem("new"), TodoItem("boom")])
        assert s.get_todos() == [TodoItem("old")]


def test_writing_to_a_session_deleted_elsewhere_is_not_found(pg_url):
    with PostgresManager(pg_url) as a, PostgresManager(pg_url) as b:
        s = a.new_session()
        b.delete_session(s.session_id)
        with pytest.raises(SessionNotFoundError):
            s.add_messages([user("too late")])


# -- offloaded outputs live in the database -----------------------------------------------------


def test_an_offloaded_output_is_recalled_from_another_machine(pg_url, tmp_path):
    big = "".join(f"line {i}\n" for i in range(5000))
    with PostgresManager(pg_url) as here:
        sid = here.new_session().session_id
        store = OffloadStore(OffloadConfig(store_dir=tmp_path / "unused"), here.blob_store())
        result = store.maybe_offload(sid, "bash", '{"command": "seq"}', big)
        assert result is not None and result.file_path is None
    assert not (tmp_path / "unused").exists()  # nothing on this machine's disk
    with PostgresManager(pg_url) as there:
        elsewhere = OffloadStore(OffloadConfig(store_dir=tmp_path / "other"), there.blob_store())
        assert elsewhere.recall(sid, result.id, limit=8000) == big[:8000] + (
            f"\n\n[truncated: showing characters 0–8000 of {len(big)}; "
            "call offload_recall with offset=8000 to continue]"
        )
        assert elsewhere.recall(sid, result.id, offset=len(big) - 10) == big[-10:] + (
            f"\n\n[truncated: showing characters {len(big) - 10}–{len(big)} of {len(big)}]"
        )


def test_a_streamed_offload_spans_several_chunks_and_reads_back_whole(pg_url, tmp_path):
    chunk = b"0123456789abcdef" * 65536  # 1 MiB
    with PostgresManager(pg_url) as m:
        sid = m.new_session().session_id
        store = OffloadStore(OffloadConfig(store_dir=tmp_path), m.blob_store())
        writer = store.open_stream(sid, "bash", "{}")
        for _ in range(3):
            writer.write(chunk)
        result = writer.finish()
        stream = m.blob_store().read(sid, result.id)
        assert stream is not None and stream.read() == chunk * 3


def test_deleting_a_session_deletes_its_offloaded_outputs(pg_url, tmp_path):
    with PostgresManager(pg_url) as m:
        sid = m.new_session().session_id
        store = OffloadStore(OffloadConfig(store_dir=tmp_path), m.blob_store())
        oid = store.maybe_offload(sid, "bash", "{}", "x" * 20000).id
        m.delete_session(sid)
        with pytest.raises(OffloadNotFoundError):
            store.recall(sid, oid)


def test_stale_offloads_are_cleaned_by_age(pg_url, tmp_path):
    with PostgresManager(pg_url) as m:
        old, young = m.new_session().session_id, m.new_session().session_id
        blobs = m.blob_store()
        blobs.put(old, "ofl_000000000001", b"old")
        blobs.put(young, "ofl_000000000002", b"young")
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE harness9.blobs SET written_at = written_at - 8 * 86400 "
                "WHERE session_id = %s",
                (old,),
            )
        store = OffloadStore(OffloadConfig(store_dir=tmp_path), blobs)
        assert store.clean_stale() == [old]
        assert blobs.read(old, "ofl_000000000001") is None
        assert blobs.names(young) == ["ofl_000000000002"]


# -- moving a history --------------------------------------------------------------------------


def test_sessions_migrate_moves_a_whole_sqlite_history_with_its_offloads(pg_url, harness9_home):
    with Manager(harness9_home / "sessions.db") as m:
        sids = []
        for i in range(3):
            s = m.new_session()
            s.add_messages([user(f"session {i} parser"), Message("assistant", f"answer {i}")])
            sids.append(s.session_id)
    offloads = harness9_home / "offload_store" / sids[0]
    offloads.mkdir(parents=True)
    (offloads / "ofl_0123456789ab.txt").write_text("the full output")
    before = {sid: cli("sessions", "export", sid, "-f", "json").stdout for sid in sids}

    result = cli("sessions", "migrate", "--to", pg_url)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip().startswith("Copied 3 sessions (6 messages, 1 offloaded output)")
    again = cli("sessions", "migrate", "--to", pg_url)  # an interrupted run is just re-run
    assert "Copied 0 sessions" in again.stdout and "3 sessions already there" in again.stdout

    with PostgresManager(pg_url) as pg:
        assert sorted(i.id for i in pg.list_sessions()) == sorted(sids)
        assert [h.session_id for h in pg.search("parser", limit=10)] != []
        store = OffloadStore(OffloadConfig(store_dir=harness9_home / "x"), pg.blob_store())
        assert store.recall(sids[0], "ofl_0123456789ab") == "the full output"
    after = {
        sid: cli("--database-url", pg_url, "sessions", "export", sid, "-f", "json").stdout
        for sid in sids
    }
    assert after == before  # same ids, times, titles: the same document


def test_export_from_sqlite_and_import_into_postgresql_through_a_pipe(pg_url, harness9_home):
    with Manager(harness9_home / "sessions.db") as m:
        s = m.new_session()
        s.add_messages(
            [user("moved by pipe"), Message("assistant", "", [ToolCall("c1", "bash", "{}")])]
        )
        original = s.get_messages()
    exported = run_cli("sessions", "export", s.session_id, "-f", "json")
    assert exported.returncode == 0, exported.stderr
    imported = run_cli(
        "sessions", "import", "-", input=exported.stdout, env={"HARNESS9_DATABASE_URL": pg_url}
    )
    assert imported.returncode == 0, imported.stderr
    with PostgresManager(pg_url) as pg:
        assert pg.open_session(s.session_id).get_messages() == original


def test_a_postgresql_history_migrates_back_to_an_sqlite_file(pg_url, tmp_path):
    with PostgresManager(pg_url) as pg:
        s = pg.new_session()
        s.add_messages([user("round trip")])
    target = tmp_path / "back.db"
    result = cli("--database-url", pg_url, "sessions", "migrate", "--to", str(target))
    assert result.exit_code == 0, result.stderr
    with open_url(str(target)) as back:
        assert back.open_session(s.session_id).get_messages() == [user("round trip")]


# -- chat and compact on the server -------------------------------------------------------------


def test_chat_offloads_to_the_server_and_a_resume_elsewhere_recalls_it(
    llm_server, pg_url, monkeypatch, tmp_path
):
    monkeypatch.setenv("HARNESS9_DATABASE_URL", pg_url)
    chat = ["chat", "--model", "openai/test-model", "--api-base", llm_server.base_url, "--yes"]
    llm_server.reply_tool_calls([("call_1", "bash", '{"command": "seq 1 20000"}')])
    llm_server.reply_text("counted")
    first = cli(*chat, "--workdir", str(tmp_path), input="count to 20000\n")
    assert first.exit_code == 0, first.output
    with PostgresManager(pg_url) as pg:
        [info] = pg.list_sessions()
        tool_msg = next(m for m in pg.open_session(info.id).get_messages() if m.role == "tool")
    assert "[offload:ofl_" in tool_msg.content
    oid = tool_msg.content.split("[offload:", 1)[1].split("]", 1)[0]

    # Another machine: a different home, the same database.
    other_home = tmp_path / "other-machine"
    monkeypatch.setenv("HARNESS9_HOME", str(other_home))
    llm_server.reply_tool_calls([("call_2", "offload_recall", json.dumps({"id": oid}))])
    llm_server.reply_text("recalled")
    second = cli(*chat, "--workdir", str(tmp_path), "--resume", info.id[:8], input="show it\n")
    assert second.exit_code == 0, second.output
    recalled = [m for m in llm_server.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert recalled["content"].startswith("1\n2\n3\n4\n")
    assert not (other_home / "offload_store").exists()
    assert not (other_home / "sessions.db").exists()


def test_compact_dry_run_reads_a_session_on_the_server(llm_server, pg_url, monkeypatch):
    monkeypatch.setenv("HARNESS9_DATABASE_URL", pg_url)
    with PostgresManager(pg_url) as pg:
        s = pg.new_session()
        s.add_messages([user("question " * 50), Message("assistant", "answer " * 50)] * 4)
    result = cli(
        "compact", "--dry-run", "--json", "--force", "--model", "openai/test-model",
        "--api-base", llm_server.base_url, "--session", s.session_id[:8],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["session"] == s.session_id


# -- the query language --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tsquery"),
    [
        ("parser", "'parser'"),
        ("foo.py Café", "('foo' <-> 'py') & 'cafe'"),
        ('"exact phrase" pars*', "('exact' <-> 'phrase') & 'pars':*"),
        ("AND or NOT -x", "'and' & 'or' & 'not' & 'x'"),
        ('"it\'s" snake_case*', "('it' <-> 's') & ('snake' <-> 'case':*)"),
    ],
)
def test_a_query_becomes_the_same_words_the_index_holds(text, tsquery):
    from harness9.store.pg_search import parse, to_tsquery_text

    assert to_tsquery_text(parse(text)) == tsquery


@pytest.mark.parametrize("bad", ['"unbalanced', "   ", "*", '""'])
def test_bad_queries_give_the_sqlite_stores_errors(bad):
    from harness9.store.pg_search import parse
    from harness9.store.search import SearchQueryError, to_fts_query

    with pytest.raises(SearchQueryError) as sqlite_err:
        to_fts_query(bad)
    with pytest.raises(SearchQueryError) as pg_err:
        parse(bad)
    assert str(pg_err.value) == str(sqlite_err.value)


# -- CI must not pass with the server tests skipped ------------------------------------------


@pytest.mark.parametrize(("ci", "outcome"), [("true", "1 error"), ("", "1 skipped")])
def test_without_a_server_the_suite_skips_locally_and_fails_in_ci(tmp_path, ci, outcome):
    (tmp_path / "test_needs_pg.py").write_text("def test_it(pg_cluster):\n    pass\n")
    tests_dir = Path(__file__).resolve().parents[1]
    env = cli_env(HARNESS9_PG_BINDIR=str(tmp_path / "no-server"), CI=ci)
    env["PYTHONPATH"] = os.pathsep.join([str(tests_dir), env["PYTHONPATH"]])
    env.pop("HARNESS9_REQUIRE_POSTGRES", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "conftest", "test_needs_pg.py"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert outcome in done.stdout, done.stdout + done.stderr
    assert "holds no initdb" in done.stdout
    assert (done.returncode != 0) == (ci == "true")


def test_usage_totals_add_up_per_session_and_go_with_it(pg_url):
    from harness9.store.session import UsageTotals

    with PostgresManager(pg_url) as m:
        a, b = m.new_session().session_id, m.new_session().session_id
        m.add_usage(a, input_tokens=100, output_tokens=10, cached_tokens=40, cost_usd=0.5)
        m.add_usage(a, input_tokens=50, output_tokens=5)
        assert m.usage_totals(a) == UsageTotals(2, 150, 15, 40, 0.5, 1)
        assert m.usage_totals(b) == UsageTotals()
        assert m.usage_by_session() == {a: UsageTotals(2, 150, 15, 40, 0.5, 1)}
        m.add_usage(b, input_tokens=300, output_tokens=30, cost_usd=0.25, summary=True)
        assert m.usage_totals(b) == UsageTotals(1, 300, 30, 0, 0.25, 0, 1, 300, 30, 0.25, 0)
        m.delete_session(a)
        m.delete_session(b)
        assert m.usage_by_session() == {}


# -- import: one transaction, invisible until it commits, blocking no other writer -----------


def _big_export(n: int, sid: str) -> SessionSnapshot:
    records = [StoredMessage(k + 1, user(f"quagga message {k}"), 1000.0 + k) for k in range(n)]
    cp = Checkpoint(
        id=1,
        last_message_id=n // 2,
        summary="half of it",
        strategy="summary",
        tokens_before=9,
        tokens_after=3,
        messages_before=n,
        messages_after=n // 2,
        created_at=1000.0,
        state=[TodoItem("todos: none")],
    )
    return SessionSnapshot(SessionInfo(sid, 1000.0, 2000.0, n, "quagga"), records, [], [cp])


def test_an_import_held_half_way_is_invisible_and_blocks_no_other_writer(pg_url):
    """A PostgreSQL import is one transaction: MVCC hides it until it commits, and it
    locks only its own new rows, so (unlike SQLite's single writer) nobody waits on it.
    Here it is held half-way, after its 5,000 messages, by a lock the test takes on
    the table it writes last; then its connection is killed, and a retry succeeds."""
    sid = "3c1d2e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
    snap = _big_export(5_000, sid)
    with (
        PostgresManager(pg_url) as other,
        psycopg.connect(pg_url, autocommit=True) as blocker,
        psycopg.connect(pg_url, autocommit=True) as watcher,
    ):
        chat = other.new_session()
        blocker.execute("BEGIN")
        blocker.execute("LOCK TABLE harness9.compaction_data IN ACCESS EXCLUSIVE MODE")
        errors: list[BaseException] = []

        def run_import() -> None:
            try:
                with PostgresManager(pg_url) as m:
                    m.restore(snap)
            except BaseException as exc:  # reported by the assertions below
                errors.append(exc)

        t = threading.Thread(target=run_import)
        t.start()
        importer = None
        deadline = time.monotonic() + 300
        while importer is None:
            assert t.is_alive() and time.monotonic() < deadline, errors
            # Not ``blocker``: inside a transaction pg_stat_activity is one frozen snapshot.
            importer = watcher.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'harness9' "
                "AND wait_event_type = 'Lock' AND query LIKE '%compaction_data%'"
            ).fetchone()
            time.sleep(0.02)
        # Held with every message written: nobody sees any of it, and others write freely.
        waits = []
        for i in range(5):
            t0 = time.monotonic()
            other.open_session(chat.session_id).add_messages([user(f"saved {i}")])
            waits.append(time.monotonic() - t0)
        assert max(waits) < 2.0, waits  # generous: each save alone takes milliseconds
        assert sid not in [s.id for s in other.list_sessions()]
        with pytest.raises(SessionNotFoundError):
            other.open_session(sid)
        assert other.search("quagga") == []
        # Killed half-way (kill -9 of the client looks the same to the server): rolled back.
        watcher.execute("SELECT pg_terminate_backend(%s)", importer)
        blocker.execute("ROLLBACK")
        t.join(60)
        assert len(errors) == 1 and isinstance(errors[0], StoreError)
        assert other.list_sessions()[0].id == chat.session_id
        assert len(other.list_sessions()) == 1
        with psycopg.connect(pg_url) as conn:
            assert conn.execute(
                "SELECT count(*) FROM harness9.messages WHERE session_id = %s", (sid,)
            ).fetchone() == (0,)
        assert other.restore(snap) == sid
        assert other.session_info(sid).message_count == 5_000
        assert len(other.search("quagga", limit=0)) == 5_000


def test_the_search_document_is_the_same_as_before_for_ascii_and_accented_text(pg_url):
    # The ASCII shortcut (issue 23) must index exactly what the full folding did.
    from harness9.store.pg_migrations import ACCENTED, SEARCH_MAX_CHARS, UNACCENTED

    before = (
        "SELECT to_tsvector('pg_catalog.simple', translate(regexp_replace("
        f"left(harness9.search_body(%s, %s), {SEARCH_MAX_CHARS}), "
        "'[!-/:-@\\[-`{-~]+', ' ', 'g'), "
        f"'{ACCENTED}', '{UNACCENTED}'))::text"
    )
    texts = [
        ("plain ascii foo.py and bar-baz", None),
        ("Café naïve Ångström façade", None),
        ("日本語のテキスト and ascii", None),
        (
            "",
            '[{"id": "c1", "name": "bash", "arguments": "{\\"command\\": \\"cat résumé.txt\\"}"}]',
        ),
    ]
    PostgresManager(pg_url).close()  # the schema, migrated
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for content, calls in texts:
            (now,) = conn.execute(
                "SELECT harness9.search_document(%s, %s)::text", (content, calls)
            ).fetchone()
            (then,) = conn.execute(before, (content, calls)).fetchone()
            assert now == then, content
        folded = conn.execute(
            "SELECT harness9.search_document('Café naïve', NULL)::text"
        ).fetchone()[0]
        assert folded == "'cafe':1 'naive':2"
