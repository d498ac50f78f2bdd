"""A session as one JSON document, and back: ``sessions export --format json`` / ``import``.

The document is complete (ids, exact Unix times, todos, checkpoints) so an
import restores the session exactly: export → delete → import → export gives
the same bytes. Reading validates everything before writing anything; the write
is all or nothing for every reader (one transaction on PostgreSQL; bounded steps on
SQLite, harness9.store.staged_import).

Format (version 1)::

    {"format": "harness9-session", "version": 1,
     "id", "title", "created_at", "updated_at", "message_count",
     "messages": [{"id", "role", "content", "tool_calls": [{"id", "name", "arguments"}],
                   "tool_call_id" (string or null), "created_at",
                   "offload": {"id", "tokens"} or null,
                   "metadata": {"exit_code", "timed_out"} or null}],
     "todos": [{"content", "status"}],
     "checkpoints": [{"id", "last_message_id", "summary", "strategy", "tokens_before",
                      "tokens_after", "messages_before", "messages_after", "created_at",
                      "recall": [{"handle", "tool", "key_argument", "tokens"}],
                      "recall_overflow", "stubs": {"<message id>": {"kind", "tokens",
                      "offload_id", "text"}}, "state": [{"content", "status"}],
                      "instructions": [text], "facts": [text] or null}],
     "offloads": [{"id", "content"}],
     "pins": [text], "forked_from": {"session_id", "message"} or null,
     "usage": {"model_calls", "input_tokens", "output_tokens", "cached_tokens",
               "cost_usd", "unpriced_calls", "summary_calls", ..., "cache_write_tokens"}}

``offloads`` holds the full text of the tool results the conversation replaced by
an ``[offload:<id>]`` summary, so ``offload_recall`` works on the imported copy.
The store only carries them: the CLI fills and restores them through the context
layer's OffloadStore (the store never reads offload files). A file without the key
(written before it existed) imports with no offloads.

A checkpoint's ``recall``, ``recall_overflow``, ``stubs`` and ``state`` are its data
(harness9.store.codec ``details_to_json``). A file written before checkpoints were data
has the rendered ``recall_index`` and ``state_note`` and the stub texts ``rewrites``
instead; they are converted on import (harness9.store.legacy_checkpoint).

A checkpoint's ``facts`` are the facts its summary keeps (``"<kind>: <value>"``, ranked;
harness9.store.codec ``encode_facts``), null for one made before they were kept. Optional
in version 1: a file without the key imports its checkpoints with null, and the next
compaction reads such a summary's facts from its text.

A message's ``offload`` names the offload its text summarises (null: none); a file
without the key (written before links were data) has it read from that text on import
(harness9.store.legacy_offload).

A message's ``metadata`` holds a tool result's run facts (harness9.schema
``result_metadata``: a command's ``exit_code`` and ``timed_out``); null for any other
message. Optional in version 1: a file without the key (written before they were kept)
imports with none, and readers then fall back to the result's text as for such rows.

``usage`` is what the session's model calls consumed (the totals ``sessions list
--json`` shows; its keys are the columns of ``session_usage``, harness9.store.rows
USAGE_COLUMNS), so an imported copy reports the same tokens and cost. Optional in
version 1 like ``offloads``: a file without it imports with no usage, a key it lacks
counts 0, and an older harness9 reading a newer file ignores it rather than refusing
the whole file.

Times are Unix seconds as JSON numbers (exact; ``sessions show --json`` has ISO text).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from harness9.errors import HarnessError
from harness9.schema import (
    RESULT_METADATA_TYPES,
    ROLES,
    TODO_STATUSES,
    Message,
    TodoItem,
    ToolCall,
    result_metadata,
)
from harness9.store.codec import (
    CHECKPOINT_FIELDS,
    CHECKPOINT_TYPES,
    TOOL_CALL_FIELDS,
    CorruptValueError,
    checkpoint_from_values,
    checkpoint_to_json,
    details_from_json,
    record_to_json,
)
from harness9.store.legacy_checkpoint import read_legacy_details
from harness9.store.legacy_offload import legacy_offload
from harness9.store.session import (
    MAX_TIMESTAMP,
    Checkpoint,
    CorruptRow,
    ForkOrigin,
    OffloadLink,
    SessionInfo,
    StoredMessage,
    SubAgentLink,
    UsageTotals,
    is_session_id,
    valid_timestamp,
)
from harness9.store.usage import USAGE_COLUMNS, usage_row

FORMAT = "harness9-session"
VERSION = 1


class ImportFormatError(HarnessError):
    """The file is not a session export this harness9 can read; nothing was written."""


class SessionExistsError(HarnessError):
    """Importing would overwrite a stored session."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"session {session_id} already exists; delete it first or import with --new-id"
        )


