"""A small JSON-schema subset check for tool arguments.

Covers what our tool schemas use (type, required, properties, items, enum,
minimum, maximum) so a tool's ``run`` can trust its arguments' shape; models
do produce wrong types, and those must come back as a clear error result.

An MCP server's schemas are anyone's JSON Schema: boolean subschemas (``true``), keywords
holding what this subset does not read (``"required": "x"``). Whatever the check cannot
read is left to the server, which validates its own arguments; it never raises.
"""

from __future__ import annotations

from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _type_name(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "array", "object", "null"):
        if isinstance(value, _TYPES[name]):
            return name
    return type(value).__name__


def _is_type(value: Any, expected: str) -> bool:
    if expected in ("integer", "number") and isinstance(value, bool):
        return False  # JSON true is not a number, though Python's bool is an int
    kinds = _TYPES.get(expected)
    return kinds is None or isinstance(value, kinds)


def validate(value: Any, schema: dict[str, Any], where: str = "") -> list[str]:
    """Problems with ``value`` against ``schema``, each naming where it is; [] when valid."""
    if not isinstance(schema, dict):  # `true`, `false` or a malformed subschema: the server's
        return []
    label = where or "arguments"
    expected = schema.get("type")
    if isinstance(expected, str) and not _is_type(value, expected):
        return [f"{label} must be {_article(expected)} {expected}, got {_type_name(value)}"]
    problems: list[str] = []
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        allowed = ", ".join(str(v) for v in enum)
        problems.append(f"{label} must be one of: {allowed} (got {value!r})")
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = _number(schema.get("minimum")), _number(schema.get("maximum"))
        if low is not None and value < low:
            problems.append(f"{label} must be at least {low} (got {value})")
        if high is not None and value > high:
            problems.append(f"{label} must be at most {high} (got {value})")
    if isinstance(value, dict):
        required = schema.get("required")
        for name in required if isinstance(required, list) else []:
            if isinstance(name, str) and name not in value:
                problems.append(f"missing required parameter {_join(where, name)!r}")
        properties = schema.get("properties")
        for name, sub in properties.items() if isinstance(properties, dict) else ():
            if name in value:
                problems += validate(value[name], sub, _join(where, name))
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problems += validate(item, schema["items"], f"{label}[{i}]")
    return problems


def _number(bound: Any) -> int | float | None:
    """A numeric bound, or None for a missing or unreadable one."""
    return bound if isinstance(bound, int | float) and not isinstance(bound, bool) else None


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"
