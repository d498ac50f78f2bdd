"""MCP servers as they come in the wild, against a real SDK server
(tests/support/mcp_odd.py): schemas harness9's own argument check cannot read, and tool
names that collide once made into names a model can call."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support.cli import chat, cli
from tests.tools.test_mcp import configure, script, tool_messages

ODD = str(Path(__file__).parents[1] / "support" / "mcp_odd.py")


def odd() -> dict:
    return {"command": sys.executable, "args": [ODD], "timeout": 20}


def test_a_tool_whose_valid_schema_the_check_cannot_read_still_runs(
    llm_server, harness9_home, workdir
):
    configure(harness9_home, {"odd": odd()})
    script(llm_server, ("c1", "mcp__odd__boolean_subschema", {"x": 1}))  # "x": true

    result = chat(llm_server, "go\n", "--yes", workdir=workdir)

    assert result.exit_code == 0, result.output
    assert tool_messages(llm_server.requests[1]) == ['boolean_subschema ran with {"x": 1}']


INVALID = ("required_string", "properties_list", "minimum_string")


def test_a_tool_whose_input_schema_providers_refuse_is_not_offered_and_the_chat_goes_on(
    llm_server, harness9_home, workdir
):
    """The scripted server refuses a request whose tools hold an invalid schema, as OpenAI
    does (``Invalid schema for function …``): offered, one such tool fails every request."""
    configure(harness9_home, {"odd": odd()})
    llm_server.reply_text("fine")

    result = chat(llm_server, "go\n", "--yes", workdir=workdir)

    assert result.exit_code == 0, result.output
    [request] = llm_server.requests
    offered = [t["function"]["name"] for t in request["tools"]]
    assert "mcp__odd__boolean_subschema" in offered
    assert not any(f"mcp__odd__{tool}" in offered for tool in INVALID)
    [notice] = [line for line in result.stderr.splitlines() if "not offering" in line]
    assert notice.startswith("mcp: server odd: not offering required_string (")
    assert "properties_list ([{'x': {'type': 'string'}}] is not of type 'object'" in notice
    assert "minimum_string ('1' is not of type 'number' (at properties/n/minimum))" in notice


def test_mcp_tools_names_the_tools_it_does_not_offer_on_stderr(harness9_home, workdir):
    configure(harness9_home, {"odd": odd()})

    result = cli("mcp", "tools", "odd", "--json")

    assert result.exit_code == 0, result.output
    assert "mcp__odd__boolean_subschema" in [row["name"] for row in json.loads(result.stdout)]
    refused = [line for line in result.stderr.splitlines() if line.startswith("not offered")]
    assert [line.split(": ", 1)[1].split(" (")[0] for line in refused] == list(INVALID)


def listed_tools() -> dict[str, str]:
    """``mcp tools odd --json``: each called name and its description."""
    result = cli("mcp", "tools", "odd", "--json")
    assert result.exit_code == 0, result.output
    return {row["name"]: row["description"] for row in json.loads(result.stdout)}


def test_two_tools_whose_names_collide_once_made_callable_are_listed_apart(harness9_home, workdir):
    configure(harness9_home, {"odd": odd()})

    listed = listed_tools()

    assert len(listed) == 3  # and the three whose schema is invalid, not offered
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
