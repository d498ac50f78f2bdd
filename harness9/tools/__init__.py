"""The agent's tools: a registry of JSON-schema definitions and safe execution.

File tools are confined to the working directory (symlinks resolved); shell
commands need consent (a TTY prompt or --yes) and have a timeout.
"""

from harness9.tools.base import Tool, ToolContext, ToolError, ToolResult
from harness9.tools.edit import EditFileTool
from harness9.tools.files import ReadFileTool, WriteFileTool
from harness9.tools.history_search import HistorySearchTool
from harness9.tools.offload_recall import OffloadRecallTool
from harness9.tools.registry import ToolRegistry, default_registry
from harness9.tools.sandbox import PathEscapeError, resolve_in_workdir
from harness9.tools.shell import BashTool
from harness9.tools.todos import ReadTodosTool, WriteTodosTool, render_todos

__all__ = [
    "BashTool",
    "EditFileTool",
    "HistorySearchTool",
    "OffloadRecallTool",
    "PathEscapeError",
    "ReadFileTool",
    "ReadTodosTool",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "WriteFileTool",
    "WriteTodosTool",
    "default_registry",
    "render_todos",
    "resolve_in_workdir",
]
