"""MCP servers' tools (the official ``mcp`` SDK, imported only once a server is used).

``project`` reads a working directory's ``.mcp.json`` and remembers which of its servers
the user approved; ``manager`` runs the client sessions on one background event loop;
``toolset`` offers the servers' tools to the model, all of them or behind ``tool_search``.
"""
