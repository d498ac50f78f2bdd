"""Recall memory: nothing the agent saw becomes unreachable (ARCHITECTURE decision 6).

The stored log is never rewritten, so every tool result stays in the database (and
every offloaded one on disk). A compaction's checkpoint therefore carries an index of
the tool results it folds, one line each with a *recall handle*:

- ``msg_<id>``: the stored message with that row id, paged back by ``offload_recall``
  out of the session's own log;
- ``ofl_<12 hex>``: an offloaded output, paged back from the offload store.

The index is budgeted like the summary's "Preserved facts": the newest entries are
listed, the rest are counted and point to ``history_search``. A result that stays in
the view but is stubbed (eviction) carries its handle in the stub itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness9.context.patterns import OFFLOAD_MARKER
from harness9.context.tokens import BYTES_PER_TOKEN, format_token_count
from harness9.schema import ROLE_ASSISTANT, ROLE_TOOL, Message
from harness9.store.session import Session

__all__ = [
    "MESSAGE_HANDLE_PREFIX",
    "RECALL_HEADING",
    "STATE_HEADING",
    "STUB_PREFIX",
    "IndexEntry",
    "key_argument",
    "message_handle",
    "parse_message_handle",
    "render_index",
    "split_summary",
    "state_note",
    "stub_for",
    "with_handle",
]

MESSAGE_HANDLE_PREFIX = "msg_"
RECALL_HEADING = "## Recall index"
STATE_HEADING = "## State at the last compaction"
STUB_PREFIX = "[stubbed] "
_RECALL_INTRO = (
    "Tool results folded out of this context, oldest first. "
    'offload_recall(id="<handle>") pages one back in full; '
    "history_search finds any text of this session."
)
_OVERFLOW_RE = re.compile(r"^… and (\d+) earlier tool results not listed")
_HANDLE_RE = re.compile(r"^msg_([1-9][0-9]{0,17})$")
_OFFLOAD_ID_RE = re.compile(re.escape(OFFLOAD_MARKER) + r"(ofl_[0-9a-f]{12})\]")
_STUB_OFFLOAD_RE = re.compile(r'offload_recall\(id="(ofl_[0-9a-f]{12})"\)')
_TOKENS_RE = re.compile(r"(\d+) tokens (?:offloaded|evicted|stubbed)")
_KEY_FIELDS = ("command", "path", "file", "query", "pattern", "url", "id", "description")
_KEY_CHARS = 80


def message_handle(message_id: int) -> str:
    return f"{MESSAGE_HANDLE_PREFIX}{message_id}"


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


@dataclass(slots=True)
class IndexEntry:
    handle: str
    tool: str
    key: str
    tokens: int

    def line(self) -> str:
        key = f" `{self.key}`" if self.key else ""
        return f"- {self.handle} {self.tool}{key} ({format_token_count(self.tokens)} tokens)"


def _handle_and_size(content: str, message_id: int | None) -> tuple[str | None, int]:
    """Where a result's full text lives, and its size in tokens."""
    m = _OFFLOAD_ID_RE.match(content) or _STUB_OFFLOAD_RE.search(content[:400])
    sized = _TOKENS_RE.search(content[:300])
    tokens = int(sized.group(1)) if sized else len(content.encode()) // BYTES_PER_TOKEN
    if m is not None:  # an offloaded output (or a stub of one): the full text is on disk
        return m.group(1), tokens
    if message_id is None:
        return None, tokens
    return message_handle(message_id), tokens


def folded_entries(
    msgs: Sequence[Message], ids: Sequence[int | None], start: int, stop: int
) -> list[IndexEntry]:
    """Index entries for the tool results among ``msgs[start:stop]`` (ids: their row ids)."""
    calls: dict[str, tuple[str, str]] = {}
    out: list[IndexEntry] = []
    for i in range(start, stop):
        m = msgs[i]
        if m.role == ROLE_ASSISTANT:
            for tc in m.tool_calls:
                calls[tc.id] = (tc.name, tc.arguments)
        elif m.role == ROLE_TOOL:
            handle, tokens = _handle_and_size(m.content, ids[i])
            if handle is None:
                continue
            name, args = calls.get(m.tool_call_id, ("tool", ""))
            out.append(IndexEntry(handle, name, key_argument(args), tokens))
    return out


def _parse_index(text: str) -> tuple[list[str], int]:
    """(entry lines, overflow count) of a rendered index."""
    lines, overflow = [], 0
    for line in text.splitlines():
        if line.startswith("- "):
            lines.append(line)
        elif m := _OVERFLOW_RE.match(line):
            overflow = int(m.group(1))
    return lines, overflow


def render_index(previous: str, entries: Sequence[IndexEntry], budget_tokens: int) -> str:
    """The index after ``previous`` (a rendered index) gains ``entries``; "" when empty.

    Keeps the newest lines within ``budget_tokens``; older ones are counted on a line
    that points to ``history_search``.
    """
    lines, overflow = _parse_index(previous)
    lines += [e.line() for e in entries]
    if not lines and not overflow:
        return ""
    room = max(0, budget_tokens * BYTES_PER_TOKEN - len(_RECALL_INTRO) - 120)
    kept: list[str] = []
    for line in reversed(lines):
        cost = len(line.encode()) + 1
        if cost > room:
            break
        room -= cost
        kept.append(line)
    kept.reverse()
    overflow += len(lines) - len(kept)
    parts = [RECALL_HEADING, _RECALL_INTRO]
    if overflow:
        parts.append(
            f"… and {overflow} earlier tool results not listed: "
            "history_search finds them (its hits carry their handles)."
        )
    parts += kept
    return "\n".join(parts)


def split_summary(text: str) -> str:
    """The summary proper, without the recall index and state sections the view adds."""
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
    m = _OFFLOAD_ID_RE.match(msg.content)
    tokens = _handle_and_size(msg.content, None)[1]
    if m is not None:
        content = f'{STUB_PREFIX}{tokens} tokens stubbed; offload_recall(id="{m.group(1)}") for it'
    else:
        content = f"{STUB_PREFIX}{tokens} tokens stubbed"
    return Message(ROLE_TOOL, content, tool_call_id=msg.tool_call_id)


# What ``with_handle`` adds to a stub, for size estimates made before ids are known.
HANDLE_ALLOWANCE_BYTES = len('; offload_recall(id="msg_0000000") for it')


def with_handle(content: str, message_id: int) -> str:
    """A stub made recallable: its handle appended unless it already names one."""
    if "offload_recall(" in content:
        return content
    return f'{content}; offload_recall(id="{message_handle(message_id)}") for it'


def is_stub(content: str) -> bool:
    return content.startswith(STUB_PREFIX)


_STATUS_MARK = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


def state_note(session: Session | None) -> str:
    """The state that changes during a session (the todo list) as a checkpoint shows it.

    It never goes into the system prompt (that would break every cached prefix on each
    change, decision 7): between compactions ``write_todos`` results carry it in the
    conversation; a compaction that folds them keeps the list as it is now.
    """
    todos = session.get_todos() if session is not None else None
    if not todos:
        return ""
    lines = [STATE_HEADING, "Todo list:"]
    lines += [f"{_STATUS_MARK.get(t.status, '[ ]')} {t.content}" for t in todos]
    return "\n".join(lines)
