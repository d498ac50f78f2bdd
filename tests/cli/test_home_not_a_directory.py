"""HARNESS9_HOME naming a file: every reading command says so, none pretends the store is empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import cli


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions", "list"],
        ["sessions", "list", "--json"],
        ["sessions", "search", "anything"],
        ["sessions", "show", "abc"],
        ["sessions", "export", "abc"],
    ],
)
def test_a_file_in_place_of_the_home_is_one_line_and_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
):
    home = tmp_path / "not-a-dir"
    home.write_text("oops\n")
    monkeypatch.setenv("HARNESS9_HOME", str(home))

    result = cli(*argv)

    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"harness9: cannot open session database {home / 'sessions.db'}: Not a directory; "
        "a file stands where the directory should be: move it or point HARNESS9_HOME "
        "elsewhere\n"
    )
    assert home.read_text() == "oops\n"
