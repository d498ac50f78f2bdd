"""The MCP servers' tools as the model sees them: all definitions, or ``tool_search``.

Each server tool is offered as ``mcp__<server>__<tool>`` and asked about like ``bash``
(unless ``--yes`` or the server's ``auto_approve``). When the definitions would take more
than a share of the window (``[mcp] defer``/``defer_share``), a request carries instead
``tool_search`` and one line per server; a search returns the matching tools with their
full definitions, and from then on they are callable.

Where a found tool's definition goes is ``placement``: "conversation" leaves the ``tools``
list as it was (the definition is in the search's result, so the cached prefix of every
later request is unchanged); "tools" adds it to the ``tools`` list (the prefix changes
once per search). The engine's set-up picks one per provider (docs/mcp.md says why).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from harness9.schema import ToolDefinition
from harness9.tokens import estimate_tool_tokens
from harness9.tools.base import Approval, Tool, ToolContext, ToolResult, refusal
from harness9.tools.mcp.content import render_content
from harness9.tools.mcp.manager import FAILED, READY, McpManager, RemoteTool, ServerUnavailable

PREFIX = "mcp__"
TOOL_SEARCH = "tool_search"
SEARCH_LIMIT = 5  # tools one search returns
PLACEMENTS = ("conversation", "tools")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 64  # what the providers' APIs accept for a tool's name

DECLINED = "the user declined to run this tool"
REFUSED_NO_TTY = (
    "refused: MCP tools need confirmation; re-run harness9 with --yes, or set "
    "auto_approve = true for the server in config.toml"
)


def tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``, with what the APIs refuse in a name replaced, and a long
    name cut with a hash kept so that two long names stay apart."""
    name = f"{PREFIX}{server}__{_UNSAFE.sub('_', tool)}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


def called_names(remotes: list[RemoteTool]) -> list[str]:
    """Each tool's ``tool_name``, kept apart: a tool whose name another tool of the list
    already took (``a.b`` and ``a_b`` both become ``a_b``) gets a hash of its own name,
    so that neither is hidden behind the other."""
    taken: set[str] = set()
    names = []
    for remote in remotes:
        name = tool_name(remote.server, remote.name)
        if name in taken:
            own = hashlib.sha256(f"{remote.server}\0{remote.name}".encode()).hexdigest()[:8]
            name = f"{name[: MAX_NAME - 9]}_{own}"
        taken.add(name)
        names.append(name)
    return names


def tools_of(
    manager: McpManager, remotes: list[RemoteTool], auto_approve: frozenset[str] = frozenset()
) -> list[McpTool]:
    """The tools ``remotes`` offer, each under its called name (``called_names``)."""
    return [
        McpTool(manager, r, auto_approve=r.server in auto_approve, name=n)
        for r, n in zip(remotes, called_names(remotes), strict=True)
    ]


class McpTool:
    """One server tool; its run asks the user, calls the server and maps the result."""

    def __init__(
        self, manager: McpManager, remote: RemoteTool, *, auto_approve: bool, name: str = ""
    ) -> None:
        self.manager = manager
        self.remote = remote
        self.name = name or tool_name(remote.server, remote.name)
        self.auto_approve = auto_approve

    def definition(self) -> ToolDefinition:
        desc = self.remote.description or f"{self.remote.name} of MCP server {self.remote.server}"
        why = self.manager.unavailable(self.remote.server)
        if why:
            desc = f"[unavailable: {why}; a call starts the server again] {desc}"
        # The top level is an object (schemas.schema_problem); some APIs want it said.
        schema = {"type": "object", "properties": {}, **self.remote.input_schema}
        return ToolDefinition(self.name, desc, schema, reads=self.remote.read_only)

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        server, tool = self.remote.server, self.remote.name
        if not (ctx.assume_yes or self.auto_approve):
            shown = json.dumps(args, ensure_ascii=False, indent=1)
            why = refusal(
                ctx,
                lambda: Approval(self.name, self.name, f"Run {server}'s tool {tool}?", shown),
                refused=REFUSED_NO_TTY,
                declined_as=DECLINED,
            )
            if why is not None:
                return ToolResult(content=why, is_error=True, metadata={"ran": False})
        meta = {"server": server, "tool": tool}
        try:
            result = self.manager.call(server, tool, args, stop=ctx.stop)
        except ServerUnavailable as exc:
            return ToolResult.error(
                f"{exc}; its tools are unavailable for now (a later call starts it again)",
                **meta,
            )
        text = render_content(result.content, result.structured)
        if result.is_error:
            return ToolResult(content=f"error: {text}", is_error=True, metadata=meta)
        return ToolResult(content=text, metadata=meta)


