"""``harness9 sessions export|import``: a session to a file and back.

Registered on ``sessions_app`` by harness9.cli.sessions. Files are written
atomically (a temporary file in the same directory, then a rename or a hard
link), mode 0600 like the store itself: an export holds the whole conversation.
"""

from __future__ import annotations

import contextlib
import json
import os
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from harness9.cli.env import Environment, environment
from harness9.errors import HarnessError, UsageError
from harness9.store.session import SessionNotFoundError
from harness9.ui.text import corrupt_row_warning, plural

if TYPE_CHECKING:
    from harness9.store.backend import SessionStore
    from harness9.store.export import OffloadedText, SessionSnapshot


class ExportFormat(StrEnum):
    markdown = "markdown"
    json = "json"


class OutputExistsError(HarnessError):
    """-o names a file that exists and --force was not given."""


def write_file_atomically(path: Path, text: str, *, force: bool) -> None:
    """Write ``text`` to ``path`` all at once; refuse to replace a file unless ``force``."""
    import tempfile  # here, not at the top: `sessions list` must not pay for it

    if not force and (path.exists() or path.is_symlink()):
        raise OutputExistsError(f"{path} already exists; use --force to overwrite it")
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise HarnessError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if force:
            os.replace(tmp, path)
        else:
            # link() fails if the name appeared since the check: never a silent clobber.
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise OutputExistsError(
                    f"{path} already exists; use --force to overwrite it"
                ) from None
            except OSError:
                # No hard links on this file system: fall back to check-then-rename.
                if path.exists():
                    raise OutputExistsError(
                        f"{path} already exists; use --force to overwrite it"
                    ) from None
                os.replace(tmp, path)
    except OSError as exc:
        raise HarnessError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):  # gone if renamed into place
            os.unlink(tmp)


def _read_input(env: Environment, source: str) -> str:
    try:
        if source == "-":
            stdin = env.stdin
            raw = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode()
            return raw.decode("utf-8")
        return Path(source).read_bytes().decode("utf-8")
    except OSError as exc:
        raise HarnessError(f"cannot read {source}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError:
        raise HarnessError(f"cannot import {source}: it is not UTF-8 text") from None


def _parse_format(text: str | None) -> ExportFormat | None:
    if text is None:
        return None
    try:
        return ExportFormat(text.strip().lower())
    except ValueError:
        raise UsageError(f"--format must be markdown or json, got {text!r}") from None


def _offloads_of(store: SessionStore, session_id: str) -> list[OffloadedText]:
    """The full text of every result the session offloaded, from the store's own blobs."""
    from harness9.store.export import OffloadedText
    from harness9.tools.offload import OffloadStore

    try:
        files = OffloadStore(blobs=store.blob_store()).session_files(session_id)
    except OSError as exc:
        raise HarnessError(
            f"cannot export session {session_id}: its offloaded results cannot be read "
            f"({exc.strerror or exc})"
        ) from exc
    return [OffloadedText(oid, text) for oid, text in files]


def export_command(
    ctx: typer.Context,
    session_id: Annotated[
        str, typer.Argument(metavar="ID", help="Session id, or any unique prefix of one.")
    ],
    fmt_text: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            metavar="markdown|json",
            help="markdown (to read) or json (complete, for import). "
            "Default: json if -o ends in .json, else markdown.",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", metavar="FILE", help="Write to FILE instead of stdout."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite FILE if it exists.")] = False,
) -> None:
    """Export a session as Markdown (to read) or JSON (to import elsewhere)."""
    env = environment(ctx)
    from harness9.config import store_location
    from harness9.store.backend import open_existing_store
    from harness9.store.export import export_json

    fmt = _parse_format(fmt_text)
    if fmt is None:
        json_suffix = output is not None and output.suffix.lower() == ".json"
        fmt = ExportFormat.json if json_suffix else ExportFormat.markdown
    store = open_existing_store(store_location())  # read-only when it cannot be written
    if store is None:
        raise SessionNotFoundError(session_id)
    from harness9.store.family import family_members, family_snapshot

    with store:
        full_id = store.resolve_id(session_id)
        if fmt is ExportFormat.json:  # complete: the sub-agents' sessions come along
            snap = family_snapshot(store, full_id)
            for member in family_members(snap):
                member.offloads = _offloads_of(store, member.info.id)
        else:
            snap = store.snapshot(full_id)
    for row in snap.corrupt_rows:
        env.echo(corrupt_row_warning(row.id, row.reason), err=True)
    if fmt is ExportFormat.json:
        text = export_json(snap)
    else:
        from harness9.ui.markdown_export import session_markdown

        text = session_markdown(snap)
    if output is None:
        # A person reading a terminal must not have it driven by stored text (a reply holding
        # ESC[2J would clear the screen); a pipe or a file gets the exact text.
        env.write(_for_terminal(text) if env.stdout_isatty else text)
        return
    write_file_atomically(output, text, force=force)
    env.echo(f"Exported session {snap.info.id} to {output}.", err=True)


def _for_terminal(text: str) -> str:
    from harness9.ui.text import inert

    return inert(text)