@dataclass(slots=True)
class SessionSnapshot:
    """Everything stored about one session, read in one consistent transaction."""

    info: SessionInfo
    records: list[StoredMessage]
    todos: list[TodoItem]
    checkpoints: list[Checkpoint]
    corrupt_rows: list[CorruptRow] = field(default_factory=list)
    offloads: list[OffloadedText] = field(default_factory=list)
    usage: UsageTotals = field(default_factory=UsageTotals)
    pins: list[str] = field(default_factory=list)
    forked_from: ForkOrigin | None = None
    # A sub-agent's session: whose `task` call ran it. The sub-agents' sessions it ran
    # (filled by ``family_snapshot``, the export's: a plain snapshot is one session).
    link: SubAgentLink | None = None
    children: list[SessionSnapshot] = field(default_factory=list)


@dataclass(slots=True)
class OffloadedText:
    """One offloaded tool result as exported: its id and its full text."""

    id: str
    content: str


# -- to JSON ------------------------------------------------------------------------------


def to_document(snap: SessionSnapshot) -> dict[str, Any]:
    info = snap.info
    return {
        "format": FORMAT,
        "version": VERSION,
        "id": info.id,
        "title": info.title,
        "created_at": info.created_at,
        "updated_at": info.updated_at,
        "message_count": len(snap.records),  # what this file holds (corrupt rows are not in it)
        "messages": [record_to_json(r) for r in snap.records],
        "todos": [t.to_dict() for t in snap.todos],
        "checkpoints": [checkpoint_to_json(cp) for cp in snap.checkpoints],
        "offloads": [{"id": o.id, "content": o.content} for o in snap.offloads],
        "usage": usage_to_json(snap.usage),
        "pins": list(snap.pins),
        "forked_from": fork_origin_to_json(snap.forked_from),
        **_family_to_json(snap),
    }


def fork_origin_to_json(origin: ForkOrigin | None) -> dict[str, Any] | None:
    """``forked_from`` as export files and ``sessions list/show --json`` write it."""
    if origin is None:
        return None
    return {"session_id": origin.session_id, "message": origin.message}


def _fork_origin(doc: dict[str, Any]) -> ForkOrigin | None:
    raw = doc.get("forked_from")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ImportFormatError("session.forked_from must be an object or null")
    origin = _get(raw, "session_id", str, "forked_from")
    if not is_session_id(origin):
        raise ImportFormatError(f"forked_from.session_id {origin!r} is not a session id")
    return ForkOrigin(origin, _count(raw, "message", "forked_from"))


def _family_to_json(snap: SessionSnapshot) -> dict[str, Any]:
    """``subagent`` (whose `task` call ran it) and ``subagents`` (the sessions it ran, each
    a whole document), for the sessions that have them."""
    out: dict[str, Any] = {}
    if snap.link is not None:
        out["subagent"] = {
            "parent_id": snap.link.parent_id,
            "tool_call_id": snap.link.tool_call_id,
            "description": snap.link.description,
        }
    if snap.children:
        out["subagents"] = [to_document(child) for child in snap.children]
    return out


def export_json(snap: SessionSnapshot) -> str:
    return json.dumps(to_document(snap), ensure_ascii=False, indent=2) + "\n"


# -- from JSON ----------------------------------------------------------------------------


