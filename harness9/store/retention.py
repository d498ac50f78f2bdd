"""Retention: sessions idle for longer than ``retention_days`` are removed when chat starts.

Off unless ``retention_days`` is set in ``$HARNESS9_HOME/config.toml``. The cron
path stays ``harness9 sessions delete --older-than``; this is for people who
want clean-up without a crontab.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness9.store.backend import SessionStore

DAY_SECONDS = 86_400


def apply_retention(
    manager: SessionStore, days: int, now: float | None = None, *, keep: Iterable[str] = ()
) -> list[str]:
    """Delete sessions not updated within ``days`` days of ``now``; return their ids.

    ``days`` == 0 means retention is off (no session is deleted). ``keep`` spares
    sessions by id, e.g. the one ``chat --resume`` is about to open.
    """
    if isinstance(days, bool) or not isinstance(days, int) or days < 0:
        raise ValueError(f"days must be a whole number >= 0, got {days!r}")
    # Whatever an import that died half-way left behind goes too (it was never visible):
    # a cheap look at an empty table when there is none.
    manager.discard_unfinished_imports()
    if days == 0:
        return []
    cutoff = (time.time() if now is None else now) - days * DAY_SECONDS
    return manager.delete_sessions_older_than(cutoff, keep=keep)


def retention_notice(deleted: Sequence[str], days: int) -> str | None:
    """The one line chat prints at start-up, or None when nothing was removed."""
    if not deleted:
        return None
    what = "1 session" if len(deleted) == 1 else f"{len(deleted)} sessions"
    unit = "day" if days == 1 else "days"
    return f"Removed {what} not updated in {days} {unit} (retention_days in config.toml)."


def startup_retention(manager: SessionStore, days: int, *, keep: Iterable[str] = ()) -> str | None:
    """Apply ``days`` of retention (``retention_days``, resolved by the CLI), return the
    notice (or None)."""
    return retention_notice(apply_retention(manager, days, keep=keep), days)
