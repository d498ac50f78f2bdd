"""harness9.memory stays pure: it never imports litellm, the provider, the engine or the UI."""

import ast
from pathlib import Path

import harness9.memory

FORBIDDEN = ("litellm", "harness9.provider", "harness9.engine", "harness9.ui", "harness9.cli")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_memory_modules_import_nothing_from_the_outer_layers():
    package = Path(harness9.memory.__file__).parent
    offenders = {
        f"{path.name}: {name}"
        for path in package.glob("*.py")
        for name in imported_modules(path)
        if name.startswith(FORBIDDEN)
    }
    assert offenders == set()
    assert (package / "compaction.py").exists() and (package / "summarization.py").exists()
