"""The tool registry: definitions for the model, and one safe way to execute a call.

``execute`` never raises for anything the model or a tool can get wrong:
unknown tools, malformed JSON, wrong argument shapes and tool exceptions all
become error results the model can read and correct. Only KeyboardInterrupt
(and other BaseExceptions) propagate, so Ctrl-C still stops the turn.
"""

from __future__ import annotations

import json
from typing import Any

from harness9.schema import ToolCall, ToolDefinition
from harness9.tools.base import Tool, ToolContext, ToolError, ToolResult, ToolSource
from harness9.tools.edit import EditFileTool
from harness9.tools.files import ReadFileTool, WriteFileTool
from harness9.tools.shell import BashTool
from harness9.tools.todos import ReadTodosTool, WriteTodosTool
from harness9.tools.validate import validate


class ToolRegistry:
    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self.sources: list[ToolSource] = []
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def add_source(self, source: ToolSource) -> None:
        """Offer ``source``'s tools too (after the registered ones, which win a name)."""
        self.sources.append(source)

    def get(self, name: str) -> Tool | None:
        tool = self._tools.get(name)
        for source in self.sources:
            if tool is not None:
                break
            tool = source.get(name)
        return tool

    def names(self) -> list[str]:
        return [d.name for d in self.definitions()]

    def definitions(self) -> list[ToolDefinition]:
        defs = [tool.definition() for tool in self._tools.values()]
        for source in self.sources:
            defs += [d for d in source.definitions() if d.name not in self._tools]
        return defs

    def execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        tool = self.get(call.name)
        if tool is None:
            available = ", ".join(self.names()) or "(none)"
            return ToolResult.error(
                f"unknown tool {call.name!r}; available tools: {available}", tool=call.name
            )
        args = _parse_arguments(call)
        if isinstance(args, ToolResult):
            return args
        problems = validate(args, tool.definition().parameters)
        if problems:
            return ToolResult.error(f"invalid arguments for {tool.name}: " + "; ".join(problems))
        try:
            return tool.run(args, ctx)
        except ToolError as exc:
            return ToolResult.error(str(exc))
        except Exception as exc:  # a tool bug must not end the session
            return ToolResult.error(f"{tool.name} failed: {type(exc).__name__}: {exc}")


def _parse_arguments(call: ToolCall) -> dict[str, Any] | ToolResult:
    text = call.arguments
    if isinstance(text, dict):  # tolerate callers that already decoded it
        return text
    if text is None or not text.strip():
        return {}
    try:
        args = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        return ToolResult.error(
            f"the arguments for {call.name} are not valid JSON ({exc}); "
            "send a JSON object of parameters"
        )
    if not isinstance(args, dict):
        return ToolResult.error(
            f"the arguments for {call.name} must be a JSON object, got {type(args).__name__}"
        )
    return args


def default_registry() -> ToolRegistry:
    """bash, read_file, write_file, edit_file, write_todos, read_todos."""
    return ToolRegistry(
        [
            BashTool(),
            ReadFileTool(),
            WriteFileTool(),
            EditFileTool(),
            WriteTodosTool(),
            ReadTodosTool(),
        ]
    )
