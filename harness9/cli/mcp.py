"""``harness9 mcp list|tools|approve``: the MCP servers chat would use, scriptable.

Servers come from ``[mcp.servers.NAME]`` in config.toml and from the working directory's
``.mcp.json``; the latter run only once approved (here, or when chat asks at a terminal).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness9.cli.env import Environment, environment
from harness9.cli.help import HarnessCommand
from harness9.errors import ConfigError, ExitCode, HarnessError, UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from harness9.config import McpServer
    from harness9.tools.mcp.manager import McpManager
    from harness9.tools.mcp.toolset import McpTools

mcp_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="List MCP servers and their tools; approve a project's .mcp.json servers.",
)

JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print JSON (for scripts) instead of the human view.")
]
WorkdirOpt = Annotated[
    Path | None,
    typer.Option("--workdir", "-w", help="The directory whose .mcp.json counts (default: here)."),
]


def _servers(workdir: Path | None) -> tuple[Path, list[McpServer]]:
    from harness9.config import mcp_options
    from harness9.engine.setup import resolve_workdir
    from harness9.tools.mcp.project import all_servers

    work = resolve_workdir(workdir)
    return work, all_servers(mcp_options().servers, work)


def _connected(work: Path, servers: list[McpServer]) -> McpManager:
    from harness9.tools.mcp.manager import McpManager
    from harness9.tools.mcp.project import is_approved

    manager = McpManager(servers, approved=lambda s: is_approved(work, s))
    _start_and_wait(manager)
    return manager


def _start_and_wait(manager: McpManager) -> None:
    """Start every server and wait until each is ready or failed. Whatever ends the wait
    early (Ctrl-C) stops them again: no server's process outlives the command."""
    try:
        manager.start()
        manager.wait_ready()
    except BaseException:
        manager.close()
        raise


@mcp_app.command("list", cls=HarnessCommand)
def list_servers(ctx: typer.Context, as_json: JsonOpt = False, workdir: WorkdirOpt = None) -> None:
    """Each server: source, transport, state, tool count and its definitions' tokens.

    Starts every enabled, approved server to ask for its tools (one that does not answer
    is waited for up to its timeout, and at least 30 s), then stops them. A server that
    failed is a row saying why; the exit code is still 0.
    """
    from harness9.tools.mcp.toolset import server_rows

    env = environment(ctx)
    work, servers = _servers(workdir)
    manager = _connected(work, servers)
    try:
        rows = server_rows(manager)
    finally:
        manager.close()
    if as_json:
        env.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    from harness9.ui.mcp_table import NO_SERVERS, server_table

    if not rows:
        env.echo(NO_SERVERS)
        return
    env.console().print(server_table(rows))


@mcp_app.command("tools", cls=HarnessCommand)
def list_tools(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The server's name.")],
    as_json: JsonOpt = False,
    workdir: WorkdirOpt = None,
) -> None:
    """A server's tools: the name the model calls, the tokens of its definition, its text.

    Starts the server to ask it. Exit 1 when it has no tools to show (it failed, is not
    approved or is disabled), with one line saying why. A tool whose input schema is not
    valid JSON Schema is not offered to the model (providers refuse every request carrying
    it): it is named on stderr.
    """
    from harness9.tokens import estimate_tool_tokens
    from harness9.tools.mcp.toolset import tools_of

    env = environment(ctx)
    work, servers = _servers(workdir)
    chosen = [s for s in servers if s.name == name]
    if not chosen:
        known = ", ".join(s.name for s in servers) or "none configured"
        raise UsageError(f"no MCP server named {name!r} (servers: {known})")
    manager = _connected(work, chosen)
    try:
        view = manager.views()[0]
        defs = [t.definition() for t in tools_of(manager, view.tools)]
    finally:
        manager.close()
    if view.state != "ready" and not defs:
        raise HarnessError(_not_ready(view.config, view.state, view.error))
    for refused in view.refused:  # on stderr: --json's output stays the tools offered
        env.echo(f"not offered, its input schema is invalid: {refused}", err=True)
    rows: list[dict[str, Any]] = [
        {"name": d.name, "tokens": estimate_tool_tokens([d]), "description": d.description}
        for d in defs
    ]
    if as_json:
        env.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    if not rows:
        env.echo(f"server {name} lists no tools")
    for r in rows:
        first = r["description"].strip().splitlines()[0] if r["description"].strip() else ""
        env.echo(f"{r['name']}  ({r['tokens']} tokens)  {first}")


