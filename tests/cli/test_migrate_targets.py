"""`sessions migrate --to`: an sqlite:/// URL names its file; anything else URL-like is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness9.config import db_path
from harness9.schema import Message
from harness9.store import Manager
from tests.support.cli import cli


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A session in the user's store, and an empty current directory to run from."""
    with Manager(db_path()) as m:
        m.new_session().add_messages([Message("user", "keep me")])
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


@pytest.mark.parametrize("slashes", ["///", "////"])
def test_an_sqlite_url_names_the_absolute_file(elsewhere: Path, tmp_path: Path, slashes: str):
    target = tmp_path / "dest" / "copy.db"
    target.parent.mkdir()

    result = cli("sessions", "migrate", "--to", f"sqlite:{slashes}{str(target).lstrip('/')}")

    assert result.exit_code == 0, result.output
    assert result.stdout == f"Copied 1 session (1 message) to {target}.\n"
    with Manager(target) as m:
        [info] = m.list_sessions()
        assert m.open_session(info.id).get_messages() == [Message("user", "keep me")]
    assert list(elsewhere.iterdir()) == []  # no ./sqlite:/... file


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://somehost/x.db",
        "sqlite:///x.db?mode=ro",
        "sqlite:x.db",
        "mysql://me@db.internal/sessions",
    ],
)
def test_a_url_that_names_no_sqlite_file_is_refused_in_one_line(elsewhere: Path, url: str):
    result = cli("sessions", "migrate", "--to", url)

    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and repr(url) in result.stderr
    assert "Copied" not in result.stdout
    assert list(elsewhere.iterdir()) == []
