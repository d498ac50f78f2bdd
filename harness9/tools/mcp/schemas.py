"""Which MCP tools' input schemas a model provider accepts.

OpenAI and Anthropic check every tool definition of a request against JSON Schema (draft
2020-12) and refuse the whole request when one is not valid (OpenAI: ``Invalid schema for
function 'NAME': [] is not of type 'object', 'boolean'``; Anthropic: ``input_schema: JSON
schema is invalid``), and both want an object at the top. One such tool of one server
would fail every request of the chat, so it is not offered: its server is told apart in
one line, and the rest of the chat goes on.
"""

from __future__ import annotations

from typing import Any


def schema_problem(schema: Any) -> str | None:
    """Why a provider would refuse ``schema`` as a tool's input schema; None when it would
    not: a JSON Schema (draft 2020-12) of an object."""
    if not isinstance(schema, dict):
        return f"it is not a JSON object but {type(schema).__name__}"
    top = schema.get("type", "object")
    if top != "object":
        return f"its top level is of type {top!r}, not 'object'"
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        return f"{exc.message}" + (f" (at {where})" if where else "")
    return None
