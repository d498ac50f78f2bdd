"""Forks (ARCHITECTURE decision 9: a session is a tree): what a fork copies, and how.

A fork is a new session holding the origin's messages 1..N (as ``sessions show``
numbers them), copied with one set-based ``INSERT … SELECT`` in id order, so the
fork's messages get new ids in the same order. The checkpoints the origin had when
message N was its newest come along (``kept_checkpoints``), moved to the new ids
(``moved_checkpoint``: the anchor, the stubs' keys, the recall handles and the
``msg_<id>`` handles the summary's prose mentions), so resuming the fork sends the
view the origin had at N.
The origin is only read. Driver-neutral helpers; the manager runs them in one
transaction.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from harness9.errors import UsageError
from harness9.store.session import Checkpoint, checkpoint_message_ids, move_checkpoint_ids

# A recall handle as harness9.context.recall writes it (msg_<message id>).
_HANDLE_RE = re.compile(r"\bmsg_(\d+)\b")


class ForkPointError(UsageError):
    """The message number to fork at names no message of the session."""


@dataclass(slots=True, frozen=True)
class ForkPoint:
    """The origin's message N: its id (0 for an empty fork) and the creation time of
    the message after it (None when N is the newest)."""

    number: int
    last_id: int
    next_created: float | None


def check_fork_number(at: int | None, total: int) -> int:
    """The number of messages a fork keeps: ``at``, or all of them."""
    if at is None:
        return total
    if isinstance(at, bool) or not isinstance(at, int) or not 1 <= at <= total:
        raise ForkPointError(
            f"there is no message {at} to fork at: the session has {total} "
            f"message{'' if total == 1 else 's'} (numbered as `sessions show` numbers them)"
        )
    return at


def kept_checkpoints(checkpoints: Iterable[Checkpoint], point: ForkPoint) -> list[Checkpoint]:
    """The checkpoints the session had when message ``point.number`` was its newest.

    One covers messages up to N at most, stubs none after N, and was made before the
    next message was written (a compaction made right after N, before the reply, is
    part of the view at N; one made later that still ends before N is not).
    """
    out = []
    for cp in checkpoints:
        if cp.last_message_id > point.last_id:
            continue
        if any(k > point.last_id for k in cp.stubs):
            continue
        if point.next_created is not None and cp.created_at > point.next_created:
            continue
        out.append(cp)
    return out


def referenced_ids(cp: Checkpoint) -> set[int]:
    """Every message id ``cp`` names: its data's (anchor, stubs, recall handles) and the
    handles the summary's prose mentions."""
    ids = checkpoint_message_ids(cp)
    ids.update(int(m) for m in _HANDLE_RE.findall(cp.summary))
    ids.discard(0)
    return ids


def moved_checkpoint(cp: Checkpoint, new_id: Callable[[int], int | None]) -> Checkpoint:
    """``cp`` for the fork: every message id it names moved by ``new_id`` (None: not
    copied; a handle to such a message is left as written)."""

    def one(m: re.Match[str]) -> str:
        moved = new_id(int(m.group(1)))
        return f"msg_{moved}" if moved is not None else m.group(0)

    moved = move_checkpoint_ids(cp, new_id)
    return replace(moved, id=0, summary=_HANDLE_RE.sub(one, cp.summary))
