"""Checkpoints stored before they were data: their prose fields read into the records.

Until migration ``checkpoint_data_as_json`` a checkpoint kept its recall index and
state note as the Markdown the view showed, and its stubs as their texts
(``compaction_details``; export files of that time carry the same three keys). Such
rows are still read: this module converts them, once per read, with plain string
operations on the one fixed format harness9 wrote then. Nothing written since is read
this way; new checkpoints are stored as JSON (harness9.store.codec).

A stub text is kept as it is (``STUB_VERBATIM``), so an old session's view stays
byte for byte what it was (one naming its offload keeps that offload's id and size); a line of the old index that does not read as an entry is
counted as not listed, where history_search still finds it.
"""

from __future__ import annotations

import json

from harness9.schema import TODO_MARKS, TodoItem
from harness9.store.legacy_offload import legacy_evicted_offload
from harness9.store.session import STUB_VERBATIM, Checkpoint, RecallEntry, Stub

__all__ = ["legacy_recall", "legacy_state", "legacy_stubs", "read_legacy_details"]

_ENTRY_END = " tokens)"
_OVERFLOW_START = "… and "
_TODO_START = "Todo list:"
_STATUS_OF_MARK = {mark: status for status, mark in TODO_MARKS.items()}
_SCALE = {"K": 1000, "M": 1_000_000}


def _tokens(size: str) -> int | None:
    """``format_token_count``'s text back as a number ("45.2K" -> 45200; None: not one)."""
    scale = _SCALE.get(size[-1:], 1)
    digits = size[:-1] if scale > 1 else size
    try:
        value = float(digits)
    except ValueError:
        return None
    return round(value * scale) if value >= 0 and digits.replace(".", "", 1).isdigit() else None


def _entry(line: str) -> RecallEntry | None:
    """``- <handle> <tool>[ `<key>`] (<size> tokens)``, as the old index listed a result."""
    body = line[2:]
    at = body.rfind(" (")
    if not body.endswith(_ENTRY_END) or at < 0:
        return None
    tokens = _tokens(body[at + 2 : -len(_ENTRY_END)])
    handle, _, rest = body[:at].partition(" ")
    tool, _, key = rest.partition(" `")
    if tokens is None or not handle or not tool or (key and not key.endswith("`")):
        return None
    return RecallEntry(handle, tool, key[:-1], tokens)


def legacy_recall(index: str) -> tuple[list[RecallEntry], int]:
    """(entries, how many are not listed) of an old rendered recall index."""
    entries: list[RecallEntry] = []
    overflow = 0
    for line in index.splitlines():
        if line.startswith("- "):
            entry = _entry(line)
            if entry is None:
                overflow += 1
            else:
                entries.append(entry)
        elif line.startswith(_OVERFLOW_START):
            count = line[len(_OVERFLOW_START) :].split(" ", 1)[0]
            overflow += int(count) if count.isascii() and count.isdigit() else 0
    return entries, overflow


def legacy_state(note: str) -> list[TodoItem]:
    """The todo items of an old state note (``[x] text`` lines after ``Todo list:``)."""
    _, found, todos = note.partition(_TODO_START)
    if not found:
        return []
    items = []
    for line in todos.splitlines():
        status = _STATUS_OF_MARK.get(line[:3])
        if status is not None and line[3:4] == " ":
            items.append(TodoItem(line[4:], status))
    return items


def legacy_stubs(rewrites: str | dict[str, object]) -> dict[int, Stub]:
    """Old stub texts by message id (stored JSON text, or the export's object) as stubs;
    a damaged value reads as none (the view then shows the originals)."""
    try:
        raw = json.loads(rewrites) if isinstance(rewrites, str) else rewrites
        return {int(k): _verbatim(v) for k, v in raw.items() if isinstance(v, str)}
    except (ValueError, TypeError, AttributeError):
        return {}


def _verbatim(text: str) -> Stub:
    """An old stub text as it is; one naming its offload keeps where and how big that is."""
    link = legacy_evicted_offload(text)
    if link is None:
        return Stub(STUB_VERBATIM, text=text)
    return Stub(STUB_VERBATIM, link.tokens, link.offload_id, text)


def read_legacy_details(cp: Checkpoint, index: str, rewrites: str, note: str) -> None:
    """Fill ``cp``'s data from the old ``compaction_details`` values."""
    cp.recall, cp.recall_overflow = legacy_recall(index)
    cp.stubs = legacy_stubs(rewrites) if rewrites else {}
    cp.state = legacy_state(note)
