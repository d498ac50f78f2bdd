"""Copy a whole history from one session store to another (``sessions migrate --to``).

Each session moves in its own transaction on the destination (the export/import
path: ``snapshot`` then ``restore``), oldest first, so an interrupted run leaves
whole sessions behind and simply runs again: sessions already present are
skipped. Offloaded tool outputs follow their session when the destination keeps
them elsewhere (files into the database, or back). The source is only read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness9.store.backend import SessionStore
from harness9.store.blobs import BlobStore, FileBlobStore, copy_session_blobs
from harness9.store.export import SessionExistsError


@dataclass(slots=True)
class MigrationReport:
    copied: int = 0
    skipped: int = 0  # already in the destination
    messages: int = 0
    blobs: int = 0


def migrate_sessions(
    source: SessionStore, dest: SessionStore, *, offload_dir: Path
) -> MigrationReport:
    """Copy every session of ``source`` into ``dest``; ``offload_dir`` holds file blobs."""
    report = MigrationReport()
    src_blobs = source.blob_store() or FileBlobStore(offload_dir)
    dest_own = dest.blob_store()
    # Both on files: they are the same files ($HARNESS9_HOME), nothing to move.
    dest_blobs: BlobStore | None = dest_own if dest_own is not None or source.blob_store() else None
    if dest_blobs is None and source.blob_store() is not None:
        dest_blobs = FileBlobStore(offload_dir)
    # Sub-agents' sessions too, after every top-level one, in the order they were created:
    # a parent is always there before its children are linked to it.
    listed = source.list_sessions(children=True)
    top = [i for i in reversed(listed) if not i.parent_id]
    kids = sorted((i for i in listed if i.parent_id), key=lambda i: i.created_at)
    for info in [*top, *kids]:
        snap = source.snapshot(info.id)
        try:
            dest.restore(snap)
        except SessionExistsError:
            report.skipped += 1
        else:
            if snap.link is not None:
                dest.link_child(snap.link)
            report.copied += 1
            report.messages += len(snap.records)
        if dest_blobs is not None:
            # A blob already there (a second run), or named as we never write: passed over.
            report.blobs += copy_session_blobs(
                src_blobs, info.id, info.id, dest=dest_blobs, skip_failed=True
            )
    return report
