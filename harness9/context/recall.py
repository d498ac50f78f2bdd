"""Recall memory: the index of folded tool results, and the state note, as data and text.

The log is never rewritten, so every tool result stays reachable (ARCHITECTURE decision
6) by a *recall handle*: ``msg_<id>`` (a stored message, paged back by ``offload_recall``
from the log) or ``ofl_<12 hex>`` (an offloaded output). A checkpoint keeps the folded
results as ``RecallEntry`` data, budgeted like the summary's facts (the newest listed, the
rest counted); a result still in view but stubbed carries its handle in its stub. The text
the model sees is made here from that data and never read back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from harness9.context.stubs import RenderedMessage, offload_source, stub_message, stubbed_stub
from harness9.context.tokens import BYTES_PER_TOKEN, format_token_count
from harness9.schema import ROLE_ASSISTANT, ROLE_TOOL, ROLE_USER, SUMMARY_PREFIX, Message, TodoItem
from harness9.store.session import RecallEntry, Session, message_handle

_RECALL_INTRO = (
    "Tool results folded out of this context, oldest first. "
    'offload_recall(id="<handle>") pages one back in full; '
    "history_search finds any text of this session."
)
_KEY_FIELDS = ("command", "path", "file", "query", "pattern", "url", "id", "description")
_KEY_CHARS = 80
_STATUS_MARK = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


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


def _entry_line(entry: RecallEntry) -> str:
    key = f" `{entry.key_argument}`" if entry.key_argument else ""
    return f"- {entry.handle} {entry.tool}{key} ({format_token_count(entry.tokens)} tokens)"


def folded_entries(msgs: Sequence[Message], ids: Sequence[int | None]) -> list[RecallEntry]:
    """Index entries for the tool results among ``msgs`` (``ids``: their row ids)."""
    calls: dict[str, tuple[str, str]] = {}
    out: list[RecallEntry] = []
    for m, mid in zip(msgs, ids, strict=True):
        if m.role == ROLE_ASSISTANT:
            for tc in m.tool_calls:
                calls[tc.id] = (tc.name, tc.arguments)
        elif m.role == ROLE_TOOL:
            offload_id, tokens = offload_source(m)
            handle = offload_id or (message_handle(mid) if mid is not None else "")
            if handle:
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
        cost = len(_entry_line(entry).encode()) + 1
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
    parts = ["## Recall index", _RECALL_INTRO]
    if overflow:
        parts.append(
            f"… and {overflow} earlier tool results not listed: "
            "history_search finds them (its hits carry their handles)."
        )
    parts += [_entry_line(e) for e in entries]
    return "\n".join(parts)


def state_items(session: Session | None) -> list[TodoItem]:
    """The todo list now, for a checkpoint to keep. It never goes into the system prompt
    (each change would break every cached prefix, decision 7): ``write_todos`` results
    carry it in the conversation, and a compaction that folds them keeps the list."""
    todos = session.get_todos() if session is not None else None
    return list(todos or [])


def render_state(items: Sequence[TodoItem]) -> str:
    """The state section of the summary message; "" without items."""
    if not items:
        return ""
    lines = ["## State at the last compaction", "Todo list:"]
    return "\n".join(lines + [f"{_STATUS_MARK.get(t.status, '[ ]')} {t.content}" for t in items])


@dataclass(slots=True, eq=False)
class SummaryMessage(RenderedMessage):
    """A summary message; ``summary`` is its prose alone, without the sections (recall
    index, state) the view renders after it, so a summariser merges the prose only."""

    summary: str = ""


def summary_message(summary: str) -> SummaryMessage:
    """The message a compactor puts in place of the head it folded."""
    return SummaryMessage(ROLE_USER, SUMMARY_PREFIX + summary, summary=summary)


def summary_of(msg: Message) -> str:
    """The summary proper of a summary message, for a summariser to merge (a message
    harness9 did not make, say a test's, is all summary)."""
    if isinstance(msg, SummaryMessage):
        return msg.summary
    return msg.content.removeprefix(SUMMARY_PREFIX)


def stub_for(msg: Message) -> Message:
    """A tool result shown by size and handle only (the view adds a ``msg_`` handle)."""
    return stub_message(stubbed_stub(msg), msg)
