"""`.ci/run` is the README's test command, and that command runs every static check."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.cli import REPO_ROOT


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


# -- the front door and the pages behind it ---------------------------------------------------

README_MAX_LINES = 150
ARCHITECTURE_PAGE = REPO_ROOT / "docs" / "architecture.md"
CITATION = re.compile(r"docs/architecture\.md,((?:\s*(?:and\s*)?'[^']+')+)")


def architecture_sections() -> set[str]:
    text = ARCHITECTURE_PAGE.read_text(encoding="utf-8")
    return {m.group(1).strip() for m in re.finditer(r"^#{2,3} (.+)$", text, re.MULTILINE)}


def cited_sections(text: str) -> list[str]:
    """Section names cited as "docs/architecture.md, 'Name'" ("... and 'Other'"), also
    when the citation wraps onto the next line of a comment or docstring."""
    joined = re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)
    return [name for m in CITATION.finditer(joined) for name in re.findall(r"'([^']+)'", m[1])]


def python_sources() -> list[Path]:
    """Every Python file of the project but this one, whose examples are not citations."""
    here = Path(__file__).resolve()
    found = (p for d in ("harness9", "tests", "scripts") for p in (REPO_ROOT / d).rglob("*.py"))
    return [p for p in found if p.resolve() != here]


def test_the_readme_is_a_page_a_newcomer_reads_in_minutes():
    lines = (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES


def test_every_citation_of_the_architecture_page_names_one_of_its_sections():
    sections = architecture_sections()
    cited = {
        f"{path.relative_to(REPO_ROOT)}: {name}"
        for path in python_sources()
        for name in cited_sections(path.read_text(encoding="utf-8"))
    }
    assert len(cited) >= 10  # the code does cite it; a regex that found nothing would pass
    assert {c for c in cited if c.split(": ", 1)[1] not in sections} == set()


def test_a_citation_wrapped_in_a_comment_is_read_whole():
    text = (
        "# folded (see docs/architecture.md, 'Nothing the agent\n"
        "    # saw becomes unreachable' and 'Cache-stable requests')"
    )
    assert cited_sections(text) == [
        "Nothing the agent saw becomes unreachable",
        "Cache-stable requests",
    ]


def test_no_code_cites_numbered_decisions_of_a_file_the_repository_does_not_have():
    numbered = re.compile("ARCHITECTURE" + r"(?:\.md)? decisions? \d")
    assert [
        str(p) for p in python_sources() if numbered.search(p.read_text(encoding="utf-8"))
    ] == []
