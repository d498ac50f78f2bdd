"""Helpers for the tool tests: a context on a real temp workdir and one-line tool calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness9.schema import TodoItem, ToolCall
from harness9.tools import ToolContext, ToolResult, default_registry


class TodoOnlySession:
    """Just the todo half of the Session protocol, kept in memory."""

    session_id = "s-test"

    def __init__(self) -> None:
        self.saved: list[TodoItem] | None = None
        self.save_calls = 0

    def get_todos(self) -> list[TodoItem] | None:
        return list(self.saved) if self.saved else None

    def save_todos(self, items: list[TodoItem]) -> None:
        self.save_calls += 1
        self.saved = list(items)


def make_ctx(workdir: Path, **kw: Any) -> ToolContext:
    kw.setdefault("session", None)
    return ToolContext(workdir=workdir.resolve(), **kw)


def run_tool(ctx: ToolContext, name: str, **args: Any) -> ToolResult:
    return default_registry().execute(
        ToolCall(id="call_1", name=name, arguments=json.dumps(args)), ctx
    )


def run_raw(ctx: ToolContext, name: str, arguments: str) -> ToolResult:
    return default_registry().execute(ToolCall(id="call_1", name=name, arguments=arguments), ctx)
