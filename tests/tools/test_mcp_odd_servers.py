"""MCP servers as they come in the wild, against a real SDK server
(tests/support/mcp_odd.py): schemas harness9's own argument check cannot read, and tool
names that collide once made into names a model can call."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.cli import chat, cli
from tests.tools.test_mcp import configure, script, tool_messages

ODD = str(Path(__file__).parents[1] / "support" / "mcp_odd.py")


def odd() -> dict:
    return {"command": sys.executable, "args": [ODD], "timeout": 20}


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("boolean_subschema", {"x": 1}),
        ("required_string", {"text": "a"}),
        ("properties_list", {"x": "a"}),
        ("minimum_string", {"n": 5}),
    ],
)
def test_a_tool_whose_schema_the_check_cannot_read_still_runs(
    llm_server, harness9_home, workdir, tool, args
):
    configure(harness9_home, {"odd": odd()})
    script(llm_server, ("c1", f"mcp__odd__{tool}", args))

    result = chat(llm_server, "go\n", "--yes", workdir=workdir)

    assert result.exit_code == 0, result.output
    assert tool_messages(llm_server.requests[1]) == [
        f"{tool} ran with {json.dumps(args, sort_keys=True)}"
    ]


def listed_tools() -> dict[str, str]:
    """``mcp tools odd --json``: each called name and its description."""
    result = cli("mcp", "tools", "odd", "--json")
    assert result.exit_code == 0, result.output
    return {row["name"]: row["description"] for row in json.loads(result.stdout)}


def test_two_tools_whose_names_collide_once_made_callable_are_listed_apart(harness9_home, workdir):
    configure(harness9_home, {"odd": odd()})

    listed = listed_tools()

    assert len(listed) == 6
    assert listed["mcp__odd__dot_name"] == "The tool dot.name."
    [other] = [n for n, d in listed.items() if d == "The tool dot_name."]
    assert other.startswith("mcp__odd__dot_name_") and len(other) == len("mcp__odd__dot_name_") + 8


def test_the_second_of_two_colliding_tools_is_called_by_its_own_name(
    llm_server, harness9_home, workdir
):
    configure(harness9_home, {"odd": odd()})
    [other] = [n for n, d in listed_tools().items() if d == "The tool dot_name."]
    script(llm_server, ("c1", "mcp__odd__dot_name", {}), ("c2", other, {}))

    result = chat(llm_server, "go\n", "--yes", workdir=workdir)

    assert result.exit_code == 0, result.output
    assert tool_messages(llm_server.requests[2]) == [
        "dot.name ran with {}",
        "dot_name ran with {}",
    ]
