"""Blob storage per session: where offloaded tool outputs (and other large texts) live.

One seam, two homes. ``FileBlobStore`` keeps ``<root>/<session>/<blob>.txt`` files
(0600 in 0700 directories) next to the SQLite store; the PostgreSQL store keeps
blobs in its own table (harness9.store.postgres.PostgresBlobStore), so a session
resumed on another machine can still read them.

Session and blob ids name paths here, so both are checked against a narrow shape
before any path is built: nothing a model writes can escape the root.
"""

from __future__ import annotations

import io
import os
import re
import shutil
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import BinaryIO, Protocol

from harness9.errors import HarnessError

_SESSION_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_BLOB_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class BlobError(HarnessError):
    """A blob could not be stored or read (bad id, missing session, disk or database error)."""


def valid_blob_session_id(session_id: str) -> bool:
    return bool(_SESSION_RE.match(session_id or ""))


def check_ids(session_id: str, blob_id: str) -> None:
    if not valid_blob_session_id(session_id):
        raise BlobError(f"invalid session id for a blob: {session_id!r}")
    if not _BLOB_RE.match(blob_id or ""):
        raise BlobError(f"invalid blob id: {blob_id!r}")


class BlobWriter(Protocol):
    """A blob being written: created empty (exclusively) on open, streamed, then closed."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None:
        """Make everything written durable and readable."""
        ...

    def abort(self) -> None:
        """Drop the blob: it is as if it was never opened."""
        ...


class BlobStore(Protocol):
    """Per-session named byte strings: put/append/read/delete, plus clean-up by age."""

    def open_writer(self, session_id: str, blob_id: str) -> BlobWriter:
        """A writer for a new blob; BlobError if the name is taken or invalid."""
        ...

    def put(self, session_id: str, blob_id: str, data: bytes) -> None:
        """Store ``data`` under a new name (BlobError if it exists)."""
        ...

    def append(self, session_id: str, blob_id: str, data: bytes) -> None:
        """Add ``data`` at the end of an existing blob (BlobError if there is none)."""
        ...

    def read(self, session_id: str, blob_id: str) -> BinaryIO | None:
        """A readable binary stream of the blob, or None when there is no such blob."""
        ...

    def path_of(self, session_id: str, blob_id: str) -> Path | None:
        """The blob's file, for stores that keep files; None for database stores."""
        ...

    def names(self, session_id: str) -> list[str]:
        """The session's blob ids, sorted."""
        ...

    def delete(self, session_id: str, blob_id: str) -> None: ...

    def delete_session(self, session_id: str) -> None:
        """Delete every blob of the session (a missing session is not an error)."""
        ...

    def delete_older_than(self, cutoff_unix: float) -> list[str]:
        """Delete the blobs of sessions not written since ``cutoff_unix``; return those ids."""
        ...


class _FileWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise BlobError(f"blob {path.name} already exists") from None
        except OSError as exc:
            raise BlobError(f"cannot create {path}: {exc.strerror or exc}") from exc
        os.fchmod(fd, 0o600)  # umask cannot loosen it
        self._file = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        self._file.write(data)

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def abort(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class FileBlobStore:
    """Blobs as files: ``<root>/<session>/<blob>.txt``; directories 0700, files 0600."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _dir(self, session_id: str, *, create: bool) -> Path:
        if not valid_blob_session_id(session_id):
            raise BlobError(f"invalid session id for a blob: {session_id!r}")
        path = self.root / session_id
        if create:
            try:
                for d in (self.root, path):
                    d.mkdir(mode=0o700, parents=True, exist_ok=True)
                    os.chmod(d, 0o700)  # mkdir's mode is filtered by the umask
            except OSError as exc:
                raise BlobError(f"cannot create {path}: {exc.strerror or exc}") from exc
        return path

    def _path(self, session_id: str, blob_id: str, *, create: bool = False) -> Path:
        check_ids(session_id, blob_id)
        return self._dir(session_id, create=create) / f"{blob_id}.txt"

    def open_writer(self, session_id: str, blob_id: str) -> _FileWriter:
        return _FileWriter(self._path(session_id, blob_id, create=True))

    def put(self, session_id: str, blob_id: str, data: bytes) -> None:
        write_blob(self, session_id, blob_id, (data,))

    def append(self, session_id: str, blob_id: str, data: bytes) -> None:
        path = self._path(session_id, blob_id)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except FileNotFoundError:
            raise BlobError(f"no blob {blob_id!r} in session {session_id!r}") from None
        with os.fdopen(fd, "ab") as f:
            f.write(data)

    def read(self, session_id: str, blob_id: str) -> BinaryIO | None:
        try:
            path = self._path(session_id, blob_id)
        except BlobError:
            return None
        if path.is_symlink() or not path.is_file():
            return None
        try:
            return path.open("rb")
        except OSError:
            return None

    def path_of(self, session_id: str, blob_id: str) -> Path | None:
        return self._path(session_id, blob_id)

    def names(self, session_id: str) -> list[str]:
        folder = self._dir(session_id, create=False)
        if folder.is_symlink() or not folder.is_dir():
            return []
        return sorted(
            p.stem
            for p in folder.glob("*.txt")
            if p.is_file() and not p.is_symlink() and _BLOB_RE.match(p.stem)
        )

    def delete(self, session_id: str, blob_id: str) -> None:
        self._path(session_id, blob_id).unlink(missing_ok=True)

    def delete_session(self, session_id: str) -> None:
        path = self._dir(session_id, create=False)
        try:
            if path.is_symlink() or path.is_file():
                path.unlink()  # never followed
            elif path.is_dir():
                shutil.rmtree(path)
        except OSError as exc:
            raise BlobError(
                f"the tool results of session {session_id} in {path} could not be "
                f"removed: {exc.strerror or exc}"
            ) from exc

    def delete_older_than(self, cutoff_unix: float) -> list[str]:
        removed: list[str] = []
        if not self.root.is_dir():
            return removed
        for child in sorted(self.root.iterdir()):
            if child.is_symlink() or not child.is_dir() or not valid_blob_session_id(child.name):
                continue
            if child.stat().st_mtime < cutoff_unix:
                shutil.rmtree(child, ignore_errors=True)
                removed.append(child.name)
        return removed


def bytes_reader(data: bytes) -> BinaryIO:
    """A read stream over bytes held in memory (what a database store hands out)."""
    return io.BytesIO(data)


def copy_session_blobs(
    blobs: BlobStore,
    origin: str,
    fork: str,
    *,
    dest: BlobStore | None = None,
    skip_failed: bool = False,
) -> int:
    """Copy every blob of ``origin`` to ``fork`` (a fork's offloaded outputs), streamed; how
    many. ``dest``: another store to copy into (a migration); ``skip_failed``: a blob that
    cannot be written there (already there from an earlier run) is passed over."""
    target = blobs if dest is None else dest
    copied = 0
    for blob_id in blobs.names(origin):
        stream = blobs.read(origin, blob_id)
        if stream is None:
            continue
        with stream:
            try:
                write_blob(target, fork, blob_id, iter(partial(stream.read, 1 << 20), b""))
            except BlobError:
                if not skip_failed:
                    raise
                continue
        copied += 1
    return copied


def write_blob(blobs: BlobStore, session_id: str, blob_id: str, chunks: Iterable[bytes]) -> None:
    """A new blob made of ``chunks``, through the store's writer; none at all on failure."""
    writer = blobs.open_writer(session_id, blob_id)
    try:
        for chunk in chunks:
            writer.write(chunk)
    except BaseException:
        writer.abort()
        raise
    writer.close()
