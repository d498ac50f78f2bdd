"""The one codec for stored records: Message / ToolCall / Checkpoint <-> row and <-> JSON.

The SQLite store, export/import and ``--json`` output all read and write these
records through the functions here, so a field is named, ordered and encoded
in one place.

- A message's tool calls are stored as JSON text, ``[{"id", "name", "arguments"}]``
  (``ToolCall.to_flat``), and NULL when there are none; JSON output uses the
  same flat objects.
- A tool result stored as its offload's summary carries the link as data
  (``offload_id``, ``offload_tokens``; JSON ``"offload": {"id", "tokens"}``, null when
  not offloaded); rows and files from before are read by harness9.store.legacy_offload.
- A tool result's run facts (``Message.metadata``, harness9.schema ``result_metadata``:
  a command's exit code) are stored as JSON text in ``metadata`` (JSON ``"metadata"``),
  NULL/null for any other message and for rows and files from before they were kept.
- A checkpoint's columns and its JSON keys are ``CHECKPOINT_FIELDS``, in that order;
  its data (recall entries, stubs, state items: ``details_to_json``) is one JSON value
  in the ``compaction_data`` table, one row when any is set, and the same keys follow
  in JSON. Rows stored before that keep prose in ``compaction_details``, read by
  harness9.store.legacy_checkpoint.
- The facts a checkpoint's summary keeps (``Checkpoint.facts``) are a JSON list of
  ``"<kind>: <value>"`` text in the ``compactions.facts`` column (JSON ``"facts"``);
  NULL/null for a checkpoint stored before they were kept.
"""

from __future__ import annotations

import json
from typing import Any

from harness9.schema import ROLES, TODO_STATUSES, Message, TodoItem, ToolCall, result_metadata
from harness9.store.legacy_checkpoint import read_legacy_details
from harness9.store.legacy_offload import legacy_offload
from harness9.store.session import (
    STUB_KINDS,
    Checkpoint,
    OffloadLink,
    RecallEntry,
    StoredMessage,
    Stub,
)

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
# A session's checkpoints with their data, then (for rows stored before checkpoints were
# data) their old prose details, then the kept instructions; append ORDER BY. No joined
# table has a column named like one of ``compactions``, so the plain names are unambiguous.
SELECT_CHECKPOINTS_FROM = (
    "FROM compactions "
    "LEFT JOIN compaction_data AS s ON s.compaction_id = compactions.id "
    "LEFT JOIN compaction_details AS d ON d.compaction_id = compactions.id "
    "LEFT JOIN compaction_instructions AS i ON i.compaction_id = compactions.id "
)
CHECKPOINT_EXTRA_COLUMNS = (
    "s.data, d.recall_index, d.rewrites, d.state_note, i.messages, compactions.facts"
)


def select_checkpoints(param: str) -> str:
    """The statement reading a session's checkpoints (``checkpoint_from_values`` decodes)."""
    return (
        f"SELECT {CHECKPOINT_COLUMNS}, {CHECKPOINT_EXTRA_COLUMNS} {SELECT_CHECKPOINTS_FROM}"
        f"WHERE session_id = {param}"
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


def message_values(
    m: Message, offload: OffloadLink | None = None
) -> tuple[str, str, str | None, str | None, str, int | None, str | None]:
    """``(role, content, tool_calls, tool_call_id, offload_id, offload_tokens, metadata)``
    as the messages table stores them; a result not offloaded has offload_id "" (NULL is
    left for rows stored before links were data, harness9.store.legacy_offload)."""
    oid, tokens = (offload.offload_id, offload.tokens) if offload is not None else ("", None)
    calls, call_id = calls_to_text(m.tool_calls), m.tool_call_id or None
    return m.role, m.content, calls, call_id, oid, tokens, metadata_to_text(m.metadata)


def metadata_to_text(metadata: dict[str, Any] | None) -> str | None:
    """The ``metadata`` column's value: JSON text of the facts the log keeps, None for none."""
    if metadata is None:
        return None
    return json.dumps(result_metadata(metadata), sort_keys=True, separators=(",", ":"))


def metadata_from_value(value: object) -> dict[str, Any] | None:
    """The inverse of ``metadata_to_text`` (its JSON text, or the decoded object an export
    holds). None (NULL) for a row stored before results' metadata was kept; a damaged
    value reads as none too, so a reader falls back to what it did for those rows."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return result_metadata(value) if isinstance(value, dict) else None


def message_from_values(
    role: object, content: object, calls_text: object, tool_call_id: object
) -> Message:
    """The inverse of ``message_values``' first four; raises CorruptValueError for any
    damaged value.

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


def offload_from_values(msg: Message, offload_id: object, tokens: object) -> OffloadLink | None:
    """The link ``message_values`` stored for ``msg``; a row stored before links were data
    (offload_id NULL) is read by its text. A damaged link reads as none: the result is
    then shown and measured as the text it is."""
    if offload_id is None:
        return legacy_offload(msg.role, msg.content)
    if not offload_id or not isinstance(offload_id, str):
        return None
    try:
        return OffloadLink(offload_id, _int(tokens))
    except ValueError:
        return None


def offload_to_json(link: OffloadLink | None) -> dict[str, Any] | None:
    return None if link is None else {"id": link.offload_id, "tokens": link.tokens}


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
        "offload": offload_to_json(rec.offload),
        "metadata": None if msg.metadata is None else result_metadata(msg.metadata),
    }


# -- checkpoints ---------------------------------------------------------------------------


