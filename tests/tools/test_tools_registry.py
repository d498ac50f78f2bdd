"""ToolRegistry: definitions for the model, and execute() turning every mistake into a result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness9.schema import ToolCall, ToolDefinition
from harness9.tools import ToolContext, ToolRegistry, ToolResult, default_registry
from tests.support.tools import make_ctx, run_raw, run_tool


class ExplodingTool:
    name = "explode"

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def definition(self) -> ToolDefinition:
        return ToolDefinition(name=self.name, description="Raises.")

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raise self.exc


def test_default_registry_holds_the_six_tools_in_order() -> None:
    assert default_registry().names() == [
        "bash",
        "read_file",
        "write_file",
        "edit_file",
        "write_todos",
        "read_todos",
    ]


def test_definitions_are_json_serialisable_object_schemas_with_required_params() -> None:
    defs = {d.name: d.to_dict() for d in default_registry().definitions()}
    required = {name: d["function"]["parameters"].get("required", []) for name, d in defs.items()}
    assert required == {
        "bash": ["command"],
        "read_file": ["path"],
        "write_file": ["path", "content"],
        "edit_file": ["path", "old_string", "new_string"],
        "write_todos": ["todos"],
        "read_todos": [],
    }
    for d in defs.values():
        assert d["type"] == "function"
        assert d["function"]["parameters"]["type"] == "object"
        assert d["function"]["description"]
    json.dumps(defs)  # the provider sends these as JSON


def test_unknown_tool_is_an_error_listing_the_available_tools(tmp_path: Path) -> None:
    result = run_raw(make_ctx(tmp_path), "delete_everything", "{}")
    assert result.is_error
    assert result.content == (
        "error: unknown tool 'delete_everything'; available tools: "
        "bash, read_file, write_file, edit_file, write_todos, read_todos"
    )


def test_malformed_json_arguments_are_an_error_result(tmp_path: Path) -> None:
    result = run_raw(make_ctx(tmp_path), "read_file", '{"path": "a.txt"')
    assert result.is_error
    assert result.content.startswith("error: the arguments for read_file are not valid JSON")


def test_arguments_that_are_not_an_object_are_an_error_result(tmp_path: Path) -> None:
    result = run_raw(make_ctx(tmp_path), "read_file", '["a.txt"]')
    assert result.is_error
    assert result.content == "error: the arguments for read_file must be a JSON object, got list"


def test_empty_arguments_mean_no_parameters(tmp_path: Path) -> None:
    assert run_raw(make_ctx(tmp_path), "read_file", "").content == (
        "error: invalid arguments for read_file: missing required parameter 'path'"
    )


def test_missing_required_parameter_is_an_error_result(tmp_path: Path) -> None:
    result = run_tool(make_ctx(tmp_path), "write_file", path="a.txt")
    assert result.is_error
    assert result.content == (
        "error: invalid arguments for write_file: missing required parameter 'content'"
    )
    assert not (tmp_path / "a.txt").exists()


def test_wrong_parameter_type_is_an_error_result(tmp_path: Path) -> None:
    result = run_tool(make_ctx(tmp_path), "read_file", path="a.txt", offset="3")
    assert result.is_error
    assert result.content == (
        "error: invalid arguments for read_file: offset must be an integer, got string"
    )


def test_boolean_is_not_accepted_as_an_integer(tmp_path: Path) -> None:
    result = run_tool(make_ctx(tmp_path), "read_file", path="a.txt", limit=True)
    assert result.content == (
        "error: invalid arguments for read_file: limit must be an integer, got boolean"
    )


def test_nested_item_problems_name_their_position(tmp_path: Path) -> None:
    result = run_tool(make_ctx(tmp_path), "write_todos", todos=[{"content": "a"}])
    assert result.content == (
        "error: invalid arguments for write_todos: missing required parameter 'todos[0].status'"
    )


def test_an_exception_inside_a_tool_becomes_an_error_result(tmp_path: Path) -> None:
    registry = ToolRegistry([ExplodingTool(RuntimeError("disk on fire"))])
    result = registry.execute(ToolCall(id="c", name="explode", arguments="{}"), make_ctx(tmp_path))
    assert result.is_error
    assert result.content == "error: explode failed: RuntimeError: disk on fire"


def test_keyboard_interrupt_inside_a_tool_propagates(tmp_path: Path) -> None:
    registry = ToolRegistry([ExplodingTool(KeyboardInterrupt())])
    with pytest.raises(KeyboardInterrupt):
        registry.execute(ToolCall(id="c", name="explode", arguments="{}"), make_ctx(tmp_path))


def test_registering_the_same_name_twice_is_refused() -> None:
    registry = ToolRegistry([ExplodingTool(RuntimeError())])
    with pytest.raises(ValueError, match="already registered"):
        registry.register(ExplodingTool(RuntimeError()))


def test_get_returns_none_for_an_unknown_name() -> None:
    registry = default_registry()
    assert registry.get("nope") is None
    assert registry.get("bash") is not None


def test_the_tools_that_read_content_in_declare_it_and_task_declares_its_sub_agent() -> None:
    from harness9.tools.history_search import HistorySearchTool
    from harness9.tools.offload_recall import OffloadRecallTool
    from harness9.tools.task import TaskTool

    tools = [*default_registry().definitions()]
    tools += [HistorySearchTool().definition(), OffloadRecallTool(None).definition()]
    tools.append(TaskTool(runner=None).definition())  # type: ignore[arg-type]
    # history_search and read_todos only read too, but bring back a few lines the session
    # already holds: they do not count as reads for the smart trigger.
    assert {t.name for t in tools if t.reads} == {"read_file", "offload_recall"}
    assert [t.name for t in tools if t.sub_agent] == ["task"]
    # What the smart trigger reads is never sent to the model.
    assert all(set(t.to_dict()["function"]) == {"name", "description", "parameters"} for t in tools)
