"""``harness9 sessions list|show|delete|search|fork|export|import|migrate``: the store,
scriptable.

Runs from cron, so it stays cheap: no litellm, and Rich only for human output.
Errors are raised as HarnessError subclasses; the root group prints them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from harness9.cli.env import Environment, environment
from harness9.cli.help import HarnessCommand
from harness9.config import store_location, use_database_url
from harness9.errors import HarnessError, UsageError
from harness9.schema import TodoItem
from harness9.store.backend import SessionStore, open_existing_store
from harness9.store.codec import checkpoint_to_json, record_to_json
from harness9.store.export import fork_origin_to_json
from harness9.store.search import SearchHit, snippet_parts, to_fts_query
from harness9.store.session import (
    Checkpoint,
    CorruptRow,
    ForkOrigin,
    Lineage,
    SessionInfo,
    SessionNotFoundError,
    StoredMessage,
    SubAgentLink,
    UsageTotals,
)
from harness9.ui.listing import iso_utc
from harness9.ui.text import corrupt_row_warning, plural

sessions_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Stored sessions: list, show, search, fork, export, import, migrate, delete.",
)

_AGE_RE = re.compile(r"(\d+)([smhdw])")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@sessions_app.callback()
def _sessions_root(
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            metavar="URL",
            help="Use the sessions in this PostgreSQL database (env HARNESS9_DATABASE_URL).",
        ),
    ] = None,
) -> None:
    """Stored sessions: list, show, search, fork, export, import, migrate, delete."""
    if database_url is not None:  # else keep what `harness9 --database-url` set
        use_database_url(database_url)


class NotConfirmedError(HarnessError):
    """The user (or the lack of a terminal) did not confirm a deletion."""


def parse_age(text: str) -> float:
    """``"30d"`` -> seconds. Units: s, m, h, d, w. A bad value is a usage error."""
    match = _AGE_RE.fullmatch(text.strip().lower())
    if not match or int(match.group(1)) == 0:
        raise UsageError(
            f"--older-than takes a positive number and a unit s/m/h/d/w (e.g. 30d), got {text!r}"
        )
    return int(match.group(1)) * _AGE_UNITS[match.group(2)]


def _open_store() -> SessionStore | None:
    """The user's store, or None if there is none yet (reading must not create one)."""
    return open_existing_store(store_location(), on_session_deleted=_remove_offloads)


def _remove_offloads(session_id: str) -> None:
    # The offload store owns its directories; imported only when a session is deleted,
    # so listing and showing never pay for harness9.context.
    from harness9.tools.offload import remove_session_offloads

    remove_session_offloads(session_id)


def _print_lines(
    env: Environment,
    infos: list[SessionInfo],
    origins: dict[str, ForkOrigin] | None = None,
    *,
    err: bool = False,
) -> None:
    from harness9.ui.listing import session_lines

    text = "\n".join(session_lines(infos, env.columns, origins)) + "\n"
    if err:
        env.stderr.write(text)
        env.stderr.flush()
    else:
        env.write(text)


def _print_json(env: Environment, data: Any) -> None:
    env.echo(json.dumps(data, ensure_ascii=False, indent=2))


def _info_json(
    info: SessionInfo,
    usage: UsageTotals | None = None,
    origin: ForkOrigin | None = None,
    subagents: UsageTotals | None = None,
) -> dict[str, Any]:
    """A session's row; ``usage`` counts its sub-agents' calls too (``subagents``: their part)."""
    sub = subagents or UsageTotals()
    return {
        "id": info.id,
        "parent_id": info.parent_id or None,
        "title": info.title,
        "created_at": iso_utc(info.created_at),
        "updated_at": iso_utc(info.updated_at),
        "message_count": info.message_count,
        "workdir": info.workdir or None,  # null: no chat recorded where it ran
        "usage": {**_usage_json((usage or UsageTotals()).plus(sub)), "subagents": _part(sub)},
        "forked_from": fork_origin_to_json(origin),
    }


def _part(u: UsageTotals) -> dict[str, Any]:
    return {
        "model_calls": u.model_calls,
        "input_tokens": u.input_tokens,
        "cached_tokens": u.cached_tokens,
        "output_tokens": u.output_tokens,
        "cost_usd": round(u.cost_usd, 6) if u.priced else None,
        "unpriced_calls": u.unpriced_calls,
    }