@mcp_app.command("approve", cls=HarnessCommand)
def approve_servers(
    ctx: typer.Context,
    names: Annotated[
        list[str] | None, typer.Argument(help="Servers of .mcp.json to approve.")
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Approve every server of .mcp.json.")] = False,
    workdir: WorkdirOpt = None,
) -> None:
    """Let servers of this directory's .mcp.json run (remembered; a changed entry asks again).

    Approvals are kept in $HARNESS9_HOME/mcp_approvals.json, per directory and per entry as
    written; --yes never approves a server, and config.toml's servers need no approval.
    An entry that is wrong is not approved: a line says why, the others are, and it exits 1.
    """
    from harness9.tools.mcp.project import SOURCE_PROJECT, approve

    env = environment(ctx)
    work, servers = _servers(workdir)
    project = {s.name: s for s in servers if s.source == SOURCE_PROJECT}
    if not names and not all_:
        raise UsageError("name the servers to approve, or pass --all")
    chosen = list(project) if all_ else list(names or [])
    if not chosen:
        env.echo(f"nothing to approve: {work / '.mcp.json'} names no server", err=True)
    configured = {s.name for s in servers if s.source != SOURCE_PROJECT}
    for name in chosen:
        if name in configured and name not in project:
            raise UsageError(f"server {name} is in config.toml: it runs without approval")
        if name not in project:
            known = ", ".join(project) or "none"
            raise UsageError(f"no server {name!r} in {work / '.mcp.json'} (servers: {known})")
    refused = [project[name] for name in chosen if project[name].invalid]
    for name in chosen:
        if not project[name].invalid:
            approve(work, project[name])
            env.echo(f"approved {name}: {describe_server(project[name])}")
    for bad in refused:  # the file's other servers are approved all the same
        env.echo(f"harness9: cannot approve {bad.name}: {bad.invalid}", err=True)
    if refused:
        raise typer.Exit(ExitCode.ERROR)


def _not_ready(server: McpServer, state: str, error: str) -> str:
    """Why ``mcp tools`` has no tools to show, and what to do about it."""
    from harness9.tools.mcp.manager import DISABLED, FAILED, NOT_APPROVED

    if state == FAILED:
        return f"server {server.name} failed: {error}"
    if state == NOT_APPROVED:
        return (
            f"server {server.name} of .mcp.json is not approved for this directory; "
            f"approve it with: harness9 mcp approve {server.name}"
        )
    if state == DISABLED:
        where = "config.toml" if server.source == "config" else server.source
        return f"server {server.name} is disabled (enabled = false in {where})"
    return f"server {server.name} is {state}"


def describe_server(server: McpServer) -> str:
    """What a server runs or reaches, in one line (the approval question shows it)."""
    if server.url:
        return server.url
    return " ".join([server.command, *server.args])


def chat_mcp(
    env: Environment, work: Path, cfg: dict[str, Any], err: Console, *, ask: bool, repl: bool
) -> McpTools | None:
    """The chat's MCP servers, connecting in the background (None: no server at all).

    A .mcp.json server not approved yet is asked about once at a terminal (``ask``); without
    one it stays off and a line says how to approve it. --yes never approves one."""
    from harness9.config import mcp_options
    from harness9.tools.mcp.manager import McpManager
    from harness9.tools.mcp.project import all_servers, approve, is_approved
    from harness9.tools.mcp.toolset import McpTools

    opts = mcp_options(cfg)
    try:
        servers = all_servers(opts.servers, work)
    except ConfigError as exc:  # a checked-out file's mistake: say so, chat without it
        err.print(f"mcp: {exc}; its servers were not started", style="yellow", markup=False)
        servers = list(opts.servers)
    if not servers:
        return None
    for bad in (s for s in servers if s.invalid):  # the others run all the same
        line = f"mcp: server {bad.name} {bad.invalid}"
        err.print(line, style="yellow", markup=False, highlight=False, soft_wrap=True)
    # Approved at the question this time: they run even when the answer cannot be saved.
    allowed = {
        s.name
        for s in servers
        if s.enabled
        and not s.invalid
        and not is_approved(work, s)
        and _ask_approval(env, work, s, err, ask, approve)
    }

    def notice(text: str) -> None:
        from harness9.ui.mcp_table import above_prompt

        above_prompt(
            lambda: err.print(text, style="yellow", markup=False, highlight=False, soft_wrap=True)
        )

    manager = McpManager(
        servers, approved=lambda s: s.name in allowed or is_approved(work, s), on_notice=notice
    )
    if not repl:
        # Nobody waits at a prompt: the first request may as well carry every tool. (The
        # REPL starts them once its prompt shows: ChatRun._on_shown.)
        _start_and_wait(manager)
    auto = frozenset(s.name for s in servers if s.auto_approve)
    placement = None if opts.loaded == "auto" else opts.loaded
    return McpTools(
        manager, defer=opts.defer, share=opts.defer_share, auto_approve=auto, placement=placement
    )


def _ask_approval(
    env: Environment, work: Path, server: McpServer, err: Console, ask: bool, approve: Any
) -> bool:
    """Ask (at a terminal) whether ``server`` may run; True when the user said yes."""
    what = describe_server(server)
    if ask:
        err.print(
            f"{work / '.mcp.json'} asks to start MCP server {server.name}: {what}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        err.print("Allow it (remembered for this directory)? [y/N] ", end="", markup=False)
        answer = env.stdin.readline()
        if answer.strip().lower() in ("y", "yes"):
            try:
                approve(work, server)
            except HarnessError as exc:
                err.print(
                    f"mcp: {exc}; it runs for this chat only",
                    style="yellow",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )
            return True
    err.print(
        f"mcp: server {server.name} of .mcp.json is not approved for this directory, so it "
        f"was not started; approve it with: harness9 mcp approve {server.name}",
        style="yellow",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    return False
