"""A session as Markdown for a person to read: ``sessions export --format markdown``.

Messages are headings in order; tool calls and tool results are folded into
``<details>`` blocks (GitHub, GitLab and most viewers render them closed);
each compaction checkpoint is a quote placed right after the last message it
covers; the todo list comes last. Code and tool output go in fences longer
than any run of backticks inside them, so stored text can never end a fence.
Times are UTC, so the same session exports the same text on any machine.
"""

from __future__ import annotations

import html
import json
import re

from harness9.store.export import SessionSnapshot
from harness9.store.session import Checkpoint, StoredMessage
from harness9.ui.listing import iso_utc
from harness9.ui.text import plural

_BACKTICKS_RE = re.compile(r"`+")
# A Markdown task list knows only open "[ ]" and done "[x]": in progress is an open item
# with a note (not TODO_MARKS' "[~]", which renders as literal text).
_TASK_LIST_MARKS = {"pending": "[ ]", "in_progress": "[ ]", "completed": "[x]"}
_ROLE_NAMES = {"user": "User", "assistant": "Assistant", "tool": "Tool result", "system": "System"}


def fence(text: str, lang: str = "") -> str:
    longest = max((len(m) for m in _BACKTICKS_RE.findall(text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _details(summary: str, body: str) -> str:
    return f"<details>\n<summary>{summary}</summary>\n\n{body}\n\n</details>"


def _pretty_arguments(arguments: str) -> tuple[str, str]:
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False, indent=2), "json"
    except ValueError:
        return arguments, ""


def _message(rec: StoredMessage, number: int, call_names: dict[str, str]) -> str:
    msg = rec.message
    role = _ROLE_NAMES.get(msg.role, msg.role.capitalize() or "Message")
    parts = [f"## {role} · #{number} · {iso_utc(rec.created_at) or '(unknown time)'}"]
    if msg.tool_call_id:
        name = call_names.get(msg.tool_call_id, "")
        of = f"`{name}` " if name else ""
        summary = html.escape(
            f"Result of {of}({msg.tool_call_id}) · {plural(len(msg.content.splitlines()), 'line')}"
        )
        parts.append(_details(summary, fence(msg.content)))
    elif msg.content:
        parts.append(msg.content)
    for call in msg.tool_calls:
        call_names[call.id] = call.name
        body, lang = _pretty_arguments(call.arguments)
        summary = html.escape(f"Tool call: {call.name} ({call.id})")
        parts.append(_details(summary, fence(body, lang)))
    return "\n\n".join(parts)


def _checkpoint(cp: Checkpoint, index: int, numbers: dict[int, int]) -> str:
    number = numbers.get(cp.last_message_id)
    upto = f"#{number}" if number is not None else f"row {cp.last_message_id}"
    head = (
        f"> **Compaction checkpoint #{index}** · {cp.strategy} · messages up to "
        f"{upto} folded · {cp.tokens_before} → {cp.tokens_after} tokens · "
        f"{cp.messages_before} → {cp.messages_after} messages · {iso_utc(cp.created_at) or '(unknown time)'}"
    )
    if not cp.summary:
        return head
    quoted = "\n".join(f"> {line}" if line else ">" for line in cp.summary.splitlines())
    return f"{head}\n>\n{quoted}"


def session_markdown(snap: SessionSnapshot) -> str:
    info = snap.info
    blocks = [
        f"# {info.title or 'Untitled session'}",
        "\n".join(
            [
                f"- Session: `{info.id}`",
                f"- Created: {iso_utc(info.created_at) or '(unknown time)'}",
                f"- Updated: {iso_utc(info.updated_at) or '(unknown time)'}",
                f"- Messages: {len(snap.records)}",
                f"- Compaction checkpoints: {len(snap.checkpoints)}",
            ]
        ),
    ]
    by_message: dict[int, list[Checkpoint]] = {}
    for cp in snap.checkpoints:
        by_message.setdefault(cp.last_message_id, []).append(cp)
    # Numbered as `sessions show` numbers them (#1 is the session's first message), so a
    # number read here is one `sessions fork --at` and /rewind take; row ids are global
    # to the store (and a fork shares its origin's rows), so they never appear.
    numbers = {rec.id: n for n, rec in enumerate(snap.records, 1)}
    index = {cp.id: n for n, cp in enumerate(snap.checkpoints, 1)}
    placed: set[int] = set()
    call_names: dict[str, str] = {}
    for rec in snap.records:
        blocks.append(_message(rec, numbers[rec.id], call_names))
        for cp in by_message.get(rec.id, []):
            blocks.append(_checkpoint(cp, index[cp.id], numbers))
            placed.add(cp.id)
    # A checkpoint whose message could not be read (a corrupt row) still gets shown.
    blocks += [
        _checkpoint(cp, index[cp.id], numbers) for cp in snap.checkpoints if cp.id not in placed
    ]
    if snap.todos:
        items = []
        for t in snap.todos:
            mark = _TASK_LIST_MARKS.get(t.status, "[ ]")
            note = " *(in progress)*" if t.status == "in_progress" else ""
            items.append(f"- {mark} {t.content}{note}")
        blocks.append("## Todos\n\n" + "\n".join(items))
    return "\n\n".join(blocks) + "\n"
