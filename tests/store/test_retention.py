"""config.toml and retention_days: sessions idle too long are removed at chat start-up."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from freezegun import freeze_time

from harness9.config import config_path, db_path, load_config_file, retention_days
from harness9.errors import ConfigError
from harness9.schema import Message
from harness9.store import Manager, open_manager
from harness9.store.backend import open_url
from harness9.store.retention import apply_retention, retention_notice, startup_retention
from tests.support.cli import write_config

NOW = 1_800_000_000.0
DAY = 86_400


def _at(when: float):
    return freeze_time(datetime.fromtimestamp(when, UTC))


def session_updated_at(m: Manager, when: float, text: str = "hello") -> str:
    with _at(when):
        s = m.new_session()
        s.add_messages([Message("user", text)])
    return s.session_id


# -- the config file --------------------------------------------------------------------------


def test_a_missing_config_file_is_an_empty_config(harness9_home: Path):
    assert load_config_file() == {}
    assert not harness9_home.exists()  # reading never creates the home


def test_the_config_file_is_read_from_harness9_home(harness9_home: Path):
    write_config("retention_days = 30\n[offload]\nenabled = false\n")
    assert config_path() == harness9_home / "config.toml"
    assert load_config_file() == {"retention_days": 30, "offload": {"enabled": False}}


def test_malformed_toml_is_one_line_naming_the_file_and_line(harness9_home: Path):
    path = write_config("# retention\nretention_days 30\n")
    with pytest.raises(ConfigError) as info:
        load_config_file()
    message = str(info.value)
    assert message.startswith(f"{path} is not valid TOML: ")
    assert "line 2" in message
    assert "\n" not in message


def test_a_config_file_that_is_not_utf8_is_one_line(harness9_home: Path):
    path = harness9_home / "config.toml"
    harness9_home.mkdir()
    path.write_bytes(b"retention_days = 30 # \xff\n")
    with pytest.raises(ConfigError, match=f"^{path} is not UTF-8 text$"):
        load_config_file()


def test_retention_is_off_by_default():
    assert retention_days({}) == 0


def test_retention_days_is_read_as_a_whole_number():
    assert retention_days({"retention_days": 30}) == 30
    assert retention_days({"retention_days": 0}) == 0


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (-1, "got -1"),
        (1.5, "got 1.5"),
        ("30", "got '30'"),
        (True, "got True"),
        (10**9, "got 1000000000"),
    ],
)
def test_a_bad_retention_value_is_one_line_naming_the_key(harness9_home: Path, value, shown):
    with pytest.raises(ConfigError) as info:
        retention_days({"retention_days": value})
    message = str(info.value)
    assert message.startswith(f"retention_days in {harness9_home / 'config.toml'} must be ")
    assert message.endswith(shown)


# -- applying it ---------------------------------------------------------------------------------


def test_apply_retention_deletes_only_sessions_idle_longer_than_the_limit(store_url: str):
    with open_url(store_url) as m:
        old = session_updated_at(m, NOW - 31 * DAY, "old secret")
        recent = session_updated_at(m, NOW - 29 * DAY)
        assert apply_retention(m, 30, now=NOW) == [old]
        assert [i.id for i in m.list_sessions()] == [recent]
        assert m.search("secret") == []


def test_apply_retention_returns_the_deleted_ids_most_recently_updated_first(store_url: str):
    with open_url(store_url) as m:
        a = session_updated_at(m, NOW - 40 * DAY)
        b = session_updated_at(m, NOW - 35 * DAY)
        assert apply_retention(m, 30, now=NOW) == [b, a]


def test_zero_days_deletes_nothing(store_url: str):
    with open_url(store_url) as m:
        session_updated_at(m, NOW - 4000 * DAY)
        assert apply_retention(m, 0, now=NOW) == []
        assert len(m.list_sessions()) == 1


def test_keep_spares_the_session_about_to_be_resumed(store_url: str):
    with open_url(store_url) as m:
        resumed = session_updated_at(m, NOW - 90 * DAY)
        other = session_updated_at(m, NOW - 90 * DAY)
        assert apply_retention(m, 30, now=NOW, keep=[resumed]) == [other]
        assert [i.id for i in m.list_sessions()] == [resumed]


def test_retention_reports_each_removed_session_to_the_deletion_hook(tmp_path: Path):
    seen: list[str] = []
    with Manager(tmp_path / "s.db", on_session_deleted=seen.append) as m:
        old = session_updated_at(m, NOW - 31 * DAY)
        young = session_updated_at(m, NOW - 1 * DAY)
        apply_retention(m, 30, now=NOW)
        assert [i.id for i in m.list_sessions()] == [young]
    assert seen == [old]


@pytest.mark.parametrize("days", [-1, 1.5, True])
def test_apply_retention_rejects_a_bad_day_count(tmp_path: Path, days):
    with Manager(tmp_path / "s.db") as m, pytest.raises(ValueError, match="whole number"):
        apply_retention(m, days, now=NOW)


def test_the_notice_is_one_line_and_absent_when_nothing_went():
    assert retention_notice([], 30) is None
    assert retention_notice(["a"], 1) == (
        "Removed 1 session not updated in 1 day (retention_days in config.toml)."
    )
    assert retention_notice(["a", "b"], 30) == (
        "Removed 2 sessions not updated in 30 days (retention_days in config.toml)."
    )


def test_startup_retention_reads_the_config_and_applies_it(harness9_home: Path):
    with open_manager(db_path()) as m:
        session_updated_at(m, NOW - 10 * DAY)
        kept = session_updated_at(m, NOW)
    write_config("retention_days = 7\n")
    with _at(NOW), open_manager(db_path()) as m:
        assert startup_retention(m, retention_days(load_config_file())) == (
            "Removed 1 session not updated in 7 days (retention_days in config.toml)."
        )
        assert [i.id for i in m.list_sessions()] == [kept]


def test_startup_retention_without_a_config_file_deletes_nothing(harness9_home: Path):
    with open_manager(db_path()) as m:
        session_updated_at(m, NOW - 10_000 * DAY)
        assert startup_retention(m, retention_days(load_config_file())) is None
        assert len(m.list_sessions()) == 1


def test_startup_retention_with_a_bad_value_deletes_nothing(harness9_home: Path):
    with open_manager(db_path()) as m:
        session_updated_at(m, NOW - 100 * DAY)
    write_config("retention_days = -3\n")
    with open_manager(db_path()) as m:
        with pytest.raises(ConfigError, match="retention_days in .*config.toml must be from 0"):
            startup_retention(m, retention_days(load_config_file()))
        assert len(m.list_sessions()) == 1
