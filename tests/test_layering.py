"""The packages import one way: cli -> ui -> engine -> (context, provider, tools) -> store -> schema.

`store` and `context` never import litellm, the provider, the engine, the UI or the CLI, and
`store` never imports `context` (persistence knows nothing of what the model is shown).
"""

import ast
from pathlib import Path

import pytest

import harness9

PACKAGE = Path(harness9.__file__).parent
OUTER = ("litellm", "harness9.provider", "harness9.engine", "harness9.ui", "harness9.cli")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def offenders(package: str, forbidden: tuple[str, ...]) -> set[str]:
    return {
        f"{package}/{path.name}: {name}"
        for path in (PACKAGE / package).glob("*.py")
        for name in imported_modules(path)
        if name.startswith(forbidden)
    }


@pytest.mark.parametrize("package", ["store", "context"])
def test_inner_packages_import_nothing_from_the_outer_layers(package):
    assert offenders(package, OUTER) == set()


def test_store_never_imports_context():
    assert offenders("store", ("harness9.context",)) == set()


def test_a_store_import_of_context_would_be_caught(tmp_path):
    # The check above reads real import statements; prove it is not vacuous.
    probe = tmp_path / "probe.py"
    probe.write_text("from harness9.context.view import build_view\n", encoding="utf-8")
    assert "harness9.context.view" in imported_modules(probe)


def test_the_mixed_memory_package_is_gone():
    assert not (PACKAGE / "memory").exists()
    assert (PACKAGE / "store" / "sqlite.py").exists()
    assert (PACKAGE / "context" / "compaction.py").exists()


def test_no_module_imports_another_projects_private_names():
    private = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in PACKAGE.rglob("*.py")
        for name in imported_modules(path)
        if not name.startswith("harness9")
        and any(part.startswith("_") and part != "__future__" for part in name.split("."))
    }
    assert private == set()


def test_a_private_import_would_be_caught(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from typer._coercion import RuntimeParam\n", encoding="utf-8")
    assert "typer._coercion" in imported_modules(probe)
