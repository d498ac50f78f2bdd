"""Rich renderers for stored sessions. Each takes the Console to print on.

Stored content is whatever a model or a tool produced, so it is always printed
as ``rich.text.Text`` (never parsed as markup) and with control characters
made visible: an escape sequence in a tool result must not drive the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from harness9.schema import TODO_MARKS, TodoItem
from harness9.store.session import (
    Checkpoint,
    Lineage,
    SessionInfo,
    StoredMessage,
    SubAgentLink,
)
from harness9.ui.listing import local_time
from harness9.ui.text import inert, plural

_ROLE_STYLES = {
    "user": "bold cyan",
    "assistant": "bold green",
    "tool": "bold yellow",
    "system": "bold magenta",
}


def render_session(
    console: Console,
    info: SessionInfo,
    records: Sequence[StoredMessage],
    todos: Sequence[TodoItem],
    checkpoints: Sequence[Checkpoint],
    *,
    limited: bool = False,
    lineage: Lineage | None = None,
) -> None:
    """A session's header, its messages (oldest first), todos and compaction checkpoints.

    ``limited``: ``records`` are only the newest messages (``show --limit``);
    ``lineage``: the fork's origin, its forks and its pins, shown under the header.
    """
    head = Text()
    head.append(info.id, style="bold")
    head.append(f"  {inert(info.title)}" if info.title else "")
    console.print(head)
    console.print(
        Text(
            f"created {local_time(info.created_at)} · updated {local_time(info.updated_at)} · "
            f"{plural(info.message_count, 'message')}",
            style="dim",
        )
    )
    if lineage is not None:
        render_lineage(console, lineage)
    if limited and len(records) < info.message_count:
        console.print(Text(f"(showing the last {len(records)})", style="dim"))
    # Messages are numbered within the session (#1 is its first message); row ids are
    # global to the store and stay in --json.
    first = max(1, info.message_count - len(records) + 1) if limited else 1
    numbers = {rec.id: first + i for i, rec in enumerate(records)}
    for rec in records:
        render_message(console, rec, numbers[rec.id])
    if todos:
        console.print()
        console.print(Text("Todos", style="bold underline"))
        for t in todos:
            console.print(Text(f"  {TODO_MARKS.get(t.status, '[?]')} {inert(t.content)}"))
    if checkpoints:
        console.print()
        console.print(Text("Compaction checkpoints", style="bold underline"))
        for cp in checkpoints:
            render_checkpoint(console, cp, numbers.get(cp.last_message_id))


def render_lineage(console: Console, lineage: Lineage) -> None:
    """Where the session was forked from, the forks made from it, and its pins."""
    if lineage.origin is not None:
        o = lineage.origin
        gone = " (since deleted)" if lineage.origin_deleted else ""
        console.print(Text(f"forked from {o.session_id} at message {o.message}{gone}", style="dim"))
    for fork, number in lineage.forks:
        console.print(Text(f"fork {fork} at message {number}", style="dim"))
    if lineage.pins:
        console.print(Text("Pins", style="bold underline"))
        for i, pin in enumerate(lineage.pins, 1):
            console.print(Text(f"  {i}. {inert(pin)}"))


def render_message(console: Console, rec: StoredMessage, number: int | None = None) -> None:
    msg = rec.message
    console.print()
    line = Text()
    line.append(f"#{rec.id if number is None else number} ", style="dim")
    line.append(inert(msg.role), style=_ROLE_STYLES.get(msg.role, "bold"))
    if msg.tool_call_id:
        line.append(f" (result of {inert(msg.tool_call_id)})", style="dim")
    line.append(f"  {local_time(rec.created_at)}", style="dim")
    console.print(line)
    if msg.content:
        console.print(Text(inert(msg.content)))
    for call in msg.tool_calls:
        call_line = Text("  → ", style="yellow")
        call_line.append(inert(call.name), style="bold")
        call_line.append(f"({inert(call.arguments)})")
        call_line.append(f"  [{inert(call.id)}]", style="dim")
        console.print(call_line)


def render_checkpoint(console: Console, cp: Checkpoint, number: int | None = None) -> None:
    upto = f"message #{number}" if number is not None else f"message row {cp.last_message_id}"
    line = Text(
        f"  up to {upto} · {inert(cp.strategy)} · "
        f"{cp.tokens_before} → {cp.tokens_after} tokens · "
        f"{cp.messages_before} → {plural(cp.messages_after, 'message')} · "
        f"{local_time(cp.created_at)}"
    )
    console.print(line)
    if cp.summary:
        console.print(Text(inert(cp.summary), style="dim"))


def render_family(
    console: Console,
    link: SubAgentLink | None,
    children: Sequence[tuple[SubAgentLink, SessionInfo]],
) -> None:
    """Whose sub-agent a session is, and the sub-agents it ran (`task` calls)."""
    if link is not None:
        console.print()
        console.print(
            Text(
                f"Sub-agent of session {link.parent_id} (its call {inert(link.tool_call_id)}"
                + (f": {inert(link.description)})" if link.description else ")"),
                style="dim",
            )
        )
    if not children:
        return
    console.print()
    console.print(Text("Sub-agents", style="bold underline"))
    for k, info in children:
        line = Text(f"  {info.id}  ", style="bold")
        line.append(inert(k.description or info.title))
        line.append(
            f"  · {plural(info.message_count, 'message')} · call {inert(k.tool_call_id)}",
            style="dim",
        )
        console.print(line)
