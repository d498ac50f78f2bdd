"""A session with its sub-agents' sessions, moved as one (export, import, migrate).

A snapshot is one session; ``family_snapshot`` adds the sub-agents' sessions below it,
and ``restore_family`` stores such a tree, each child linked to its restored parent.
"""

from __future__ import annotations

import contextlib

from harness9.store.backend import SessionStore
from harness9.store.export import SessionSnapshot
from harness9.store.session import SubAgentLink

MAX_DEPTH = 8  # far beyond the one extra level sub-agents may nest


def family_snapshot(store: SessionStore, session_id: str, depth: int = 0) -> SessionSnapshot:
    """``session_id``'s snapshot with its sub-agents' sessions in ``children``."""
    snap = store.snapshot(session_id)
    if depth < MAX_DEPTH:
        snap.children = [
            family_snapshot(store, link.session_id, depth + 1)
            for link, _info in store.children(session_id)
        ]
    return snap


def family_members(snap: SessionSnapshot) -> list[SessionSnapshot]:
    """The snapshot and every one below it, parents first."""
    out = [snap]
    for child in snap.children:
        out += family_members(child)
    return out


def restore_family(
    store: SessionStore, snap: SessionSnapshot, *, new_id: bool = False
) -> list[str]:
    """Store ``snap`` and its children; the stored ids, parents first (in
    ``family_members`` order). A failure removes what this call had stored, children
    first, and re-raises. A session that was a sub-agent's is linked to its parent
    when that parent is in the store (as it is for each child of a family)."""
    stored: list[str] = []
    try:
        _restore(store, snap, new_id, None, stored)
    except BaseException:
        from harness9.store.session import SessionNotFoundError

        for sid in reversed(stored):
            with contextlib.suppress(SessionNotFoundError):  # gone with its parent
                store.delete_sessions([sid])
        raise
    return stored


def _restore(
    store: SessionStore,
    snap: SessionSnapshot,
    new_id: bool,
    parent_id: str | None,
    stored: list[str],
) -> None:
    sid = store.restore(snap, new_id=new_id)
    stored.append(sid)
    link = snap.link
    parent = parent_id or (link.parent_id if link is not None and not new_id else None)
    if link is not None and parent is not None and _exists(store, parent):
        store.link_child(SubAgentLink(sid, parent, link.tool_call_id, link.description))
    for child in snap.children:
        _restore(store, child, new_id, sid, stored)


def _exists(store: SessionStore, session_id: str) -> bool:
    from harness9.store.session import SessionNotFoundError

    try:
        store.session_info(session_id)
    except SessionNotFoundError:
        return False
    return True
