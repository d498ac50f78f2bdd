"""An import counts as an update for retention: a session imported today is not deleted
for the age it had in the store it came from, and still lists when it last changed."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from freezegun import freeze_time

from harness9.config import db_path
from harness9.schema import Message
from harness9.store import Manager
from harness9.store.backend import open_url
from harness9.store.export import export_json, parse_export
from harness9.store.retention import apply_retention
from tests.support.cli import cli

NOW = 1_800_000_000.0
DAY = 86_400


def at(when: float):
    return freeze_time(datetime.fromtimestamp(when, UTC))


def exported_session_last_updated(when: float, tmp_path: Path) -> str:
    """The JSON export of a session whose last message is from ``when``, from another store."""
    with Manager(tmp_path / "elsewhere.db") as other, at(when):
        s = other.new_session()
        s.add_messages([Message("user", "from another machine")])
        return export_json(other.snapshot(s.session_id))


def test_retention_spares_a_session_imported_since_the_cutoff(store_url: str, tmp_path: Path):
    text = exported_session_last_updated(NOW - 90 * DAY, tmp_path)
    with open_url(store_url) as m:
        with at(NOW):
            sid = m.restore(parse_export(text))

        assert apply_retention(m, 30, now=NOW + 29 * DAY) == []
        [info] = m.list_sessions()
        assert info.id == sid and info.updated_at == NOW - 90 * DAY  # shown as it was

        assert m.sessions_older_than(NOW + 29 * DAY - 30 * DAY) == []
        assert apply_retention(m, 30, now=NOW + 31 * DAY) == [sid]  # idle since the import


def test_a_session_made_here_still_ages_by_its_last_update(store_url: str):
    with open_url(store_url) as m:
        with at(NOW - 90 * DAY):
            s = m.new_session()
            s.add_messages([Message("user", "old")])
        assert apply_retention(m, 30, now=NOW) == [s.session_id]


def test_delete_older_than_right_after_an_import_keeps_the_imported_session(tmp_path: Path):
    text = exported_session_last_updated(NOW - 90 * DAY, tmp_path)
    with at(NOW):
        imported = cli("sessions", "import", "-", input=text)
        assert imported.exit_code == 0, imported.output

        result = cli("sessions", "delete", "--older-than", "30d", "--yes")

    assert result.exit_code == 0, result.output
    assert result.stdout == "No sessions older than 30d.\n"
    with Manager(db_path()) as m:
        assert len(m.list_sessions()) == 1
