"""Five MCP servers' tool definitions, modelled on real servers, for scripts/bench_mcp.py.

Tool counts and definition sizes are the ones a Claude Code user measured with ``/context``
for their connected servers (anthropics/claude-code#13717, "MCP tools consume 50% of
context tokens"):

    google-docs ~25k tokens, 34 tools      asana      ~30k tokens, 40+ tools
    atlassian   ~12k tokens, 15 tools      gmail      ~8k tokens, 9 tools
    slack       ~3k tokens, 4 tools

Here: asana 40, google-docs 34, atlassian 15, gmail 7 and slack 4 tools (100 in all), each
server's definitions sized to its quoted tokens per tool (asana 750, google-docs 735,
atlassian 800, gmail 889, slack 750; sizes by harness9's estimate, UTF-8 bytes / 4). Per-tool
sizes of 400-1,800 tokens agree with another user's per-tool listing (neon's ``run_sql`` 645,
``prepare_database_migration`` 1.8k; anthropics/claude-code#8101). The names are the
servers' kind of names; descriptions and parameters are written to those sizes the way such
servers write them (a paragraph of usage notes, typed parameters with descriptions, enums).

``python -m scripts.mcp_catalog SERVER`` serves SERVER's tools over stdio (the SDK's low-level
``Server``); every call answers with a few hundred bytes naming the tool and its arguments.
"""

from __future__ import annotations

import json
import sys
from typing import Any

SERVERS: dict[str, tuple[int, list[str]]] = {
    # server: (tokens per tool, tool names)
    "asana": (
        750,
        [
            "search_tasks",
            "get_task",
            "create_task",
            "update_task",
            "delete_task",
            "get_tasks_for_project",
            "get_tasks_for_section",
            "get_subtasks",
            "create_subtask",
            "add_task_followers",
            "remove_task_followers",
            "add_task_dependencies",
            "get_task_dependencies",
            "add_task_to_section",
            "get_stories_for_task",
            "create_task_story",
            "get_project",
            "get_projects",
            "create_project",
            "update_project",
            "get_project_sections",
            "create_section",
            "get_project_status",
            "create_project_status",
            "get_portfolio",
            "get_portfolios",
            "get_portfolio_items",
            "get_goal",
            "get_goals",
            "update_goal",
            "get_user",
            "get_users",
            "get_team",
            "get_teams_for_workspace",
            "get_workspace",
            "get_tags",
            "create_tag",
            "add_tag_to_task",
            "get_attachments",
            "typeahead_search",
        ],
    ),
    "google-docs": (
        735,
        [
            "read_document",
            "create_document",
            "append_text",
            "insert_text",
            "delete_range",
            "replace_all_text",
            "apply_text_style",
            "apply_paragraph_style",
            "insert_table",
            "edit_table_cell",
            "insert_table_row",
            "delete_table_row",
            "insert_image",
            "insert_page_break",
            "create_header",
            "create_footer",
            "list_comments",
            "add_comment",
            "reply_to_comment",
            "resolve_comment",
            "delete_comment",
            "list_documents",
            "search_documents",
            "get_document_info",
            "create_folder",
            "list_folder_contents",
            "move_file",
            "copy_file",
            "rename_file",
            "delete_file",
            "share_file",
            "export_document",
            "format_matching_text",
            "fix_list_formatting",
        ],
    ),
    "atlassian": (
        800,
        [
            "jira_search",
            "jira_get_issue",
            "jira_create_issue",
            "jira_update_issue",
            "jira_transition_issue",
            "jira_add_comment",
            "jira_get_transitions",
            "jira_link_issues",
            "jira_get_project_issues",
            "confluence_search",
            "confluence_get_page",
            "confluence_create_page",
            "confluence_update_page",
            "confluence_get_comments",
            "confluence_add_label",
        ],
    ),
    "gmail": (
        889,
        [
            "search_emails",
            "read_email",
            "send_email",
            "draft_email",
            "modify_labels",
            "list_labels",
            "delete_email",
        ],
    ),
    "slack": (750, ["list_channels", "post_message", "get_channel_history", "reply_to_thread"]),
}

_USAGE = (
    "Use this tool when the user asks about {what}. Results are paginated: pass the cursor "
    "from the previous page to continue, and prefer narrow filters over fetching everything. "
    "Identifiers are the service's global ids (strings of digits or letters); names are not "
    "accepted where an id is asked for, so search first when only a name is known. "
)
_PARAM = (
    "The {name} to use for this request. Must be a value the service accepts for {what}; "
    "invalid values are rejected with an error that names the parameter. Optional unless "
    "listed in required. "
)


def definition(server: str, tool: str, tokens: int) -> dict[str, Any]:
    """One tool's MCP definition (name, description, inputSchema) of about ``tokens``."""
    what = tool.replace("_", " ")
    description = f"{what.capitalize()} in {server}. " + _USAGE.format(what=what)
    properties: dict[str, Any] = {}
    names = ["id", "query", "limit", "cursor", "fields", "workspace", "sort", "filter"]
    i = 0
    budget = tokens * 4  # bytes, harness9's estimate
    while len(json.dumps({"d": description, "p": properties})) + len(tool) < budget - 40:
        name = names[i % len(names)] + (f"_{i // len(names)}" if i >= len(names) else "")
        prop: dict[str, Any] = {"type": "integer" if "limit" in name else "string"}
        prop["description"] = _PARAM.format(name=name.replace("_", " "), what=what)
        if name.startswith("sort"):
            prop["enum"] = ["created_at", "modified_at", "due_on", "name"]
        properties[name] = prop
        i += 1
    return {
        "name": tool,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties, "required": ["id"]},
    }


def catalog(server: str) -> list[dict[str, Any]]:
    tokens, tools = SERVERS[server]
    return [definition(server, t, tokens) for t in tools]


def serve(server: str) -> None:
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    tools = [types.Tool.model_validate(d) for d in catalog(server)]

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = json.dumps(params.arguments or {}, sort_keys=True)
        text = f"{server}.{params.name} ok: {args}\n" + "record field value; " * 15
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    app = Server(server, on_list_tools=list_tools, on_call_tool=call_tool)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await app.run(read, write, app.create_initialization_options())

    anyio.run(main)


if __name__ == "__main__":
    serve(sys.argv[1])
