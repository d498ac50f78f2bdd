"""Reliability: damaged stores, races with clean-up, provider faults, hostile output.

The long loops (hundreds of kill points, a thousand concurrent writes) live in
scripts/chaos.py; these are the fast cases of each scenario.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness9.cli import app
from harness9.cli.env import Environment
from harness9.config import ContextOptions, db_path
from harness9.context import is_valid_tool_sequence
from harness9.context.policy import ContextPolicy
from harness9.engine.engine import AgentEngine
from harness9.engine.prompt import PromptBuilder
from harness9.provider import LLMProvider
from harness9.schema import Message
from harness9.store import Manager
from harness9.store.migrations import SCHEMA_VERSION
from harness9.store.session import StoreError
from harness9.tools import default_registry
from tests.support import cli as support
from tests.support.cli import piped

runner = CliRunner()
CONNECT_AND_CLOSE = (
    "import sqlite3, sys\n"
    "c = sqlite3.connect(sys.argv[1], timeout=0)\n"
    "c.execute('SELECT count(*) FROM sessions').fetchone()\n"
    "c.close()"
)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def chat(server, stdin: str, *args: str, obj: Environment | None = None):
    return support.chat(server, stdin, "--yes", *args, obj=obj)


def stored(session_id: str | None = None) -> list[Message]:
    with Manager(db_path()) as m:
        ids = [session_id] if session_id else [i.id for i in m.list_sessions()]
        return [msg for sid in ids for msg in m.open_session(sid).get_messages()]


# -- damaged state ---------------------------------------------------------------------


def test_a_newer_schema_in_rollback_journal_mode_is_refused_without_changing_a_byte(db: Path):
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE future (x)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    before = sha(db)

    with pytest.raises(StoreError, match=r"sessions\.db: .*schema version .*upgrade harness9"):
        Manager(db)

    assert sha(db) == before  # not even switched to WAL
    assert not Path(f"{db}-wal").exists()


def test_a_full_disk_names_the_file_says_what_to_do_and_keeps_what_was_written(db: Path):
    with Manager(db) as m:
        s = m.new_session()
        s.add_messages([Message("user", "kept")])
        (pages,) = m.conn.execute("PRAGMA page_count").fetchone()
        m.conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own SQLITE_FULL path

        with pytest.raises(StoreError) as err:
            s.add_messages([Message("assistant", "x" * 200_000)])

        assert str(db) in str(err.value)
        assert "disk is full" in str(err.value) and "free some disk space" in str(err.value)
        m.conn.execute("PRAGMA max_page_count = 1073741823")
        s.add_messages([Message("assistant", "after space was freed")])
        assert [x.content for x in s.get_messages()] == ["kept", "after space was freed"]
        assert m.conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_corrupt_page_found_while_reading_says_what_to_do(db: Path):
    with Manager(db) as m:
        s = m.new_session()
        for i in range(40):
            s.add_messages([Message("user", f"{i}" * 4000)])
        m.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        sid = s.session_id
    data = bytearray(db.read_bytes())
    page = 4096
    for n in range(len(data) // page - 6, len(data) // page):  # the newest message pages
        data[n * page : (n + 1) * page] = b"\xa5" * page
    db.write_bytes(bytes(data))

    with Manager(db) as m, pytest.raises(StoreError) as err:
        m.open_session(sid).get_messages()
    assert str(db) in str(err.value) and "move it aside" in str(err.value)


def test_a_file_in_place_of_the_home_directory_says_what_to_do(tmp_path: Path, monkeypatch):
    home = tmp_path / "home"
    home.write_text("not a directory")
    monkeypatch.setenv("HARNESS9_HOME", str(home))

    result = runner.invoke(app, ["sessions", "delete", "--older-than", "1d", "--yes"])

    # Not "nothing to delete": a cron job must learn that its store is unreachable.
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert "a file stands where the directory should be" in result.stderr
    result = runner.invoke(
        app, ["chat", "--model", "openai/x", "--api-base", "http://127.0.0.1:9/v1"], input="hi\n"
    )
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    # chat reads config.toml first, then the store: either way the file and the fix are named
    assert f"{home}/" in result.stderr and "HARNESS9_HOME" in result.stderr
    assert home.read_text() == "not a directory"


def test_a_home_you_cannot_read_is_one_line_naming_it_not_an_internal_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # Reading commands first look for a config.toml (it may name a PostgreSQL store). In a
    # directory you cannot search, that look fails with EACCES; the store then names the
    # directory and the fix, as it does without a config file.
    as_nobody = os.geteuid() == 0  # root reads any directory
    if as_nobody and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot run as another user")
    # Outside pytest's own 0700 temporary tree, so that another user can reach it.
    base = Path(tempfile.mkdtemp(prefix="harness9-unreadable-")) if as_nobody else tmp_path
    try:
        base.chmod(0o755)
        home = base / "home"
        home.mkdir()
        with Manager(home / "sessions.db") as m:
            m.new_session()
        if as_nobody:
            home.chmod(0o700)
            env = dict(os.environ, HARNESS9_HOME=str(home), PYTHONPATH=str(Path.cwd()))
            argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            r = subprocess.run(
                [*argv, sys.executable, "-m", "harness9", "sessions", "list"],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
            )
            code, err = r.returncode, r.stderr
        else:
            monkeypatch.setenv("HARNESS9_HOME", str(home))
            home.chmod(0)
            try:
                result = runner.invoke(app, ["sessions", "list"])
            finally:
                home.chmod(0o700)
            code, err = result.exit_code, result.stderr
    finally:
        if as_nobody:
            shutil.rmtree(base)

    assert code == 1 and err.count("\n") == 1, err
    assert "internal error" not in err
    assert f"the directory {home} cannot be read by you" in err and "check that you own it" in err


# -- concurrency with clean-up -----------------------------------------------------------


def test_delete_older_than_skips_a_session_written_to_after_it_was_listed(db: Path):
    with Manager(db) as cleaner, Manager(db) as chat_store:
        s = chat_store.new_session()
        s.add_messages([Message("user", "old")])
        cleaner.conn.execute("UPDATE sessions SET updated_at = updated_at - 86400")
        cutoff = time.time() - 3600
        listed = [i.id for i in cleaner.sessions_older_than(cutoff)]
        s.add_messages([Message("assistant", "written between list and delete")])

        deleted = cleaner.delete_sessions(listed, updated_before=cutoff)

        assert listed == [s.session_id] and deleted == []
        assert [m.content for m in s.get_messages()] == ["old", "written between list and delete"]


def test_delete_older_than_skips_a_session_another_cleanup_already_deleted(db: Path):
    with Manager(db) as a, Manager(db) as b:
        s = a.new_session()
        a.conn.execute("UPDATE sessions SET updated_at = 0")
        listed = [i.id for i in b.sessions_older_than(time.time())]
        a.delete_session(s.session_id)

        assert b.delete_sessions(listed, updated_before=time.time()) == []


def test_delete_older_than_from_the_cli_still_deletes_an_idle_session():
    with Manager(db_path()) as m:
        old = m.new_session()
        old.add_messages([Message("user", "old")])
        m.conn.execute("UPDATE sessions SET updated_at = 0")

    result = runner.invoke(app, ["sessions", "delete", "--older-than", "1d", "--yes"])

    assert result.exit_code == 0 and result.stdout == "Deleted 1 session.\n"


def test_an_empty_session_is_not_dropped_once_another_process_wrote_to_it(db: Path):
    with Manager(db) as first, Manager(db) as second:
        s = first.new_session()
        second.open_session(s.session_id).add_messages([Message("user", "from --continue")])

        assert first.delete_if_empty(s.session_id) is False
        assert [m.content for m in s.get_messages()] == ["from --continue"]
        empty = first.new_session()
        assert first.delete_if_empty(empty.session_id) is True


# -- provider faults -----------------------------------------------------------------------


def test_an_empty_reply_is_a_clear_error_and_is_not_stored(llm_server):
    llm_server.reply_empty()
    llm_server.reply_text("second try works")

    result = chat(llm_server, "hi\nagain\n")

    assert result.exit_code == 1
    assert "error: openai/test-model sent an empty reply" in result.stderr
    assert [(m.role, m.content) for m in stored()] == [
        ("user", "hi"),
        ("user", "again"),
        ("assistant", "second try works"),
    ]


def test_no_stream_prints_the_whole_reply(llm_server):
    llm_server.reply_text("all at once")

    result = chat(llm_server, "hi\n", "--no-stream")

    assert result.exit_code == 0 and result.stdout == "all at once\n"
    assert not llm_server.requests[0].get("stream")


def test_a_model_that_never_answers_times_out_retries_and_ends_the_turn_cleanly(
    llm_server, tmp_path: Path
):
    for _ in range(2):
        llm_server.reply_delay(5)
    with Manager(tmp_path / "s.db") as m:
        session = m.new_session()
        provider = LLMProvider(
            "openai/test-model", api_base=llm_server.base_url, timeout=0.5, max_retries=1
        )
        provider.backoff_base = 0.01
        engine = AgentEngine(
            provider,
            default_registry(),
            tmp_path,
            session=session,
            policy=ContextPolicy(ContextOptions(), provider, 128_000),
            prompt_builder=PromptBuilder(tmp_path),
        )

        result = engine.run_turn("hello?")

        assert result.error == "openai/test-model did not answer within 0.5s"
        assert len(llm_server.requests) == 2
        assert [x.content for x in session.get_messages()] == ["hello?"]


def test_the_timeout_flag_reaches_the_model_call(llm_server):
    for _ in range(4):  # the first call and three retries
        llm_server.reply_delay(4)
    waits: list[float] = []
    env = piped("hi\n", sleep=waits.append)

    result = chat(llm_server, "", "--timeout", "1", obj=env)

    assert result.exit_code == 1
    assert "error: openai/test-model did not answer within 1s" in env.stderr.getvalue()
    # Exponential backoff between the attempts (plus up to 10 % jitter), waited out by env.sleep.
    assert len(waits) == 3
    for wait, base in zip(waits, (1, 2, 4), strict=True):
        assert base <= wait <= base * 1.1


def test_a_5xx_burst_longer_than_the_retries_ends_the_turn_and_the_next_one_works(llm_server):
    for _ in range(4):
        llm_server.reply_error(503, "overloaded", headers={"Retry-After": "0"})
    llm_server.reply_text("back")

    result = chat(llm_server, "one\ntwo\n")

    assert "error: openai/test-model is unavailable (HTTP 503): overloaded" in result.stderr
    messages = stored()
    assert [m.content for m in messages] == ["one", "two", "back"]
    assert is_valid_tool_sequence(messages)


# -- hostile input -------------------------------------------------------------------------


def test_escape_sequences_from_the_model_and_tools_are_printed_inert(llm_server):
    payload = "A\x1b]0;pwned\x07B\x1b[2JC"
    llm_server.reply_tool_calls([("c1", "bash", '{"command": "printf \'\\\\033]0;x\\\\007\'"}')])
    llm_server.reply_text(payload)

    result = chat(llm_server, "go\n")
    [info] = Manager(db_path()).list_sessions()
    shown = runner.invoke(app, ["sessions", "show", info.id])

    for out in (result.stdout, result.stderr, shown.stdout):
        assert "\x1b" not in out and "\x07" not in out
    # The live stream and `sessions show` escape alike: one inert() for every path.
    assert "A\\x1b]0;pwned\\x07B\\x1b[2JC" in result.stdout
    assert "A\\x1b]0;pwned\\x07B\\x1b[2JC" in shown.stdout


def test_a_bidi_override_in_streamed_model_text_is_shown_escaped(llm_server):
    # U+202E would show "txt.exe" reversed as "exe.txt"; U+2066 opens an isolate.
    llm_server.reply_text("open invoice\u202etxt.exe now\u2066!")

    result = chat(llm_server, "hi\n")

    assert result.exit_code == 0
    assert "\u202e" not in result.stdout and "\u2066" not in result.stdout
    assert "open invoice\\u202etxt.exe now\\u2066!" in result.stdout


def test_the_api_key_reaches_neither_tool_output_nor_the_database(llm_server, monkeypatch):
    key = "sk-chaos-" + os.urandom(8).hex()
    monkeypatch.setenv("OPENAI_API_KEY", key)
    llm_server.reply_tool_calls([("c1", "bash", '{"command": "env"}')])
    llm_server.reply_error(400, f"Incorrect API key provided: {key}")

    result = chat(llm_server, "show me the environment\n")

    assert result.exit_code == 1 and "[redacted]" in result.stderr
    assert key not in result.stdout + result.stderr
    tool_result = llm_server.requests[1]["messages"][-1]
    assert tool_result["role"] == "tool" and "PATH=" in tool_result["content"]
    assert "OPENAI_API_KEY" not in tool_result["content"]
    home = db_path().parent
    for path in home.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("bad", ["../../etc", "..", "/etc/passwd", "0/../..", "a" * 300])
def test_session_ids_that_look_like_paths_are_refused(llm_server, bad: str):
    for argv in (["sessions", "show", bad], ["sessions", "delete", bad, "--yes"]):
        result = runner.invoke(app, argv)
        assert result.exit_code == 1 and result.stderr.count("\n") == 1, argv
    result = chat(llm_server, "", "--resume", bad)
    assert result.exit_code == 1 and "not a session id" in result.stderr


def test_a_second_manager_in_the_process_leaves_the_first_ones_locks_alone(db: Path):
    """Closing any descriptor of the file drops this process's POSIX locks on it.

    Manager used to open and close the database file itself before connecting; the
    first Manager then lost its shared lock, so another process closing its connection
    believed it was the last one, checkpointed and deleted the WAL under our feet.
    """
    with Manager(db) as first:
        s = first.new_session()
        s.add_messages([Message("user", "one")])
        first.conn.execute("BEGIN")  # a read in progress, as while another thread lists
        first.conn.execute("SELECT count(*) FROM messages").fetchone()
        Manager(db).close()  # e.g. a thread or `sessions` helper opening its own
        other = subprocess.run(
            [sys.executable, "-c", CONNECT_AND_CLOSE, str(db)],
            capture_output=True,
            text=True,
        )
        assert other.returncode == 0, other.stderr
        assert Path(f"{db}-wal").exists()  # the other process knew it was not the last
        first.conn.execute("COMMIT")
        s.add_messages([Message("assistant", "two")])
        assert [m.content for m in s.get_messages()] == ["one", "two"]
        assert first.conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
