"""Recall memory: nothing the agent saw becomes unreachable (ARCHITECTURE decision 6).

The stored log is never rewritten, so every tool result stays in the database (and
every offloaded one on disk). A compaction's checkpoint therefore carries an index of
the tool results it folds, one line each with a *recall handle*:

- ``msg_<id>``: the stored message with that row id, paged back by ``offload_recall``
  out of the session's own log;
- ``ofl_<12 hex>``: an offloaded output, paged back from the offload store.

The index is data (``RecallEntry`` records in the checkpoint), budgeted like the
summary's "Preserved facts": the newest entries are listed, the rest are counted and
point to ``history_search``. A result that stays in the view but is stubbed carries its
handle in the stub itself (harness9.context.stubs). The texts the model sees are made
here from that data (``render_recall``, ``render_state``) and never read back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness9.context.stubs import (
    HANDLE_ALLOWANCE_BYTES,
    STUBBED_PREFIX,
    RenderedMessage,
    is_stub,
    offload_source,
    stub_message,
    stubbed_stub,
    with_handle,
)
from harness9.context.tokens import BYTES_PER_TOKEN, format_token_count
from harness9.schema import ROLE_ASSISTANT, ROLE_TOOL, SUMMARY_PREFIX, Message, TodoItem
from harness9.store.session import (
    MESSAGE_HANDLE_PREFIX,
    RecallEntry,
    Session,
    message_handle,
)

__all__ = [
    "HANDLE_ALLOWANCE_BYTES",
    "MESSAGE_HANDLE_PREFIX",
    "RECALL_HEADING",
    "STATE_HEADING",
    "STUB_PREFIX",
    "IndexEntry",
    "SummaryMessage",
    "budget_recall",
    "entry_line",
    "folded_entries",
    "is_stub",
    "key_argument",
    "message_handle",
    "parse_message_handle",
    "render_recall",
    "render_state",
    "split_summary",
    "state_items",
    "stub_for",
    "summary_of",
    "with_handle",
]

RECALL_HEADING = "## Recall index"
STATE_HEADING = "## State at the last compaction"
STUB_PREFIX = STUBBED_PREFIX
IndexEntry = RecallEntry  # the name the index's entries had before they were stored as data
_RECALL_INTRO = (
    "Tool results folded out of this context, oldest first. "
    'offload_recall(id="<handle>") pages one back in full; '
    "history_search finds any text of this session."
)
# A handle the model passes to offload_recall (input, not harness9's own output).
_HANDLE_RE = re.compile(r"^msg_([1-9][0-9]{0,17})$")
_KEY_FIELDS = ("command", "path", "file", "query", "pattern", "url", "id", "description")
_KEY_CHARS = 80


def parse_message_handle(handle: str) -> int | None:
    """The message id a ``msg_<id>`` handle names; None for anything else."""
    m = _HANDLE_RE.match(handle.strip()) if isinstance(handle, str) else None
    return int(m.group(1)) if m else None


def key_argument(arguments: str) -> str:
    """The argument that says what a call did (its command, path, query…), on one line."""
    try:
        args = json.loads(arguments) if arguments else {}
    except ValueError:
        args = arguments
    value: object = args
    if isinstance(args, dict):
        value = next((args[k] for k in _KEY_FIELDS if isinstance(args.get(k), str)), None)
        if value is None:
            value = json.dumps(args, ensure_ascii=False) if args else ""
    text = " ".join(str(value).split())
    return text if len(text) <= _KEY_CHARS else text[: _KEY_CHARS - 1] + "…"


def entry_line(entry: RecallEntry) -> str:
    key = f" `{entry.key_argument}`" if entry.key_argument else ""
    return f"- {entry.handle} {entry.tool}{key} ({format_token_count(entry.tokens)} tokens)"


def folded_entries(
    msgs: Sequence[Message], ids: Sequence[int | None], start: int, stop: int
) -> list[RecallEntry]:
    """Index entries for the tool results among ``msgs[start:stop]`` (ids: their row ids)."""
    calls: dict[str, tuple[str, str]] = {}
    out: list[RecallEntry] = []
    for i in range(start, stop):
        m = msgs[i]
        if m.role == ROLE_ASSISTANT:
            for tc in m.tool_calls:
                calls[tc.id] = (tc.name, tc.arguments)
        elif m.role == ROLE_TOOL:
            offload_id, tokens = offload_source(m)
            handle = offload_id or (message_handle(mid) if (mid := ids[i]) is not None else "")
            if not handle:
                continue
            name, args = calls.get(m.tool_call_id, ("tool", ""))
            out.append(RecallEntry(handle, name, key_argument(args), tokens))
    return out


def budget_recall(
    listed: Sequence[RecallEntry], overflow: int, budget_tokens: int
) -> tuple[list[RecallEntry], int]:
    """The newest of ``listed`` whose lines fit ``budget_tokens``, and the new overflow
    count (``overflow`` plus those left out)."""
    room = max(0, budget_tokens * BYTES_PER_TOKEN - len(_RECALL_INTRO) - 120)
    kept: list[RecallEntry] = []
    for entry in reversed(listed):
        cost = len(entry_line(entry).encode()) + 1
        if cost > room:
            break
        room -= cost
        kept.append(entry)
    kept.reverse()
    return kept, overflow + len(listed) - len(kept)


def render_recall(entries: Sequence[RecallEntry], overflow: int) -> str:
    """The index section of the summary message; "" when there is nothing to list."""
    if not entries and not overflow:
        return ""
    parts = [RECALL_HEADING, _RECALL_INTRO]
    if overflow:
        parts.append(
            f"… and {overflow} earlier tool results not listed: "
            "history_search finds them (its hits carry their handles)."
        )
    parts += [entry_line(e) for e in entries]
    return "\n".join(parts)


@dataclass(slots=True, eq=False)
class SummaryMessage(RenderedMessage):
    """The view's summary message; ``summary`` is the checkpoint's prose alone (the recall
    index and the state the view renders after it are the checkpoint's, kept by code)."""

    summary: str = ""


def summary_of(msg: Message) -> str:
    """The summary proper of a summary message, for a summariser to merge.

    The view's own summary message carries it as data; any other (a compactor's output,
    say) is read by ``split_summary``.
    """
    if isinstance(msg, SummaryMessage):
        return msg.summary
    return split_summary(msg.content[len(SUMMARY_PREFIX) :])


def split_summary(text: str) -> str:
    """The summary proper of a summary message's text, without the sections the view adds."""
    cut = len(text)
    for heading in (RECALL_HEADING, STATE_HEADING):
        at = text.find("\n\n" + heading)
        if at >= 0:
            cut = min(cut, at)
        elif text.startswith(heading):
            cut = 0
    return text[:cut]


def stub_for(msg: Message) -> Message:
    """An eviction stub for a tool result; the checkpoint appends its recall handle."""
    return stub_message(stubbed_stub(msg), msg)


_STATUS_MARK = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


def state_items(session: Session | None) -> list[TodoItem]:
    """The state that changes during a session (the todo list), for a checkpoint to keep.

    It never goes into the system prompt (that would break every cached prefix on each
    change, decision 7): between compactions ``write_todos`` results carry it in the
    conversation; a compaction that folds them keeps the list as it is now.
    """
    todos = session.get_todos() if session is not None else None
    return list(todos or [])


def render_state(items: Sequence[TodoItem]) -> str:
    """The state section of the summary message; "" without items."""
    if not items:
        return ""
    lines = [STATE_HEADING, "Todo list:"]
    lines += [f"{_STATUS_MARK.get(t.status, '[ ]')} {t.content}" for t in items]
    return "\n".join(lines)
