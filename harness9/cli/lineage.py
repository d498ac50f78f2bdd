"""``harness9 sessions fork ID [--at N]``: a new session from a point of an existing one.

Registered on ``sessions_app`` by harness9.cli.sessions. The origin is only read;
the fork's id is printed on stdout (for scripts: ``chat --resume "$(… fork …)"``), what
was done on stderr, as ``sessions import`` does; ``--json`` prints both as one object.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from harness9.cli.env import environment
from harness9.config import store_location
from harness9.store.backend import open_existing_store
from harness9.store.export import fork_origin_to_json
from harness9.store.session import SessionNotFoundError
from harness9.ui.text import plural


def fork_command(
    ctx: typer.Context,
    session_id: Annotated[
        str, typer.Argument(metavar="ID", help="Session id, or any unique prefix of one.")
    ],
    at: Annotated[
        int | None,
        typer.Option(
            "--at",
            metavar="N",
            help="Keep messages 1..N, as `sessions show` numbers them (default: all).",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON (for scripts) instead of the new id.")
    ] = False,
) -> None:
    """Fork a session: a new one with its messages up to N, the checkpoints and the todo
    list it had then (a session last saved by an older harness9: its list as it is now),
    its pins and settings. Prints the new id; the original is not changed."""
    from harness9.ui.goback import fork_with_outputs

    env = environment(ctx)
    store = open_existing_store(store_location())
    if store is None:
        raise SessionNotFoundError(session_id)
    with store:
        fork = fork_with_outputs(store, store.resolve_id(session_id), at)
        origin = store.fork_origin(fork)
        kept = store.session_info(fork).message_count
    if as_json:
        data = {"id": fork, "message_count": kept, "forked_from": fork_origin_to_json(origin)}
        env.echo(json.dumps(data, ensure_ascii=False, indent=2))
        return
    env.echo(fork)
    if origin is not None:
        env.echo(
            f"Forked session {origin.session_id} at message {origin.message} "
            f"({plural(kept, 'message')}) into {fork}.",
            err=True,
        )
