"""A real MCP server whose tools are odd in ways servers in the wild are, built with the
SDK's low-level ``Server`` (MCPServer derives every schema from a Python signature, so it
cannot serve these).

Run: ``python mcp_odd.py``, over stdio. Its tools' input schemas use what JSON Schema
allows and harness9's argument check does not read (boolean subschemas, keywords holding
other types), and two of its tools' names differ only in characters tool names cannot
hold (``dot.name`` and ``dot_name``). Every call answers ``NAME ran with ARGUMENTS``.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

SCHEMAS: dict[str, dict[str, Any]] = {
    "boolean_subschema": {"type": "object", "properties": {"x": True}},
    "required_string": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": "text",
    },
    "properties_list": {"type": "object", "properties": [{"x": {"type": "string"}}]},
    "minimum_string": {"type": "object", "properties": {"n": {"type": "integer", "minimum": "1"}}},
    "dot.name": {"type": "object", "properties": {}},
    "dot_name": {"type": "object", "properties": {}},
}


async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[
            types.Tool(name=name, description=f"The tool {name}.", input_schema=schema)
            for name, schema in SCHEMAS.items()
        ]
    )


async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    text = f"{params.name} ran with {json.dumps(params.arguments, sort_keys=True)}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def main() -> None:
    server = Server("odd", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