def import_command(
    ctx: typer.Context,
    source: Annotated[
        str, typer.Argument(metavar="FILE", help="A JSON export, or - to read standard input.")
    ],
    new_id: Annotated[
        bool,
        typer.Option("--new-id", help="Store it under a fresh session id (keeps the original)."),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON (for scripts) instead of the new id.")
    ] = False,
) -> None:
    """Import a session from a JSON export (all of it or nothing). Prints its id."""
    from harness9.config import store_location
    from harness9.store.backend import open_store
    from harness9.tools.offload import remove_session_offloads

    if not source:
        raise UsageError("give a file to import, or - for standard input")
    env = environment(ctx)
    snap = _parse_import(source, _read_input(env, source))
    # The hook removes a half-restored offload directory if the import is undone.
    with open_store(store_location(), on_session_deleted=remove_session_offloads) as store:
        sid, sessions = _restore_with_offloads(store, snap, source, new_id=new_id)
    if as_json:
        data = {
            "id": sid,
            "message_count": len(snap.records),
            "subagent_sessions": sessions - 1,
            "copy_of": snap.info.id if new_id else None,
        }
        env.echo(json.dumps(data, ensure_ascii=False, indent=2))
        return
    what = plural(len(snap.records), "message")
    if sessions > 1:
        what += f", {plural(sessions - 1, 'sub-agent session')}"
    note = f", a copy of {snap.info.id}" if new_id else ""
    # The id on stdout, as `sessions fork` prints it (`chat --resume "$(… import …)"`).
    env.echo(sid)
    env.echo(f"Imported session {sid} ({what}{note}).", err=True)


def _parse_import(source: str, text: str) -> SessionSnapshot:
    """The export in ``text``, its offload ids checked; ImportFormatError naming ``source``."""
    from harness9.store.export import ImportFormatError, parse_export
    from harness9.store.family import family_members
    from harness9.tools.offload import OffloadStore

    try:
        snap = parse_export(text)
    except ImportFormatError as exc:
        raise ImportFormatError(f"cannot import {source}: {exc}") from None
    offloads = [o for m in family_members(snap) for o in m.offloads]
    bad = next((o.id for o in offloads if not OffloadStore.valid_id(o.id)), None)
    if bad is not None:
        raise ImportFormatError(
            f"cannot import {source}: offload id {bad[:40]!r} is not ofl_ and 12 hex digits"
        )
    return snap


def _restore_with_offloads(
    store: SessionStore, snap: SessionSnapshot, source: str, *, new_id: bool
) -> tuple[str, int]:
    """Store ``snap``, its sub-agents' sessions and their offloaded results, or nothing:
    the new session's id and how many sessions were stored."""
    from harness9.store.family import family_members, restore_family
    from harness9.tools.offload import OffloadStore

    members = family_members(snap)  # the session and its sub-agents' sessions
    ids = restore_family(store, snap, new_id=new_id)
    try:
        for member_id, member in zip(ids, members, strict=True):
            OffloadStore(blobs=store.blob_store()).restore_session(
                member_id, [(o.id, o.content) for o in member.offloads]
            )
    except (OSError, HarnessError) as exc:
        # All or nothing: a session whose offloaded results are missing is not imported.
        store.delete_session(ids[0])  # its sub-agents' sessions go with it
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise HarnessError(
            f"cannot import {source}: writing its offloaded results failed "
            f"({reason}); nothing was imported"
        ) from exc
    return ids[0], len(members)


def migrate_command(
    ctx: typer.Context,
    to: Annotated[
        str,
        typer.Option(
            "--to",
            metavar="URL",
            help="Where to copy every session: a postgresql:// URL, or an SQLite file "
            "(a path, or sqlite:///ABSOLUTE/PATH).",
            show_default=False,
        ),
    ],
) -> None:
    """Copy every session (and its offloaded tool outputs) from this store to another.

    The source is the store this command would use (the SQLite file unless a
    database URL is set). Sessions already in the destination are skipped, so an
    interrupted migration can simply be run again. The source is never changed.
    """
    env = environment(ctx)
    from harness9.config import store_location
    from harness9.store.backend import (
        is_database_url,
        open_existing_store,
        open_url,
        sqlite_file_of,
    )
    from harness9.store.migrate import migrate_sessions

    if not to.strip():
        raise UsageError("--to needs a postgresql:// URL or an SQLite file (path or sqlite:///)")
    if not is_database_url(to):
        sqlite_file_of(to)  # a bad URL is refused before anything is opened
    source = open_existing_store(store_location())
    if source is None:
        env.echo("No sessions to migrate.")
        return
    with source, open_url(to.strip()) as dest:
        if _same_store(source.location, dest.location):
            raise UsageError("--to names the store the sessions are already in")
        report = migrate_sessions(source, dest, offload_dir=_offload_dir())
    skipped = f", {plural(report.skipped, 'session')} already there" if report.skipped else ""
    blobs = f", {plural(report.blobs, 'offloaded output')}" if report.blobs else ""
    env.echo(
        f"Copied {plural(report.copied, 'session')} "
        f"({plural(report.messages, 'message')}{blobs}) to {dest.location}{skipped}."
    )


def _offload_dir() -> Path:
    from harness9 import config

    return config.tool_results_dir()


def _same_store(a: str, b: str) -> bool:
    from harness9.store.backend import is_database_url

    if is_database_url(a) or is_database_url(b):
        return a == b
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
