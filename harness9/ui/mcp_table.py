"""The MCP servers as a table: ``harness9 mcp list`` and ``/mcp`` show the same one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.table import Table
from rich.text import Text

from harness9.tokens import format_token_count
from harness9.ui.text import inert

NO_SERVERS = "no MCP servers: add [mcp.servers.NAME] to config.toml, or a .mcp.json here"


def server_table(rows: list[dict[str, Any]]) -> Table:
    """One row a server: name, source, transport, state (and why it failed), tools, tokens."""
    table = Table(box=None, pad_edge=False)
    for column in ("server", "source", "transport", "state", "tools", "tokens"):
        table.add_column(column, justify="right" if column in ("tools", "tokens") else "left")
    for r in rows:
        state = Text(inert(f"{r['state']}: {r['error']}" if r["error"] else r["state"]))
        if r["state"] == "failed":
            state.stylize("red")
        elif r["state"] != "ready":
            state.stylize("yellow")
        table.add_row(
            inert(r["name"]),
            r["source"],
            r["transport"],
            state,
            str(r["tools"]),
            format_token_count(r["tokens"]),
        )
    return table


def above_prompt(write: Callable[[], None]) -> None:
    """Run ``write`` (a line for the terminal) from any thread without breaking the prompt:
    while the line editor waits for input, the line goes above it and the prompt is drawn
    again below; otherwise it is written at once."""
    import sys

    if "prompt_toolkit" in sys.modules:  # never imported just for this
        from prompt_toolkit.application import get_app_or_none, run_in_terminal

        app = get_app_or_none()
        loop = app.loop if app is not None and app.is_running else None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(lambda: run_in_terminal(write))
            return
    write()