def _subagent_totals(
    infos: list[SessionInfo], usage: dict[str, UsageTotals]
) -> dict[str, UsageTotals]:
    """Each session's sub-agents' usage, summed over all its descendants."""
    kids: dict[str, list[str]] = {}
    for i in infos:
        if i.parent_id:
            kids.setdefault(i.parent_id, []).append(i.id)

    def below(sid: str, depth: int = 0) -> UsageTotals:
        total = UsageTotals()
        for kid in kids.get(sid, []) if depth < 8 else []:
            total = total.plus(usage.get(kid, UsageTotals())).plus(below(kid, depth + 1))
        return total

    return {sid: below(sid) for sid in kids}


def _usage_json(usage: UsageTotals) -> dict[str, Any]:
    """Summed model usage; ``cost_usd`` is null when no call had a known price."""
    return {
        "model_calls": usage.model_calls,
        "input_tokens": usage.input_tokens,
        "cached_tokens": usage.cached_tokens,  # read from a prompt cache
        "cache_write_tokens": usage.cache_write_tokens,  # written to it
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "cost_usd": round(usage.cost_usd, 6) if usage.priced else None,
        "unpriced_calls": usage.unpriced_calls,
        # The compaction summaries' part of the totals above.
        "summaries": {
            "model_calls": usage.summary_calls,
            "input_tokens": usage.summary_input_tokens,
            "output_tokens": usage.summary_output_tokens,
            "cost_usd": round(usage.summary_cost_usd, 6) if usage.summaries_priced else None,
            "unpriced_calls": usage.summary_unpriced_calls,
        },
    }


def _message_json(rec: StoredMessage) -> dict[str, Any]:
    return {**record_to_json(rec), "created_at": iso_utc(rec.created_at)}


def _checkpoint_json(cp: Checkpoint) -> dict[str, Any]:
    return {**checkpoint_to_json(cp), "created_at": iso_utc(cp.created_at)}


JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print JSON (for scripts) instead of the human view.")
]


@sessions_app.command("list", cls=HarnessCommand)
def list_sessions(
    ctx: typer.Context,
    as_json: JsonOpt = False,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=0, help="Show at most N sessions (0: all).")
    ] = 0,
    all_: Annotated[
        bool, typer.Option("--all", "-a", help="Include the sessions of sub-agents (`task`).")
    ] = False,
) -> None:
    """List sessions, most recently updated first (sub-agents' sessions with --all).

    --json prints an array of {id, parent_id, title, created_at, updated_at, message_count,
    workdir, usage, forked_from}; times are ISO-8601 UTC. A store that does not exist yet
    lists nothing (and is not created).
    """
    env = environment(ctx)
    store = _open_store()
    infos: list[SessionInfo] = []
    origins: dict[str, ForkOrigin] = {}
    rows: list[dict[str, Any]] = []
    if store is not None:
        with store:
            infos = store.list_sessions(limit, children=all_)
            origins = store.fork_origins()
            if as_json:
                rows = _listed_json(store, infos, origins)
    if as_json:
        _print_json(env, rows)
        return
    _print_lines(env, infos, origins)


def _listed_json(
    store: SessionStore, infos: list[SessionInfo], origins: dict[str, ForkOrigin]
) -> list[dict[str, Any]]:
    """``infos`` as ``sessions list --json`` prints them (usage with their sub-agents')."""
    usage = store.usage_by_session()
    below = _subagent_totals(store.list_sessions(children=True), usage)
    return [_info_json(i, usage.get(i.id), origins.get(i.id), below.get(i.id)) for i in infos]


@sessions_app.command("show", cls=HarnessCommand)
def show_session(
    ctx: typer.Context,
    session_id: Annotated[
        str, typer.Argument(metavar="ID", help="Session id, or any unique prefix of one.")
    ],
    as_json: JsonOpt = False,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=0, help="Show only the newest N messages (0: all).")
    ] = 0,
) -> None:
    """Show a session's messages, todos and compaction checkpoints.

    A damaged message row is skipped with a warning on stderr; the rest is shown. --json
    adds the messages, todos, checkpoints, pins, corrupt_rows, children and forks to what
    list --json prints of a session.
    """
    env = environment(ctx)
    store = _open_store()
    if store is None:
        raise SessionNotFoundError(session_id)
    with store:
        shown = _read_shown(store, store.resolve_id(session_id), limit)
    for row in shown.corrupt:
        env.echo(corrupt_row_warning(row.id, row.reason), err=True)
    if as_json:
        _print_json(env, _shown_json(shown))
        return
    from harness9.ui.render import render_family, render_session

    # Piped output is for programs: never hard-wrapped at an imagined 80 columns.
    console = env.console()
    render_session(
        console,
        shown.info,
        shown.records,
        shown.todos,
        shown.checkpoints,
        limited=limit > 0,
        lineage=shown.lineage,
    )
    render_family(console, shown.link, shown.children)


