"""An export without a version says so (issue 36, item 22), not "version None"."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import cli


def test_an_export_with_no_version_says_the_version_is_missing(tmp_path: Path):
    path = tmp_path / "s.json"
    path.write_text('{"format": "harness9-session"}')

    result = cli("sessions", "import", str(path))

    assert result.exit_code == 1
    assert result.stderr == (
        f'harness9: cannot import {path}: the export has no "version" '
        "(this harness9 reads version 1)\n"
    )


def test_an_export_of_another_version_names_it(tmp_path: Path):
    path = tmp_path / "s.json"
    path.write_text('{"format": "harness9-session", "version": 7}')

    result = cli("sessions", "import", str(path))

    assert "unsupported export version 7 (this harness9 reads version 1)" in result.stderr
