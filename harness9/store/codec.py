"""The one codec for stored records: Message / ToolCall / Checkpoint <-> row and <-> JSON.

The SQLite store, export/import and ``--json`` output all read and write these
records through the functions here, so a field is named, ordered and encoded
in one place.

- A message's tool calls are stored as JSON text, ``[{"id", "name", "arguments"}]``
  (``ToolCall.to_flat``), and NULL when there are none; JSON output uses the
  same flat objects.
- A checkpoint's columns and its JSON keys are ``CHECKPOINT_FIELDS``, in that order;
  its recall index, stubs and state note (``CHECKPOINT_DETAIL_FIELDS``) live in the
  ``compaction_details`` table, one row when any is set, and follow in JSON.
"""

from __future__ import annotations

import json
from typing import Any

from harness9.schema import ROLES, Message, TodoItem, ToolCall
from harness9.store.session import Checkpoint, StoredMessage

TOOL_CALL_FIELDS = ("id", "name", "arguments")
# The compactions table's columns (after session_id) and the JSON keys, in one order.
CHECKPOINT_FIELDS = (
    "id",
    "last_message_id",
    "summary",
    "strategy",
    "tokens_before",
    "tokens_after",
    "messages_before",
    "messages_after",
    "created_at",
)
# What each checkpoint field holds, for readers that validate (import).
CHECKPOINT_TYPES: dict[str, type] = {
    "id": int,
    "last_message_id": int,
    "summary": str,
    "strategy": str,
    "tokens_before": int,
    "tokens_after": int,
    "messages_before": int,
    "messages_after": int,
    "created_at": float,
}
CHECKPOINT_COLUMNS = ", ".join(CHECKPOINT_FIELDS)
INSERT_CHECKPOINT = (
    f"INSERT INTO compactions (session_id, {CHECKPOINT_COLUMNS}) "
    f"VALUES (?, {', '.join('?' * len(CHECKPOINT_FIELDS))})"
)
CHECKPOINT_DETAIL_FIELDS = ("recall_index", "rewrites", "state_note")
# A session's checkpoints with their details (``compaction_details`` has no column named
# like one of ``compactions``, so the plain names stay unambiguous); append ORDER BY.
SELECT_CHECKPOINTS = (
    f"SELECT {CHECKPOINT_COLUMNS}, d.recall_index, d.rewrites, d.state_note, i.messages "
    "FROM compactions "
    "LEFT JOIN compaction_details AS d ON d.compaction_id = compactions.id "
    "LEFT JOIN compaction_instructions AS i ON i.compaction_id = compactions.id "
    "WHERE session_id = ?"
)
INSERT_CHECKPOINT_DETAILS = (
    "INSERT INTO compaction_details (compaction_id, recall_index, rewrites, state_note) "
    "VALUES (?, ?, ?, ?)"
)


class CorruptValueError(ValueError):
    """A stored value cannot be decoded; ``str(exc)`` says what is wrong with it."""


# -- tool calls ----------------------------------------------------------------------------


def calls_to_text(calls: list[ToolCall]) -> str | None:
    """The ``tool_calls`` column: JSON text of the flat calls, or None when there are none."""
    if not calls:
        return None
    return json.dumps([c.to_flat() for c in calls], ensure_ascii=False)


def calls_from_text(text: object) -> list[ToolCall]:
    """The inverse of ``calls_to_text``; raises CorruptValueError for anything else."""
    if text is None or text == "":
        return []
    if not isinstance(text, str):
        raise CorruptValueError(f"tool_calls is {_sql_type(text)}, not JSON text")
    try:
        data = json.loads(text)
    except ValueError:
        raise CorruptValueError("tool_calls is not valid JSON") from None
    try:
        calls = [ToolCall(c["id"], c["name"], c["arguments"]) for c in data]
    except (TypeError, KeyError):
        raise CorruptValueError("tool_calls is not a list of tool calls") from None
    for c in calls:
        if not all(isinstance(v, str) for v in (c.id, c.name, c.arguments)):
            raise CorruptValueError("tool_calls is not a list of tool calls")
    return calls


def _sql_type(value: object) -> str:
    """How a stored value that should be text is described in a corrupt-row warning."""
    if isinstance(value, bytes):
        return "a BLOB"
    if value is None:
        return "NULL"
    return "a number" if isinstance(value, int | float) else type(value).__name__


# -- messages ------------------------------------------------------------------------------


def message_values(m: Message) -> tuple[str, str, str | None, str | None]:
    """``(role, content, tool_calls, tool_call_id)`` as the messages table stores them."""
    return m.role, m.content, calls_to_text(m.tool_calls), m.tool_call_id or None