@dataclass(slots=True)
class _Shown:
    """Everything ``sessions show`` prints of a session, read in one go."""

    info: SessionInfo
    records: list[StoredMessage]
    corrupt: list[CorruptRow]
    todos: list[TodoItem]
    checkpoints: list[Checkpoint]
    usage: UsageTotals
    lineage: Lineage
    link: SubAgentLink | None
    children: list[tuple[SubAgentLink, SessionInfo]]
    subagents: UsageTotals


def _read_shown(store: SessionStore, full_id: str, limit: int) -> _Shown:
    session = store.open_session(full_id)
    info = store.session_info(full_id)
    records = session.get_records(limit)
    return _Shown(
        info,
        records,
        list(session.corrupt_rows),
        session.get_todos() or [],
        session.list_checkpoints(),
        store.usage_totals(full_id),
        _lineage(store, full_id, session.pins()),
        store.subagent_link(full_id),
        store.children(full_id),
        store.subagent_usage(full_id),
    )


def _lineage(store: SessionStore, full_id: str, pins: list[str]) -> Lineage:
    origin = store.fork_origin(full_id)
    gone = False
    if origin is not None:
        try:
            store.session_info(origin.session_id)
        except SessionNotFoundError:
            gone = True
    return Lineage(origin, store.forks_of(full_id), pins, origin_deleted=gone)


def _shown_json(shown: _Shown) -> dict[str, Any]:
    data = _info_json(shown.info, shown.usage, shown.lineage.origin, shown.subagents)
    data["forks"] = [{"session_id": f, "message": n} for f, n in shown.lineage.forks]
    data["pins"] = shown.lineage.pins
    data["tool_call_id"] = shown.link.tool_call_id if shown.link is not None else None
    data["messages"] = [_message_json(r) for r in shown.records]
    data["todos"] = [t.to_dict() for t in shown.todos]
    data["checkpoints"] = [_checkpoint_json(c) for c in shown.checkpoints]
    data["corrupt_rows"] = [{"id": c.id, "reason": c.reason} for c in shown.corrupt]
    data["children"] = [
        {**_info_json(i), "tool_call_id": k.tool_call_id, "description": k.description}
        for k, i in shown.children
    ]
    for child in data["children"]:
        del child["usage"]  # `sessions show CHILD` has it
    return data


@sessions_app.command("delete", cls=HarnessCommand)
def delete_sessions(
    ctx: typer.Context,
    session_ids: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="ID", help="Session ids (or unique prefixes) to delete.", show_default=False
        ),
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="AGE",
            help="Delete every session not updated for AGE: a number and a unit s/m/h/d/w (30d).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be deleted; delete nothing.")
    ] = False,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes", "-y", help="Do not ask for confirmation (needed without a terminal)."
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the sessions deleted (or, with --dry-run, listed) as JSON on stdout; "
            "messages go to stderr.",
        ),
    ] = False,
) -> None:
    """Delete sessions by id, or all sessions older than an age (for cron).

    A session goes with its sub-agents' sessions and its offloaded tool outputs; its forks
    stay. Without a terminal nothing is deleted unless --yes (exit 1). --older-than goes by
    the last update and keeps a session written to meanwhile. --json prints an array of
    the sessions as list --json does, each with "deleted": true, or false when --dry-run
    only listed it (or it was skipped). A crontab line that keeps a month of history:

    \b
      0 4 * * * harness9 sessions delete --older-than 30d --yes
    """
    env = environment(ctx)
    if session_ids and older_than is not None:
        raise UsageError("give session ids or --older-than, not both")
    if not session_ids and older_than is None:
        raise UsageError("give the session ids to delete, or --older-than AGE")
    age = parse_age(older_than) if older_than is not None else 0.0
    cutoff = env.clock() - age
    store = _open_store()
    if store is None and session_ids:
        raise SessionNotFoundError(session_ids[0])
    targets: list[SessionInfo] = []
    rows: list[dict[str, Any]] = []
    deleted: list[str] | None = None  # None: nothing was asked of the store (dry run, a no)
    if store is not None:
        with store:
            targets, rows, deleted = _delete_chosen(
                env, store, session_ids, cutoff, dry_run=dry_run, yes=yes, as_json=as_json
            )
    if as_json:
        gone = set(deleted or [])
        _print_json(env, [{**r, "deleted": r["id"] in gone} for r in rows])
    if not targets:
        env.echo(f"No sessions older than {older_than}.", err=as_json)
    elif deleted is not None:
        skipped = len(targets) - len(deleted)
        note = f" ({skipped} skipped: written to or deleted meanwhile)" if skipped else ""
        env.echo(f"Deleted {plural(len(deleted), 'session')}.{note}", err=as_json)


