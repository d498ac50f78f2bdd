"""tests/ mirrors harness9/: a folder per package, shared helpers in tests.support, and
scripts/ that import them as a package instead of editing sys.path."""

from __future__ import annotations

import re
from pathlib import Path

import harness9
from tests.support.cli import REPO_ROOT

TESTS = REPO_ROOT / "tests"
PACKAGE = Path(harness9.__file__).parent
# Folders that hold no package's tests: the shared helpers, whole-program faults, and the
# repository's own rules.
OTHER_FOLDERS = {"support", "e2e", "project"}


def harness9_packages() -> set[str]:
    return {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}


def top_level_modules() -> set[str]:
    return {p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_")}


def test_every_test_folder_is_a_harness9_package_or_a_named_other():
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders - harness9_packages() == OTHER_FOLDERS
    for folder in folders:
        assert (TESTS / folder / "__init__.py").is_file(), folder


def test_flat_test_files_test_a_top_level_module():
    # harness9/schema.py is tested by tests/test_schema*.py; a package's tests live in its folder.
    modules = top_level_modules()
    flat = sorted(p.stem for p in TESTS.glob("test_*.py"))
    assert flat, "tests/ keeps the top-level modules' tests"
    for name in flat:
        assert name.removeprefix("test_").split("_")[0] in modules, name


def test_support_holds_no_tests():
    assert sorted((TESTS / "support").glob("test_*.py")) == []


def test_no_script_or_test_edits_sys_path():
    found = [
        f"{path.relative_to(REPO_ROOT)}:{number}"
        for folder in ("scripts", "tests")
        for path in (REPO_ROOT / folder).rglob("*.py")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bsys\.path\.(insert|append)\(", line)
    ]
    assert found == []
