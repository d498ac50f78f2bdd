"""`.ci/run` is the README's test command, and that command runs every static check."""

from __future__ import annotations

from support import REPO_ROOT


def readme_test_command() -> str:
    text = (REPO_ROOT / "README.md").read_text()
    after = text.split("Run the tests (this is exactly what `.ci/run` does)", 1)[1]
    return after.split("```sh\n", 1)[1].split("\n", 1)[0]


def test_ci_runs_exactly_the_readme_test_command():
    lines = (REPO_ROOT / ".ci" / "run").read_text().splitlines()
    assert "set -euo pipefail" in lines
    assert lines[-1] == readme_test_command()


def test_the_test_command_fails_when_a_linter_or_the_type_checker_fails():
    steps = readme_test_command().split(" && ")
    assert steps[-1] == ".venv/bin/python -m pytest -q"
    for check in (
        ".venv/bin/ruff check harness9 tests scripts",
        ".venv/bin/ruff format --check harness9 tests scripts",
        ".venv/bin/mypy harness9",
    ):
        assert check in steps[:-1]  # joined by &&: a failing check stops the run non-zero


def test_each_test_starts_without_harness9_or_llm_variables_but_its_own_home(harness9_home):
    import os

    leaked = {k for k in os.environ if k.startswith(("HARNESS9_", "LLM_"))} - {"HARNESS9_HOME"}
    assert leaked == set()
    assert os.environ["HARNESS9_HOME"] == str(harness9_home)
