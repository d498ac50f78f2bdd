"""Stand-in for the tools package's base interface (written in parallel; reconciled on merge)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness9.schema import ToolDefinition


@dataclass(slots=True)
class ToolResult:
    content: str
    is_error: bool = False
    metadata: dict = field(default_factory=dict)


@dataclass(slots=True)
class ToolContext:
    workdir: Path
    session: Any
    confirm: Callable[[str], bool] | None = None
    assume_yes: bool = False
    session_id: str = ""


@runtime_checkable
class Tool(Protocol):
    name: str

    def definition(self) -> ToolDefinition: ...

    def run(self, args: dict, ctx: ToolContext) -> ToolResult: ...
