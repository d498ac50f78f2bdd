"""write_todos and read_todos: the agent's plan, persisted in the session."""

from __future__ import annotations

from typing import Any

from harness9.schema import TODO_MARKS, TODO_STATUSES, TodoItem, ToolDefinition
from harness9.store.session import Session
from harness9.tools.base import ToolContext, ToolError, ToolResult

NO_TODOS = "no todos"


def render_todos(items: list[TodoItem]) -> str:
    """One line per item: ``[ ] pending``, ``[~] in progress``, ``[x] completed``."""
    if not items:
        return NO_TODOS
    return "\n".join(f"{TODO_MARKS.get(t.status, '[?]')} {t.content}" for t in items)


def _session(ctx: ToolContext) -> Session:
    if ctx.session is None:
        raise ToolError("todos are not available: this run has no session")
    return ctx.session


def _summary(items: list[TodoItem]) -> dict[str, int]:
    return {
        "total": len(items),
        "completed": sum(t.status == "completed" for t in items),
        "in_progress": sum(t.status == "in_progress" for t in items),
    }


class WriteTodosTool:
    name = "write_todos"

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            description=(
                "Replace your todo list for this task with the given items (send the whole "
                "list every time). Use it to plan multi-step work and to mark progress: "
                "status is pending, in_progress or completed."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "todos": {
                        "type": "array",
                        "description": "The complete todo list, in order.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "content": {"type": "string", "description": "What to do."},
                                "status": {"type": "string", "enum": list(TODO_STATUSES)},
                            },
                            "required": ["content", "status"],
                        },
                    }
                },
                "required": ["todos"],
            },
        )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        session = _session(ctx)
        items: list[TodoItem] = []
        for n, raw in enumerate(args["todos"], start=1):
            content = raw["content"].strip()
            if not content:
                raise ToolError(f"todo {n} has empty content")
            items.append(TodoItem(content=content, status=raw["status"]))
        session.save_todos(items)
        return ToolResult(content=render_todos(items), metadata=_summary(items))


class ReadTodosTool:
    name = "read_todos"

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            description="Show your current todo list for this task.",
            parameters={"type": "object", "properties": {}},
        )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        items = _session(ctx).get_todos() or []
        return ToolResult(content=render_todos(items), metadata=_summary(items))
