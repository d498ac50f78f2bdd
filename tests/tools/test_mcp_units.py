"""The pure parts of the MCP client: tool names, content mapping, .mcp.json, config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness9.config import McpServer, _mcp_options
from harness9.errors import ConfigError
from harness9.tools.mcp.content import render_content
from harness9.tools.mcp.project import approve, is_approved, project_servers
from harness9.tools.mcp.toolset import tool_name


def test_a_tool_is_named_mcp_server_tool():
    assert tool_name("github", "create_issue") == "mcp__github__create_issue"


def test_characters_the_apis_refuse_in_a_name_are_replaced():
    assert tool_name("fs", "read.file/v2") == "mcp__fs__read_file_v2"


def test_a_long_name_is_cut_to_64_and_two_long_names_stay_apart():
    a, b = tool_name("srv", "x" * 80 + "a"), tool_name("srv", "x" * 80 + "b")
    assert len(a) == len(b) == 64
    assert a != b


def test_text_passes_as_it_is_and_parts_are_joined_by_lines():
    content = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    assert render_content(content, None) == "one\ntwo"


def test_an_image_is_named_with_its_type_and_size():
    png = {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}
    assert render_content([png], None) == "[image image/png, 8 bytes, not shown: text only]"


def test_a_text_resource_comes_with_its_uri():
    res = {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "hello"}}
    assert render_content([res], None) == "[resource file:///a.txt]\nhello"


def test_a_resource_link_is_named():
    link = {"type": "resource_link", "uri": "file:///b", "name": "b"}
    assert render_content([link], None) == "[resource link file:///b: b]"


def test_structured_content_alone_is_shown_as_json():
    assert json.loads(render_content([], {"count": 3})) == {"count": 3}


def test_no_content_at_all_says_so():
    assert render_content([], None) == "(no output)"


def write(workdir: Path, servers: object) -> None:
    (workdir / ".mcp.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")


def test_mcp_json_stdio_and_http_servers_are_read(workdir):
    write(
        workdir,
        {
            "fs": {"command": "npx", "args": ["-y", "server-fs"], "env": {"A": "1"}},
            "web": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X": "y"}},
        },
    )
    fs, web = project_servers(workdir)
    assert (fs.name, fs.transport, fs.args, fs.env) == (
        "fs",
        "stdio",
        ("-y", "server-fs"),
        (("A", "1"),),
    )
    assert (web.transport, web.url, web.headers, web.source) == (
        "http",
        "http://127.0.0.1:9/mcp",
        (("X", "y"),),
        ".mcp.json",
    )


def test_an_sse_server_in_mcp_json_is_refused_with_the_reason(workdir):
    write(workdir, {"old": {"type": "sse", "url": "http://127.0.0.1:9/sse"}})
    (old,) = project_servers(workdir)
    assert old.invalid == (
        f"not started: its entry in {workdir / '.mcp.json'}: "
        "transport 'sse' is not supported (stdio or http)"
    )


def test_a_mcp_json_that_is_not_json_is_one_line(workdir):
    (workdir / ".mcp.json").write_text("{nope", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\.mcp\.json is not valid JSON"):
        project_servers(workdir)


def test_an_approval_is_for_the_directory_and_the_entry_as_written(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    server = McpServer("fs", source=".mcp.json", command="npx", args=("server-fs",))
    approve(a, server)
    assert is_approved(a, server)
    assert not is_approved(b, server)
    changed = McpServer("fs", source=".mcp.json", command="npx", args=("evil",))
    assert not is_approved(a, changed)


def test_config_servers_need_no_approval(tmp_path):
    assert is_approved(tmp_path, McpServer("fs", command="x"))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"servers": {"a": {}}}, "set either command"),
        ({"servers": {"a": {"command": "x", "url": "http://h"}}}, "set either command"),
        ({"servers": {"a": {"command": "x", "timeout": 0}}}, "timeout must be a positive"),
        ({"servers": {"a b": {"command": "x"}}}, "server name is 1-32"),
        ({"servers": {"a": {"command": "x", "colour": 1}}}, "unknown key colour"),
        ({"defer": "sometimes"}, "mcp.defer"),
        ({"defer_share": 2}, "mcp.defer_share"),
    ],
)
def test_bad_mcp_config_is_one_line(table, message):
    with pytest.raises(ConfigError, match=message):
        _mcp_options({"mcp": table}, Path("config.toml"))


def test_closing_the_manager_stops_every_stdio_servers_process(tmp_path):
    import os
    import sys
    import time

    from harness9.tools.mcp.manager import McpManager

    demo = str(Path(__file__).parents[1] / "support" / "mcp_demo.py")
    marker = tmp_path / "pids"
    servers = [
        McpServer(n, command=sys.executable, args=(demo, "--marker", str(marker))) for n in "ab"
    ]
    manager = McpManager(servers)
    manager.start()
    manager.wait_ready()
    pids = [int(line.split()[1]) for line in marker.read_text().splitlines()]
    manager.close()
    time.sleep(0.5)
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive.append(pid)
        except ProcessLookupError:
            pass
    assert len(pids) == 2
    assert alive == []


def test_mcp_json_expands_environment_variables_and_defaults(workdir, monkeypatch):
    monkeypatch.setenv("GH_TOKEN", "ghp_secret")
    write(
        workdir,
        {
            "gh": {
                "command": "gh-mcp",
                "args": ["--host", "${GH_HOST:-github.com}"],
                "env": {"TOKEN": "${GH_TOKEN}"},
            }
        },
    )
    (gh,) = project_servers(workdir)
    assert gh.args == ("--host", "github.com")
    assert gh.env == (("TOKEN", "ghp_secret"),)


def test_an_unset_variable_without_a_default_is_one_line(workdir, monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    write(workdir, {"gh": {"command": "x", "env": {"T": "${NOT_SET_ANYWHERE}"}}})
    (gh,) = project_servers(workdir)
    assert gh.invalid == (
        f"not started: its entry in {workdir / '.mcp.json'}: "
        "${NOT_SET_ANYWHERE} is not set in the environment"
    )


def test_a_servers_read_only_hint_reaches_the_tools_definition():
    """The smart trigger looks further ahead while the recent calls mostly read; a server
    tool counts as a read when the server says so (``readOnlyHint``), never by its name."""
    import sys

    from harness9.tools.mcp.manager import McpManager
    from harness9.tools.mcp.toolset import McpToolset

    demo = str(Path(__file__).parents[1] / "support" / "mcp_demo.py")
    manager = McpManager([McpServer("demo", command=sys.executable, args=(demo,))])
    manager.start()
    try:
        manager.wait_ready()
        definitions = McpToolset(manager, window=1_000_000, defer="never").definitions()
    finally:
        manager.close()
    reads = {d.name: d.reads for d in definitions}
    assert reads["mcp__demo__reverse"] is True
    assert reads["mcp__demo__add"] is False
    assert reads["mcp__demo__crash"] is False
