"""What the whole-process benchmarks share: the bytecode cache, and the Typer floor.

Whole-process timings (time to the chat prompt, ``sessions list``) depend on
whether Python finds harness9's modules already compiled. ``pip install``
compiles them at install time, and an editable install writes the cache on the
first run, unless ``PYTHONDONTWRITEBYTECODE`` is set, as it is on some CI and
sandbox machines: there every run recompiles all ~90 modules from source, which
costs more than everything else harness9 does before its prompt. So the
benchmarks compile the package first, the way an install does, and say so; the
start-up benchmark also reports the uncached figure beside it.

The floor for a command-line tool built on Typer 0.29+ is not ``import typer``:
parsing any option builds a pydantic ``TypeAdapter`` (Typer's coercion layer,
with no public way around it), so the smallest Typer app that parses an option
pays pydantic's import too. ``MINIMAL_TYPER_APP`` is that app, measured beside
harness9 so its own share can be told apart from the framework's.
"""

from __future__ import annotations

import compileall
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "harness9"

# A command with one integer option and one flag, like `sessions list --limit N --json`.
MINIMAL_TYPER_APP = """
import typer

app = typer.Typer()


@app.command()
def main(limit: int = typer.Option(20, "--limit"), json: bool = typer.Option(False, "--json")):
    print(limit, json)


app()
"""
MINIMAL_TYPER_LABEL = "a 10-line Typer app with --limit N"


def compile_bytecode() -> str:
    """Compile harness9 as an install does; returns the line to print about it."""
    if not compileall.compile_dir(str(PACKAGE), quiet=1):
        raise SystemExit(f"could not compile {PACKAGE}")
    return (
        "harness9 byte-compiled first, as `pip install` does "
        "(PYTHONDONTWRITEBYTECODE would otherwise recompile it on every run)"
    )


def drop_bytecode() -> None:
    """Remove harness9's bytecode cache: the next run compiles from source."""
    for cache in PACKAGE.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
