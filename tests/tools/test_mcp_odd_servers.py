"""MCP servers as they come in the wild, against a real SDK server
(tests/support/mcp_odd.py): schemas harness9's own argument check cannot read, and tool
names that collide once made into names a model can call."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.cli import chat
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