class ToolSearchTool:
    """Finds deferred MCP tools by words or a regular expression; found tools load."""

    name = TOOL_SEARCH

    def __init__(self, toolset: McpToolset) -> None:
        self.toolset = toolset

    def definition(self) -> ToolDefinition:
        lines = [
            "Find tools of the connected MCP servers, whose definitions are not loaded yet. "
            "Give words or a regular expression matched against tool names and descriptions; "
            f"up to {SEARCH_LIMIT} matching tools are returned with their full definitions, "
            "and from then on you can call them by name. Servers:"
        ]
        lines += self.toolset.server_lines()
        return ToolDefinition(
            name=self.name,
            description="\n".join(lines),
            parameters={
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "Words (all must match) or a regular expression.",
                    }
                },
                "required": ["query"],
            },
        )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        query = str(args["query"]).strip()
        found = self.toolset.search(query)
        if not found:
            return ToolResult(
                content=f"no MCP tool matches {query!r}; try other words, or a shorter pattern",
                offload=False,
            )
        self.toolset.load([t.name for t in found])
        defs = [t.definition() for t in found]
        # In the conversation the definitions come whole (they are not in the tools list);
        # added to the tools list, names and descriptions say enough.
        whole = self.toolset.placement == "conversation"
        body = [
            {"name": d.name, "description": d.description}
            | ({"parameters": d.parameters} if whole else {})
            for d in defs
        ]
        head = f"{len(defs)} tool(s) found and loaded; call them by name:\n"
        # Exempt from offload: the definitions must reach the model whole.
        return ToolResult(content=head + json.dumps(body, ensure_ascii=False), offload=False)


