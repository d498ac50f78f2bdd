"""Going back in chat: /pin, /pins, /unpin, /fork and /rewind (see docs/architecture.md,
'A session is a tree').

Nothing here deletes anything: a fork or a rewind is a new session made from a point
of the current one (the store shares the messages and copies the checkpoints up to
it), and the chat switches to it; the line left behind stays resumable. ``fork_with_outputs``
is also what ``harness9 sessions fork`` runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from rich.text import Text

from harness9.errors import UsageError
from harness9.schema import ROLE_USER
from harness9.store.blobs import copy_session_blobs
from harness9.ui.text import inert

if TYPE_CHECKING:
    from harness9.store.backend import SessionStore


class ChatLoop(Protocol):
    """What these commands use of the chat loop (harness9.ui.repl.ChatLoop)."""

    engine: Any
    manager: Any
    io: Any
    started: set[str]

    def switch_to(self, session: Any) -> None: ...

    def put_back(self, text: str) -> None: ...


REWIND_SHOWN = 10  # user messages /rewind lists
_PREVIEW_CHARS = 70


def fork_with_outputs(store: SessionStore, session_id: str, at: int | None = None) -> str:
    """Fork ``session_id`` at message ``at`` (all without it); the fork's id.

    A database store copies the offloaded outputs in the fork's transaction; with the
    default files in $HARNESS9_HOME they are copied here, so every handle the fork's
    checkpoints name stays recallable.
    """
    fork = store.fork_session(session_id, at)
    if store.blob_store() is None:
        from harness9.tools.offload import OffloadStore

        copy_session_blobs(OffloadStore().blobs, session_id, fork)
    return fork


def _number(text: str, what: str) -> int:
    if not text.strip().isdigit():
        raise UsageError(f"usage: {what}")
    return int(text)


def cmd_pin(loop: ChatLoop, rest: str) -> None:
    if not rest:
        raise UsageError("usage: /pin TEXT (a note kept in every request until /unpin)")
    number = loop.engine.session.add_pin(rest)
    loop.io.err.print(Text(f"pinned as {number}: ", style="green") + Text(inert(rest)))


def cmd_pins(loop: ChatLoop, _rest: str) -> None:
    pins = loop.engine.session.pins()
    if not pins:
        loop.io.err.print("no pins; /pin TEXT keeps a note in every request")
        return
    loop.io.err.print(f"Pins ({len(pins)}), in every request until /unpin N:")
    for i, text in enumerate(pins, 1):
        loop.io.err.print(f"  [{i}] {inert(text)}", markup=False, highlight=False)


def cmd_unpin(loop: ChatLoop, rest: str) -> None:
    number = _number(rest, "/unpin N (N as /pins numbers them)")
    text = loop.engine.session.remove_pin(number)
    if text is None:
        raise UsageError(f"no pin {number}; /pins lists them")
    loop.io.err.print(Text(f"unpinned {number}: ", style="green") + Text(inert(text)))


def _fork_and_switch(loop: ChatLoop, at: int | None, verb: str) -> None:
    session = loop.engine.session
    session.flush()  # held replies belong to the line being forked
    origin = session.session_id
    fork = fork_with_outputs(loop.manager, origin, at)
    # This chat made the fork: left empty (a fork of an empty session), it goes the way
    # of any session the chat started and left empty, never an orphan in `sessions list`.
    loop.started.add(fork)
    loop.switch_to(loop.manager.open_session(fork))
    kept = loop.manager.session_info(fork).message_count
    loop.io.err.print(
        Text(
            f"{verb}: now in fork {fork} ({kept} message{'' if kept == 1 else 's'}); "
            f"the original {origin} is unchanged (/resume or --resume returns to it)",
            style="green",
        )
    )


def cmd_fork(loop: ChatLoop, rest: str) -> None:
    at = _number(rest, "/fork [N] (N as `sessions show` numbers messages)") if rest else None
    _fork_and_switch(loop, at, "forked")


def cmd_rewind(loop: ChatLoop, rest: str) -> None:
    records = loop.engine.session.get_records()
    if rest:
        _rewind_to(loop, _number(rest, "/rewind [N]"), records)
        return
    users = [
        (n, r.message.content) for n, r in enumerate(records, 1) if r.message.role == ROLE_USER
    ][-REWIND_SHOWN:]
    if not users:
        loop.io.err.print("nothing to rewind to: this session has no message of yours yet")
        return
    loop.io.err.print(
        "Your recent messages (/rewind N continues, in a fork, from before your message N, "
        "with its text back in the prompt to send again or change):"
    )
    for n, text in users:
        line = " ".join(text.split())
        line = line if len(line) <= _PREVIEW_CHARS else line[: _PREVIEW_CHARS - 1] + "…"
        loop.io.err.print(f"  [{n}] {inert(line)}", markup=False, highlight=False)


def _rewind_to(loop: ChatLoop, n: int, records: list[Any]) -> None:
    """Continue from message ``n`` in a fork. When ``n`` is one of the user's own messages,
    the fork ends just before it and its text goes back in the prompt: sent as it was
    kept, the next request would carry two user turns in a row, the first unanswered."""
    msg = records[n - 1].message if 1 <= n <= len(records) else None
    if msg is None or msg.role != ROLE_USER:
        _fork_and_switch(loop, n, f"rewound to message {n}")
        return
    if n > 1:
        _fork_and_switch(loop, n - 1, f"rewound to before your message {n}")
    else:  # nothing came before it: a fresh session
        loop.engine.session.flush()
        origin = loop.engine.session.session_id
        fresh = loop.manager.new_session()
        loop.started.add(fresh.session_id)
        loop.switch_to(fresh)
        loop.io.err.print(
            Text(
                f"rewound to before your message 1: now in new session {fresh.session_id}; "
                f"the original {origin} is unchanged (/resume or --resume returns to it)",
                style="green",
            )
        )
    loop.put_back(msg.content)