def _get(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise ImportFormatError(f"{where} has no {key!r}")
    value = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int to Python, never to us; an int is a fine float.
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if float in kinds and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ImportFormatError(f"{where}.{key} is not a finite number")
        return float(value)
    if not ok:
        raise ImportFormatError(f"{where}.{key} has the wrong type ({type(value).__name__})")
    return value


_DETAIL_KEYS = ("recall", "recall_overflow", "stubs", "state")


def _details(cp: Checkpoint, c: dict[str, Any], where: str) -> None:
    """The checkpoint's data: its own keys, or (a file written before checkpoints were
    data) the old prose keys, converted; none of them (older still): none."""
    if any(k in c for k in _DETAIL_KEYS):
        try:
            cp.recall, cp.recall_overflow, cp.stubs, cp.state = details_from_json(
                {k: c[k] for k in _DETAIL_KEYS if k in c}
            )
        except CorruptValueError as exc:
            raise ImportFormatError(f"{where}: {exc}") from None
        return
    index, note = (_get(c, k, str, where) if k in c else "" for k in ("recall_index", "state_note"))
    rewrites = _get(c, "rewrites", dict, where) if "rewrites" in c else {}
    if not all(isinstance(v, str) for v in rewrites.values()):
        raise ImportFormatError(f"{where}.rewrites has a value that is not text")
    if not all(k.isascii() and k.isdigit() for k in rewrites):
        raise ImportFormatError(f"{where}.rewrites has a key that is not a message id")
    read_legacy_details(cp, index, json.dumps(rewrites) if rewrites else "", note)


_MAX_INT = 2**63 - 1  # SQLite's INTEGER


def _time(obj: dict[str, Any], key: str, where: str) -> float:
    value = _get(obj, key, float, where)
    if not valid_timestamp(value):
        raise ImportFormatError(
            f"{where}.{key} is {value!r:.40}, not a time (Unix seconds from 0 to {MAX_TIMESTAMP:.0f})"
        )
    return float(value)


def _count(obj: dict[str, Any], key: str, where: str) -> int:
    value = _get(obj, key, int, where)
    if not 0 <= value <= _MAX_INT:
        raise ImportFormatError(f"{where}.{key} is {value}, not a count from 0 to {_MAX_INT}")
    return int(value)


def _choice(obj: dict[str, Any], key: str, where: str, allowed: tuple[str, ...]) -> str:
    value = _get(obj, key, str, where)
    if value not in allowed:
        raise ImportFormatError(f"{where}.{key} is {value[:40]!r}, not one of {', '.join(allowed)}")
    return value


def _checkpoint_field(c: dict[str, Any], key: str, where: str) -> Any:
    kind = CHECKPOINT_TYPES[key]
    if key == "created_at":
        return _time(c, key, where)
    return _count(c, key, where) if kind is int else _get(c, key, kind, where)


def _list(obj: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    items = _get(obj, key, list, where)
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ImportFormatError(f"{where}.{key}[{i}] is not an object")
    return items


def _record(m: dict[str, Any], where: str) -> StoredMessage:
    calls = [
        ToolCall(*(_get(c, key, str, f"{where}.tool_calls[{k}]") for key in TOOL_CALL_FIELDS))
        for k, c in enumerate(_list(m, "tool_calls", where))
    ]
    call_id = _get(m, "tool_call_id", (str, type(None)), where) or ""
    role = _choice(m, "role", where, ROLES)
    msg = Message(role, _get(m, "content", str, where), calls, call_id)
    rid, created = _count(m, "id", where), _time(m, "created_at", where)
    msg.metadata = _metadata(m, where)
    return StoredMessage(rid, msg, created, _offload(m, msg, where))


def _metadata(m: dict[str, Any], where: str) -> dict[str, Any] | None:
    """The tool result's run facts; none in a file written before they were kept. Keys this
    harness9 does not keep are left out; a kept key of the wrong type refuses the file."""
    meta = m.get("metadata")
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise ImportFormatError(f"{where}.metadata is not an object or null")
    kept = result_metadata(meta)
    for key in RESULT_METADATA_TYPES:
        if key in meta and key not in kept:
            raise ImportFormatError(f"{where}.metadata.{key} is {meta[key]!r:.40}")
    return kept


def _offload(m: dict[str, Any], msg: Message, where: str) -> OffloadLink | None:
    """The message's offload link; a file written before links were data has no key, and
    the link is read from the text (harness9.store.legacy_offload)."""
    if "offload" not in m:
        return legacy_offload(msg.role, msg.content)
    link = m["offload"]
    if link is None:
        return None
    if not isinstance(link, dict):
        raise ImportFormatError(f"{where}.offload is not an object or null")
    oid = _get(link, "id", str, f"{where}.offload")
    if not oid:
        raise ImportFormatError(f"{where}.offload.id is empty")
    return OffloadLink(oid, _count(link, "tokens", f"{where}.offload"))


def from_document(doc: object) -> SessionSnapshot:
    """Validate an export document completely; raise ImportFormatError on the first fault."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ImportFormatError(f'not a harness9 session export (no "format": "{FORMAT}")')
    version = doc.get("version")
    if "version" not in doc:  # not a version it cannot read: a file cut short or hand-made
        raise ImportFormatError(
            f'the export has no "version" (this harness9 reads version {VERSION})'
        )
    if version != VERSION or isinstance(version, bool):
        raise ImportFormatError(
            f"unsupported export version {version!r} (this harness9 reads version {VERSION})"
        )
    sid = _get(doc, "id", str, "session")
    if not is_session_id(sid):
        raise ImportFormatError(f"session id {sid!r} is not a canonical lower-case UUID")
    info = SessionInfo(
        sid,
        _time(doc, "created_at", "session"),
        _time(doc, "updated_at", "session"),
        _count(doc, "message_count", "session"),
        _get(doc, "title", str, "session"),
    )
    records = [
        _record(m, f"messages[{i}]") for i, m in enumerate(_list(doc, "messages", "session"))
    ]
    _check_increasing([r.id for r in records], "message")
    if info.message_count != len(records):
        raise ImportFormatError(
            f"message_count is {info.message_count} but the file holds {len(records)} messages"
        )
    todos = [
        TodoItem(
            _get(t, "content", str, f"todos[{i}]"),
            _choice(t, "status", f"todos[{i}]", TODO_STATUSES),
        )
        for i, t in enumerate(_list(doc, "todos", "session"))
    ]
    message_ids = {r.id for r in records}
    checkpoints: list[Checkpoint] = []
    for i, c in enumerate(_list(doc, "checkpoints", "session")):
        where = f"checkpoints[{i}]"
        cp = checkpoint_from_values([_checkpoint_field(c, key, where) for key in CHECKPOINT_FIELDS])
        _details(cp, c, where)  # optional: files written before checkpoints had it have none
        cp.instructions = _strings(c, "instructions", where)
        cp.facts = _facts(c, where)
        if cp.last_message_id != 0 and cp.last_message_id not in message_ids:
            raise ImportFormatError(
                f"{where} covers message {cp.last_message_id}, which is not in the file"
            )
        checkpoints.append(cp)
    _check_increasing([c.id for c in checkpoints], "checkpoint")
    usage = _usage(_get(doc, "usage", dict, "session")) if "usage" in doc else UsageTotals()
    snap = SessionSnapshot(
        info,
        records,
        todos,
        checkpoints,
        offloads=_offloads(doc),
        usage=usage,
        pins=_strings(doc, "pins", "session"),
        forked_from=_fork_origin(doc),
    )
    _family_from_json(doc, snap)
    return snap


def _offloads(doc: dict[str, Any]) -> list[OffloadedText]:
    """The optional offloaded outputs (files written before they were carried have none)."""
    offloads: list[OffloadedText] = []
    for i, o in enumerate(_list(doc, "offloads", "session") if "offloads" in doc else []):
        where = f"offloads[{i}]"
        offloads.append(OffloadedText(_get(o, "id", str, where), _get(o, "content", str, where)))
    ids = [o.id for o in offloads]
    if len(set(ids)) != len(ids):
        raise ImportFormatError("offloads holds the same id twice")
    return offloads


def _strings(obj: dict[str, Any], key: str, where: str) -> list[str]:
    """An optional list of strings (files written before it existed have none)."""
    raw = _get(obj, key, list, where) if key in obj else []
    if not all(isinstance(x, str) for x in raw):
        raise ImportFormatError(f"{where}.{key} holds something that is not text")
    return list(raw)


def _facts(c: dict[str, Any], where: str) -> list[str] | None:
    """A checkpoint's optional ``facts``: a list of text, or null (kept before them)."""
    if c.get("facts") is None:
        return None
    return _strings(c, "facts", where)


def _family_from_json(doc: dict[str, Any], snap: SessionSnapshot) -> None:
    """The optional ``subagent`` link and ``subagents`` documents (files without them are
    single sessions, as before)."""
    if "subagent" in doc:
        link = _get(doc, "subagent", dict, "session")
        parent = _get(link, "parent_id", str, "subagent")
        if not is_session_id(parent):
            raise ImportFormatError(f"subagent.parent_id {parent!r} is not a session id")
        snap.link = SubAgentLink(
            snap.info.id,
            parent,
            _get(link, "tool_call_id", str, "subagent"),
            _get(link, "description", str, "subagent") if "description" in link else "",
        )
    for i, child in enumerate(_list(doc, "subagents", "session") if "subagents" in doc else []):
        try:
            kid = from_document(child)
        except ImportFormatError as exc:
            raise ImportFormatError(f"subagents[{i}]: {exc}") from None
        if kid.link is None or kid.link.parent_id != snap.info.id:
            raise ImportFormatError(f"subagents[{i}] is not a sub-agent of session {snap.info.id}")
        snap.children.append(kid)


def usage_to_json(u: UsageTotals) -> dict[str, Any]:
    return {
        column: value for column, value in zip(USAGE_COLUMNS, usage_row("", u)[1:], strict=True)
    }


def _usage(u: dict[str, Any]) -> UsageTotals:
    """The ``usage`` object; a key it lacks (a column newer than the file) counts 0."""
    values: dict[str, Any] = {}
    for column in USAGE_COLUMNS:
        if column not in u:
            continue
        if column.endswith("cost_usd"):
            cost = _get(u, column, float, "usage")
            if cost < 0:
                raise ImportFormatError(f"usage.{column} is {cost!r}, not a cost of 0 or more")
            values[column] = cost
        else:
            values[column] = _count(u, column, "usage")
    return UsageTotals(**values)


def _check_increasing(ids: list[int], what: str) -> None:
    for prev, cur in zip(ids, ids[1:], strict=False):
        if cur <= prev:
            raise ImportFormatError(
                f"{what} ids must increase through the file ({prev}, then {cur})"
            )
    if ids and ids[0] <= 0:
        raise ImportFormatError(f"{what} ids must be positive (got {ids[0]})")


def parse_export(text: str) -> SessionSnapshot:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportFormatError(f"not valid JSON ({exc})") from None
    return from_document(doc)
