"""How the server counted a session's requests is stored with its settings: the count's
samples read back as written, go with a fork, and a row from before they were kept (or a
damaged value) reads as none rather than failing.

Every test runs on the SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from harness9.config import store_location
from harness9.store.backend import SessionStore, open_store
from harness9.store.session import SessionSettings
from tests.support.migrations import undo_migrations

pytestmark = pytest.mark.usefixtures("on_each_store")

MIGRATION = "session_count_samples"
SAMPLES = ((1200, 1804), (1530, 2299), (1910, 2870))
SETTINGS = SessionSettings(
    "openai/smol", 8192, api_base="http://127.0.0.1:9/v1", count_samples=SAMPLES
)


def store() -> SessionStore:
    return open_store(store_location())


def remembered(settings: SessionSettings = SETTINGS) -> str:
    with store() as m:
        s = m.new_session()
        s.remember_model(settings)
        return s.session_id


def read_back(sid: str) -> SessionSettings | None:
    with store() as m:  # another manager, as --resume reads it
        return m.open_session(sid).model_settings()


def write_raw(backend: str, sid: str, value: str) -> None:
    """Put ``value`` in the row's count_samples column, as a damaged file would hold it."""
    url = str(store_location())
    if backend == "postgres":
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(
                "UPDATE harness9.session_settings SET count_samples = %s WHERE session_id = %s",
                (value, sid),
            )
        return
    conn = sqlite3.connect(url, isolation_level=None)
    try:
        conn.execute(
            "UPDATE session_settings SET count_samples = ? WHERE session_id = ?", (value, sid)
        )
    finally:
        conn.close()


def test_the_count_samples_read_back_as_written_in_their_order():
    sid = remembered()

    assert read_back(sid) == SETTINGS


def test_settings_remembered_again_replace_the_samples():
    sid = remembered()
    with store() as m:
        m.open_session(sid).remember_model(SessionSettings("openai/other", 4096))

    settings = read_back(sid)

    assert settings is not None and settings.model == "openai/other"
    assert settings.count_samples == ()


def test_a_fork_keeps_the_samples():
    sid = remembered()
    with store() as m:
        fork = m.fork_session(sid)

    assert read_back(fork) == SETTINGS


def test_settings_stored_before_the_samples_were_kept_read_as_none(backend: str):
    sid = remembered(SessionSettings("openai/smol", 8192, api_base="http://127.0.0.1:9/v1"))
    undo_migrations(
        backend, str(store_location()), MIGRATION, columns=["session_settings.count_samples"]
    )

    settings = read_back(sid)  # migrates: the old row gets the column's default

    assert settings == SessionSettings("openai/smol", 8192, api_base="http://127.0.0.1:9/v1")
    assert settings is not None and settings.count_samples == ()


@pytest.mark.parametrize(
    "damaged",
    [
        "not json",
        "{}",
        "[[1200, 1804], [1530]]",
        '[[1200, "1804"]]',
        "[[1200, -5]]",
        "[[true, 1804]]",
        "[[1200, 1804.5]]",
    ],
)
def test_damaged_samples_read_as_none_and_the_rest_of_the_settings_stay(backend, damaged):
    sid = remembered()
    write_raw(backend, sid, damaged)

    settings = read_back(sid)

    assert settings is not None and settings.count_samples == ()
    assert (settings.model, settings.context_window) == ("openai/smol", 8192)
