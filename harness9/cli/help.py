"""Help text in the plain form users read elsewhere: ``ID``, ``TEXT``, ``N``, never ``<str>``.

Typer 0.29 prints a Python type as each parameter's metavar (``<str>``,
``<list[str]>``, ``<int range>``) and wraps required arguments in braces in
the usage line (``{session_id}``). ``HarnessCommand`` keeps Typer's parsing and
only changes how help and usage lines name the parameters, through click's
public ``collect_usage_pieces``/``format_options`` hooks.
"""

from __future__ import annotations

import re
from typing import Any

from typer.core import TyperCommand

# Typer's type labels -> the conventional metavar.
_TYPE_LABELS = {
    "str": "TEXT",
    "int": "N",
    "int range": "N",
    "float": "NUMBER",
    "float range": "NUMBER",
    "path": "PATH",
    "file": "PATH",
    "directory": "DIR",
}
_TYPE_RE = re.compile(r"<([^<>]+)>")


def _label(match: re.Match[str]) -> str:
    inner = match.group(1)
    if inner.startswith("list[") and inner.endswith("]"):
        inner = inner[5:-1]
    return _TYPE_LABELS.get(inner, inner.upper() if inner.isidentifier() else inner)


def plain_type(text: str) -> str:
    """``--limit <int range>`` -> ``--limit N``."""
    return _TYPE_RE.sub(_label, text)


def _argument_name(param: Any) -> str:
    name = param.metavar or str(param.name).upper()
    return name + ("..." if param.nargs != 1 else "")


class HarnessCommand(TyperCommand):
    """A Typer command whose help names parameters as ``ID``, ``TEXT``, ``N``."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = _argument_name(param)
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        args: list[tuple[str, str]] = []
        opts: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            name, text = record
            if param.param_type_name == "argument":
                args.append((_argument_name(param), text))
            else:
                opts.append((plain_type(name), text))
        if args:
            with formatter.section("Arguments"):
                formatter.write_dl(args)
        if opts:
            with formatter.section("Options"):
                formatter.write_dl(opts)
