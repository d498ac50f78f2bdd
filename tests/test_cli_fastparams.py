"""The plain-option fast path: same values and errors as Typer's own coercion, no pydantic."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pytest
import typer
from support import run_cli
from typer._click.exceptions import BadParameter

from harness9.cli import app, fastparams


def build(fn) -> typer.core.TyperCommand:
    demo = typer.Typer()
    demo.command()(fn)
    command = typer.main.get_command(demo)
    assert fastparams.install(command) > 0
    return command


def run(command, *args: str):
    return command.main(list(args), standalone_mode=False)


def test_every_scalar_option_of_the_harness9_commands_gets_the_fast_path():
    command = typer.main.get_command(app)
    installed = fastparams.install(command)
    list_cmd = command.commands["sessions"].commands["list"]
    limit = next(p for p in list_cmd.params if p.name == "limit")
    assert installed >= 20
    assert type(limit._runtime_param).__name__ == "ScalarRuntimeParam"


def test_values_are_coerced_like_typer_does():
    seen = {}

    def demo(
        count: int = 3,
        ratio: float = 0.5,
        where: Path = Path("."),
        name: str | None = None,
        flag: bool = False,
    ) -> None:
        seen.update(count=count, ratio=ratio, where=where, name=name, flag=flag)

    run(build(demo), "--count", "7", "--ratio", "0.25", "--where", "/tmp", "--flag")

    assert seen == {"count": 7, "ratio": 0.25, "where": Path("/tmp"), "name": None, "flag": True}


def test_a_non_number_is_a_bad_parameter():
    def demo(count: int = 3) -> None:
        pass

    with pytest.raises(BadParameter, match="'x' is not a valid integer"):
        run(build(demo), "--count", "x")


def test_min_and_max_are_enforced_and_clamp_is_honoured():
    seen = {}

    def demo(
        low: Annotated[int, typer.Option(min=1)] = 5,
        clamped: Annotated[int, typer.Option(max=10, clamp=True)] = 0,
    ) -> None:
        seen.update(low=low, clamped=clamped)

    with pytest.raises(BadParameter, match="0 is smaller than the minimum 1"):
        run(build(demo), "--low", "0")
    run(build(demo), "--clamped", "99")
    assert seen == {"low": 5, "clamped": 10}


def test_sessions_list_in_a_real_process_never_imports_pydantic(tmp_path):
    result = run_cli("sessions", "list", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0
    assert "harness9.cli" in result.stderr
    assert " pydantic" not in result.stderr and "typer._adapters" not in result.stderr
