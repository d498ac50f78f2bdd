"""The session list as plain fixed-width text.

``sessions list`` runs from cron over thousands of sessions: a Rich table of
1,000 rows takes over half a second to lay out (measured by
scripts/bench_store.py), and importing Rich alone costs ~50 ms. Plain columns
are instant and stay greppable.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from harness9.store.session import ForkOrigin, SessionInfo, valid_timestamp

# C0/C1 controls (tab and newline included: a title is one line) and bidi overrides.
_UNSAFE_IN_ONE_LINE_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def iso_utc(ts: float) -> str | None:
    """``2026-05-17T14:30:00Z``: what every --json output and export uses.

    None for a stored value that is no time at all (a damaged or hand-edited row).
    """
    if not valid_timestamp(ts):
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def local_time(ts: float) -> str:
    """``2026-05-17 16:30`` in local time; without strftime, a third of the cost per row."""
    if not valid_timestamp(ts):
        return "????-??-?? ??:??"  # same width as a real time: columns stay aligned
    try:
        t = time.localtime(ts)
    except (OverflowError, OSError, ValueError):  # the local offset pushed it past year 9999
        return "????-??-?? ??:??"
    return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}"


MIN_TITLE = 8  # columns of title a line must keep before the id is shortened


def marked_title(title: str, origin: ForkOrigin | None) -> str:
    """A fork's title says whose fork it is: it carries its origin's title, and two
    identical rows in a listing would be told apart by their ids alone."""
    if origin is None:
        return title
    return f"fork of {origin.session_id[:8]} at #{origin.message}: {title}"


def session_lines(
    sessions: Sequence[SessionInfo],
    width: int | None = None,
    origins: Mapping[str, ForkOrigin] | None = None,
) -> list[str]:
    """Header plus one line per session; titles cut to ``width`` columns when given;
    ``origins`` (by fork id) marks the forks."""
    if not sessions:
        return ["No sessions."]
    count_w = max(4, *(len(str(s.message_count)) for s in sessions))
    # A narrow terminal gets the 8-character id prefix (any unique prefix is accepted)
    # rather than a line with no room left for the title.
    id_w = 36 if not width or width >= 36 + 2 + 16 + 2 + count_w + 2 + MIN_TITLE else 8
    head = f"{'ID':<{id_w}}  {'UPDATED':<16}  {'MSGS':>{count_w}}  TITLE"
    lines = [head]
    for s in sessions:
        title = _UNSAFE_IN_ONE_LINE_RE.sub("?", marked_title(s.title, (origins or {}).get(s.id)))
        if s.parent_id:  # a sub-agent's session (`list --all`)
            title = f"↳ sub-agent of {s.parent_id[:8]}: {title}"
        sid = s.id[:id_w]
        lines.append(
            f"{sid:<{id_w}}  {local_time(s.updated_at)}  {s.message_count:>{count_w}}  {title}"
        )
    if width:
        lines = [ln if len(ln) <= width else ln[: max(width - 1, 0)] + "…" for ln in lines]
    return lines
