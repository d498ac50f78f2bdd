"""Where you were: the lines printed when a session is resumed.

One line names the session (id, title, age, message count, how full the
window is), then the last exchange, abbreviated: your last message and the
reply to it, with the tool calls in between counted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.text import Text

from harness9.schema import Message
from harness9.store.session import SessionInfo
from harness9.tokens import format_token_count
from harness9.ui.status import usage_style
from harness9.ui.text import inert, plural

RECAP_LINES = 3  # lines kept of each side of the last exchange
RECAP_CHARS = 240  # and at most this many characters


def age(seconds: float) -> str:
    """``just now``, ``5 min ago``, ``3 h ago``, ``2 days ago``."""
    s = max(0, int(seconds))
    if s < 60:
        return "just now"
    if s < 3600:
        return f"{s // 60} min ago"
    if s < 86400:
        return f"{s // 3600} h ago"
    days = s // 86400
    return f"{plural(days, 'day')} ago"


def abbreviate(text: str, lines: int = RECAP_LINES, chars: int = RECAP_CHARS) -> str:
    """The first ``lines`` non-empty lines, at most ``chars`` characters, ``…`` when cut."""
    kept = [ln.rstrip() for ln in text.strip().splitlines() if ln.strip()]
    cut = len(kept) > lines
    out = "\n".join(kept[:lines])
    if len(out) > chars:
        out, cut = out[: chars - 1].rstrip(), True
    return out + (" …" if cut else "")


def last_exchange(messages: Sequence[Message]) -> tuple[Message | None, list[Message]]:
    """The last user message of the log and everything after it."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "user":
            return m, list(messages[i + 1 :])
    return None, []


def recap(
    info: SessionInfo,
    messages: Sequence[Message],
    tokens: int,
    window: int,
    *,
    now: float | None = None,
) -> list[Text]:
    """The recap's lines: the session line, then the last exchange (if there is one)."""
    when = age((now if now is not None else time.time()) - info.updated_at)
    pct = round(100 * tokens / window) if window > 0 else 0
    head = Text("resumed session ", style="green")
    head.append(info.id[:8], style="bold green")
    title = inert(info.title) if info.title else "(untitled)"
    head.append(f" · {title} · {when} · {plural(info.message_count, 'message')} · ")
    head.append(
        f"ctx ~{format_token_count(tokens)}/{format_token_count(window)} ({pct}%)",
        style=usage_style(tokens, window),
    )
    lines = [head]
    user, after = last_exchange(messages)
    if user is None:
        return lines
    lines.append(_quoted("you", user.content, "bold cyan"))
    calls = sum(len(m.tool_calls) for m in after if m.role == "assistant")
    replies = [m for m in after if m.role == "assistant" and m.content.strip()]
    if calls:
        lines.append(Text(f"  ({calls} tool call{'s' if calls != 1 else ''})", style="dim"))
    if replies:
        lines.append(_quoted("assistant", replies[-1].content, "bold green"))
    elif not calls:
        lines.append(Text("  (no reply yet)", style="dim"))
    return lines


def _quoted(who: str, content: str, style: str) -> Text:
    line = Text(f"  {who}: ", style=style)
    body = inert(abbreviate(content)).replace("\n", "\n    ")
    line.append(body, style="dim")
    return line