def checkpoint_values(cp: Checkpoint) -> tuple[Any, ...]:
    """The checkpoint's values in ``CHECKPOINT_FIELDS`` order; an id of 0 is None (SQLite picks)."""
    return (cp.id or None, *(getattr(cp, name) for name in CHECKPOINT_FIELDS[1:]))


def checkpoint_from_values(values: tuple[Any, ...] | list[Any]) -> Checkpoint:
    """A checkpoint from its values in ``CHECKPOINT_FIELDS`` order (a row, for one),
    optionally followed by the ``CHECKPOINT_EXTRA_COLUMNS`` values (NULL: none)."""
    base = len(CHECKPOINT_FIELDS)
    cp = Checkpoint(**dict(zip(CHECKPOINT_FIELDS, values[:base], strict=True)))
    if len(values) > base:
        data, index, rewrites, note, instructions, facts = values[base:]
        if data:
            read_details(cp, data)
        elif index or rewrites or note:  # stored before checkpoints were data
            read_legacy_details(cp, index or "", rewrites or "", note or "")
        cp.instructions = decode_instructions(instructions or "")
        cp.facts = decode_facts(facts)
    return cp


def details_to_json(cp: Checkpoint) -> dict[str, Any]:
    """The checkpoint's data (recall, stubs, state) as JSON: stored, exported, shown."""
    return {
        "recall": [
            {"handle": e.handle, "tool": e.tool, "key_argument": e.key_argument, "tokens": e.tokens}
            for e in cp.recall
        ],
        "recall_overflow": cp.recall_overflow,
        "stubs": {
            str(k): {"kind": s.kind, "tokens": s.tokens, "offload_id": s.offload_id, "text": s.text}
            for k, s in sorted(cp.stubs.items())
        },
        "state": [{"content": t.content, "status": t.status} for t in cp.state],
    }


def encode_details(cp: Checkpoint) -> str | None:
    """The ``compaction_data`` value (JSON text), or None when the checkpoint has none."""
    if not cp.has_details:
        return None
    return json.dumps(details_to_json(cp), ensure_ascii=False, separators=(",", ":"))


def details_from_json(
    data: object,
) -> tuple[list[RecallEntry], int, dict[int, Stub], list[TodoItem]]:
    """The inverse of ``details_to_json``; raises CorruptValueError naming the first fault."""
    if not isinstance(data, dict):
        raise CorruptValueError("the checkpoint data is not an object")
    try:
        recall = [
            RecallEntry(
                _text(e["handle"]), _text(e["tool"]), _text(e["key_argument"]), _int(e["tokens"])
            )
            for e in data.get("recall", [])
        ]
        overflow = _int(data.get("recall_overflow", 0))
        stubs = {
            int(k): Stub(
                _kind(s["kind"]), _int(s["tokens"]), _text(s["offload_id"]), _text(s["text"])
            )
            for k, s in data.get("stubs", {}).items()
        }
        state = [TodoItem(_text(t["content"]), _status(t["status"])) for t in data.get("state", [])]
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        raise CorruptValueError(f"the checkpoint data is damaged ({exc})") from None
    return recall, overflow, stubs, state


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r:.40} is not text")
    return value


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r:.40} is not a count")
    return value


def _kind(value: object) -> str:
    if value not in STUB_KINDS:
        raise ValueError(f"{value!r:.40} is not a stub kind")
    return str(value)


def _status(value: object) -> str:
    if value not in TODO_STATUSES:
        raise ValueError(f"{value!r:.40} is not a todo status")
    return str(value)


def read_details(cp: Checkpoint, data: str | dict[str, Any]) -> None:
    """Fill ``cp``'s data from its stored JSON text; a damaged value reads as none (the
    view then shows the summary alone and the original messages)."""
    try:
        raw = json.loads(data) if isinstance(data, str) else data
        cp.recall, cp.recall_overflow, cp.stubs, cp.state = details_from_json(raw)
    except (ValueError, CorruptValueError):
        return


def checkpoint_to_json(cp: Checkpoint) -> dict[str, Any]:
    """A checkpoint as JSON: export files and ``sessions show --json`` alike."""
    out = {name: getattr(cp, name) for name in CHECKPOINT_FIELDS}
    out.update(details_to_json(cp))
    out["instructions"] = list(cp.instructions)
    out["facts"] = None if cp.facts is None else list(cp.facts)
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


def encode_facts(facts: list[str] | None) -> str | None:
    """The ``compactions.facts`` value: JSON text of the kept facts, None when not known."""
    # ASCII JSON: a fact may quote a tool's output, lone surrogates and all.
    return None if facts is None else json.dumps(facts)


def decode_facts(value: object) -> list[str] | None:
    """The inverse of ``encode_facts`` (its JSON text, or the list an export holds). None
    (NULL) for a checkpoint stored before facts were kept; a damaged value reads as none
    too, so the next compaction reads that summary's facts from its text as for those."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
        return None
    return list(value)


def encode_count_samples(samples: tuple[tuple[int, int], ...]) -> str:
    """The ``session_settings.count_samples`` value: JSON [[estimate, reported], ...]."""
    return json.dumps([[e, a] for e, a in samples])


def decode_count_samples(value: object) -> tuple[tuple[int, int], ...]:
    """The inverse of ``encode_count_samples``. A row stored before samples were kept ('')
    and a damaged value read as none: the count is then learnt again from the next reply."""
    try:
        raw = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return ()
    if not isinstance(raw, list):
        return ()
    pairs = [p for p in raw if isinstance(p, list) and len(p) == 2]
    if len(pairs) != len(raw) or not all(_positive(n) for p in pairs for n in p):
        return ()
    return tuple((p[0], p[1]) for p in pairs)


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


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