def message_from_values(
    role: object, content: object, calls_text: object, tool_call_id: object
) -> Message:
    """The inverse of ``message_values``; raises CorruptValueError for any damaged value.

    Every column is checked: a row edited by hand or damaged on disk (a BLOB where text
    belongs, a role no API knows) is reported and skipped by readers, never handed on
    to a renderer or to the model.
    """
    if not isinstance(role, str):
        raise CorruptValueError(f"role is {_sql_type(role)}, not text")
    if role not in ROLES:
        raise CorruptValueError(f"role {role[:40]!r} is not one of {', '.join(ROLES)}")
    if not isinstance(content, str):
        raise CorruptValueError(f"content is {_sql_type(content)}, not text")
    if tool_call_id is not None and not isinstance(tool_call_id, str):
        raise CorruptValueError(f"tool_call_id is {_sql_type(tool_call_id)}, not text")
    return Message(role, content, calls_from_text(calls_text), tool_call_id or "")


def record_to_json(rec: StoredMessage) -> dict[str, Any]:
    """A stored message as JSON: export files and ``sessions show --json`` alike."""
    msg = rec.message
    return {
        "id": rec.id,
        "role": msg.role,
        "content": msg.content,
        "tool_calls": [c.to_flat() for c in msg.tool_calls],
        "tool_call_id": msg.tool_call_id or None,
        "created_at": rec.created_at,
    }


# -- checkpoints ---------------------------------------------------------------------------


def checkpoint_values(cp: Checkpoint) -> tuple[Any, ...]:
    """The checkpoint's values in ``CHECKPOINT_FIELDS`` order; an id of 0 is None (SQLite picks)."""
    return (cp.id or None, *(getattr(cp, name) for name in CHECKPOINT_FIELDS[1:]))


def checkpoint_from_values(values: tuple[Any, ...] | list[Any]) -> Checkpoint:
    """A checkpoint from its values in ``CHECKPOINT_FIELDS`` order (a row, for one),
    optionally followed by its ``CHECKPOINT_DETAIL_FIELDS`` values (NULL: none)."""
    base = len(CHECKPOINT_FIELDS)
    cp = Checkpoint(**dict(zip(CHECKPOINT_FIELDS, values[:base], strict=True)))
    if len(values) > base:
        index, rewrites, state, *instructions = values[base:]
        cp.recall_index = index or ""
        cp.rewrites = decode_rewrites(rewrites or "")
        cp.state_note = state or ""
        cp.instructions = decode_instructions(instructions[0] if instructions else "")
    return cp


def checkpoint_details(cp: Checkpoint) -> tuple[str, str, str] | None:
    """The ``compaction_details`` values, or None when the checkpoint has none."""
    if not (cp.recall_index or cp.rewrites or cp.state_note):
        return None
    return cp.recall_index, encode_rewrites(cp.rewrites), cp.state_note


def checkpoint_to_json(cp: Checkpoint) -> dict[str, Any]:
    """A checkpoint as JSON: export files and ``sessions show --json`` alike."""
    out = {name: getattr(cp, name) for name in CHECKPOINT_FIELDS}
    out["recall_index"] = cp.recall_index
    out["rewrites"] = {str(k): v for k, v in sorted(cp.rewrites.items())}
    out["state_note"] = cp.state_note
    out["instructions"] = list(cp.instructions)
    return out


def encode_instructions(messages: list[str]) -> str:
    """The ``compaction_instructions`` value: a JSON list of the kept user messages."""
    return json.dumps(messages, ensure_ascii=False)


def decode_instructions(text: str | list[Any] | None) -> list[str]:
    """The kept user messages (stored JSON text, or the JSON list itself); a damaged
    value reads as none."""
    if not text:
        return []
    try:
        raw = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return []
    return [m for m in raw if isinstance(m, str)] if isinstance(raw, list) else []


def encode_rewrites(rewrites: dict[int, str]) -> str:
    if not rewrites:
        return ""
    return json.dumps({str(k): v for k, v in sorted(rewrites.items())}, ensure_ascii=False)


def decode_rewrites(text: str) -> dict[int, str]:
    """The stored stubs; a damaged value reads as none (the view then shows the originals)."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
        return {int(k): str(v) for k, v in raw.items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def encode_todos(items: list[TodoItem]) -> str:
    """A todo list as ``todo_lists.items`` keeps it: JSON [{content, status}], in order."""
    return json.dumps([{"content": t.content, "status": t.status} for t in items])


def decode_todos(text: str) -> list[TodoItem]:
    """``encode_todos``'s text back; CorruptValueError for anything else."""
    try:
        raw = json.loads(text)
        return [TodoItem(str(t["content"]), str(t["status"])) for t in raw]
    except (ValueError, TypeError, KeyError) as exc:
        raise CorruptValueError(f"todo list is not a JSON list of items ({exc})") from exc