class McpToolset:
    """The MCP tools a registry offers: every definition, or tool_search and the loaded."""

    def __init__(
        self,
        manager: McpManager,
        *,
        window: int,
        defer: str = "auto",
        share: float = 0.10,
        placement: str = "conversation",
        auto_approve: frozenset[str] = frozenset(),
    ) -> None:
        self.manager = manager
        self.window, self.defer, self.share_limit = window, defer, share
        self.placement = placement
        self.auto_approve = auto_approve
        self._search = ToolSearchTool(self)
        self._tools: dict[str, McpTool] = {}
        self._seen: list[RemoteTool] = []

    def all_tools(self) -> dict[str, McpTool]:
        remote = self.manager.tools()
        if remote != self._seen:  # a server connected, failed or restarted
            self._seen = remote
            tools = tools_of(self.manager, remote, self.auto_approve)
            self._tools = {t.name: t for t in tools}
        return self._tools

    def all_tokens(self) -> int:
        return estimate_tool_tokens(t.definition() for t in self.all_tools().values())

    def deferring(self) -> bool:
        if self.defer == "never" or not self.all_tools():
            return False
        return self.defer == "always" or self.all_tokens() > self.share_limit * self.window

    def definitions(self) -> list[ToolDefinition]:
        tools = self.all_tools()
        if not self.deferring():
            return [t.definition() for t in tools.values()]
        defs = [self._search.definition()]
        if self.placement == "tools":
            defs += [tools[n].definition() for n in sorted(self.manager.loaded) if n in tools]
        return defs

    def get(self, name: str) -> Tool | None:
        if name == TOOL_SEARCH:
            return self._search if self.deferring() else None
        # A tool not loaded yet is callable too: its arguments are still checked against
        # its schema, and an error sends the model to tool_search.
        tool = self.all_tools().get(name)
        if tool is None and name.startswith(PREFIX) and self.manager.connecting():
            self.manager.wait_ready()  # called before its server was ready: wait for it
            tool = self.all_tools().get(name)
        return tool

    def load(self, names: list[str]) -> None:
        self.manager.loaded.update(names)

    def search(self, query: str) -> list[McpTool]:
        tools = list(self.all_tools().values())
        try:
            pattern = re.compile(query, re.IGNORECASE | re.MULTILINE)
            hits = [t for t in tools if pattern.search(f"{t.name}\n{t.remote.description}")]
        except re.error:
            hits = []
        if not hits:
            words = query.lower().split()
            hits = [
                t
                for t in tools
                if words and all(w in f"{t.name} {t.remote.description}".lower() for w in words)
            ]
        return hits[:SEARCH_LIMIT]

    def server_lines(self) -> list[str]:
        lines = []
        for view in self.manager.views():
            if view.state == READY:
                lines.append(f"- {view.config.name}: {len(view.tools)} tools")
            elif view.state == FAILED:
                lines.append(f"- {view.config.name}: unavailable ({view.error})")
            else:
                lines.append(f"- {view.config.name}: {view.state}")
        return lines

    def share(self) -> tuple[int, int]:
        """Tokens of the MCP definitions a request carries (loaded) and leaves out (deferred)."""
        total = self.all_tokens()
        offered = estimate_tool_tokens(self.definitions())
        if not self.deferring():
            return offered, 0
        loaded = [t.definition() for n, t in self.all_tools().items() if n in self.manager.loaded]
        in_conversation = estimate_tool_tokens(loaded) if self.placement != "tools" else 0
        shown = offered + in_conversation
        return shown, max(0, total - estimate_tool_tokens(loaded))


class McpTools:
    """A chat's MCP servers and how their tools are offered; each agent's registry (the
    user's, each sub-agent's, one per model) gets a toolset of its own from it."""

    def __init__(
        self,
        manager: McpManager,
        *,
        defer: str = "auto",
        share: float = 0.10,
        auto_approve: frozenset[str] = frozenset(),
        placement: str | None = None,
    ) -> None:
        self.manager, self.defer, self.share = manager, defer, share
        self.auto_approve = auto_approve
        # Where found definitions go; None: the provider's choice (engine.setup.mcp_placement).
        # A program embedding harness9 (scripts/bench_mcp.py) may fix it to compare the two.
        self.placement = placement

    def toolset(self, window: int, placement: str) -> McpToolset:
        return McpToolset(
            self.manager,
            window=window,
            defer=self.defer,
            share=self.share,
            placement=placement,
            auto_approve=self.auto_approve,
        )


def mcp_toolset(sources: list[Any]) -> McpToolset | None:
    """The MCP toolset among a registry's sources (None: the chat has no MCP server)."""
    for source in sources:
        if isinstance(source, McpToolset):
            return source
    return None


def server_rows(manager: McpManager) -> list[dict[str, Any]]:
    """Each server as ``mcp list`` and ``/mcp`` show it: name, source, transport, state,
    why it failed, its tool count and the tokens its definitions take."""
    rows = []
    for view in manager.views():
        cfg = view.config
        defs = [t.definition() for t in tools_of(manager, view.tools)]
        rows.append(
            {
                "name": cfg.name,
                "source": cfg.source,
                "transport": cfg.transport,
                "state": view.state,
                "error": view.error,
                "tools": len(view.tools),
                "tokens": estimate_tool_tokens(defs),
                "not_offered": list(view.refused),  # "name (why its schema is invalid)"
            }
        )
    return rows