def _delete_chosen(
    env: Environment,
    store: SessionStore,
    session_ids: list[str] | None,
    cutoff: float,
    *,
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> tuple[list[SessionInfo], list[dict[str, Any]], list[str] | None]:
    """The sessions named (or idle since ``cutoff``), their ``list --json`` rows (read
    before they are gone; only for --json) and the ids deleted (None: none were asked
    for, a dry run or a no)."""
    if session_ids:
        full_ids = list(dict.fromkeys(store.resolve_id(p) for p in session_ids))
        targets = [store.session_info(i) for i in full_ids]
    else:
        targets = store.sessions_older_than(cutoff)
    rows = _listed_json(store, targets, store.fork_origins()) if as_json else []
    if not targets or not _confirmed(env, targets, dry_run=dry_run, yes=yes, err=as_json):
        return targets, rows, None
    ids = [t.id for t in targets]
    return targets, rows, store.delete_sessions(ids, updated_before=None if session_ids else cutoff)


def _confirmed(
    env: Environment, targets: list[SessionInfo], *, dry_run: bool, yes: bool, err: bool
) -> bool:
    """Whether to delete ``targets``; ``err``: what people read goes to stderr (--json)."""
    what = plural(len(targets), "session")
    if dry_run:
        env.echo(f"Would delete {what}:", err=err)
        _print_lines(env, targets, err=err)
        return False
    if yes:
        return True
    if not env.stdin_isatty:
        raise NotConfirmedError(
            f"refusing to delete {what} without --yes (stdin is not a terminal); nothing deleted"
        )
    env.echo(f"About to delete {what}:", err=err)
    _print_lines(env, targets, err=err)
    if not env.confirm(f"Delete {what}?", err=err):
        # The user's choice, not an error: exit 0, and say what happened.
        env.echo("Nothing deleted.", err=err)
        return False
    return True


@sessions_app.command("search", cls=HarnessCommand)
def search_sessions(
    ctx: typer.Context,
    query: Annotated[
        list[str],
        typer.Argument(
            metavar="WORDS",
            help='Words to find (all of them), or "a quoted phrase". '
            "Put -- before a query that starts with '-'.",
            show_default=False,
        ),
    ],
    as_json: JsonOpt = False,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, help="Show at most N matches.")
    ] = 20,
    session: Annotated[
        str | None,
        typer.Option(
            "--session", "-s", metavar="ID", help="Search only this session (a unique prefix)."
        ),
    ] = None,
) -> None:
    """Search every stored message (tool calls and results too), best match first."""
    env = environment(ctx)
    text = " ".join(query)
    to_fts_query(text)  # a bad query is reported even before a store exists
    store = _open_store()
    hits: list[SearchHit] = []
    missed = 0
    if store is None and session is not None:
        raise SessionNotFoundError(session)
    if store is not None:
        with store:
            full_id = store.resolve_id(session) if session is not None else None
            from harness9.ui.search_view import IndexProgress

            with IndexProgress(env.console(err=True)) as progress:
                hits = store.search(text, limit=limit, session_id=full_id, on_progress=progress)
            hits = store.number_hits(hits)
            missed = store.unindexed_count() if store.read_only else 0
    if missed:
        env.echo(
            f"warning: the store is read-only, so the {plural(missed, 'message')} stored "
            "since the last search could not be indexed and were not searched",
            err=True,
        )
    if as_json:
        _print_json(env, [_hit_json(h) for h in hits])
        return
    from harness9.ui.search_view import render_hits

    render_hits(env.console(soft_wrap=False), hits)


def _hit_json(hit: SearchHit) -> dict[str, Any]:
    plain, spans = "", []
    for chunk, is_match in snippet_parts(hit.snippet):
        if is_match:
            spans.append([len(plain), len(plain) + len(chunk)])
        plain += chunk
    return {
        "session_id": hit.session_id,
        "message_id": hit.message_id,
        "number": hit.number,
        "role": hit.role,
        "created_at": iso_utc(hit.created_at),
        "title": hit.title,
        "snippet": plain,
        "highlights": spans,
        "rank": hit.rank,
    }


# export/import live in their own module; registered here so `sessions` is one group.
from harness9.cli.transfer import export_command, import_command, migrate_command  # noqa: E402

sessions_app.command("export", cls=HarnessCommand)(export_command)
sessions_app.command("import", cls=HarnessCommand)(import_command)
sessions_app.command("migrate", cls=HarnessCommand)(migrate_command)

from harness9.cli.lineage import fork_command  # noqa: E402

sessions_app.command("fork", cls=HarnessCommand)(fork_command)
