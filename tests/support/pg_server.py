"""A throwaway PostgreSQL cluster for tests and benchmarks: a temp dir, a free loopback port.

``initdb`` refuses to run as root (how CI runs), so as root the cluster belongs to
the ``postgres`` system user (``runuser -u postgres --``) in a directory that user
owns. When the server binaries are missing, ``find_binaries`` installs Debian's
``postgresql`` package if it can (root with apt-get) and otherwise says why not.

    python tests/support/pg_server.py     # start one, print its URL, stop on Enter
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

PREFERRED_VERSION = "15"
SUPERUSER = "harness9"


def _bin_dirs() -> list[Path]:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    preferred = f"/usr/lib/postgresql/{PREFERRED_VERSION}/bin"
    ordered = [preferred] if preferred in found else []
    ordered += [d for d in found if d != preferred]
    return [Path(d) for d in ordered if (Path(d) / "initdb").exists()]


def find_binaries(*, install: bool = True) -> tuple[Path | None, str]:
    """(the server's bin directory, "") or (None, why there is none).

    ``HARNESS9_PG_BINDIR`` names the directory to use instead of searching (and of
    installing): for a server installed elsewhere.
    """
    chosen = os.environ.get("HARNESS9_PG_BINDIR")
    if chosen:
        if (Path(chosen) / "initdb").exists():
            return Path(chosen), ""
        return None, f"HARNESS9_PG_BINDIR={chosen} holds no initdb"
    dirs = _bin_dirs()
    if dirs:
        return dirs[0], ""
    if not install:
        return None, "PostgreSQL server binaries not found in /usr/lib/postgresql/*/bin"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None, (
            "PostgreSQL server binaries not found in /usr/lib/postgresql/*/bin, and they "
            "cannot be installed here (needs root and apt-get): apt-get install postgresql"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "postgresql"],
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "postgresql"],
    ):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
        if argv[1] == "install" and done.returncode == 0:
            break
    dirs = _bin_dirs()
    if dirs:
        return dirs[0], ""
    return None, "PostgreSQL server binaries are missing and apt-get install postgresql failed"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgCluster:
    """initdb + pg_ctl start on 127.0.0.1; ``stop()`` removes everything it made."""

    def __init__(self, bin_dir: Path, *, durable: bool = False) -> None:
        self.bin_dir = bin_dir
        self.durable = durable  # fsync on: for benchmarks that compare with SQLite's commits
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="harness9-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        self.root.chmod(0o700)

    def _run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin_dir / argv[0]), *argv[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=self.root)

    def start(self) -> str:
        done = self._run(
            "initdb", "-D", str(self.data), "-U", SUPERUSER, "-A", "trust",
            "-E", "UTF8", "--locale=C.UTF-8", "--no-sync",
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip() or done.stdout.strip()}")
        opts = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c max_connections=100 -c shared_buffers=32MB"
        )
        if not self.durable:
            opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        done = self._run(
            "pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.log), "-w", "start"
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} {log[-2000:]}")
        return self.url("postgres")

    def url(self, dbname: str) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.data.exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def database(url: str, name: str, *, durable: bool = False) -> Iterator[str]:
    """``url`` as it is, or for "temp" database ``name`` on a throwaway cluster, removed
    on exit: what the scripts' ``--database-url temp`` means. SystemExit (saying why)
    when there is no server to run."""
    if url != "temp":
        yield url
        return
    bin_dir, why = find_binaries()
    if bin_dir is None:
        raise SystemExit(why)
    cluster = PgCluster(bin_dir, durable=durable)
    try:
        cluster.start()
        yield cluster.create_database(name)
    finally:
        cluster.stop()


if __name__ == "__main__":
    with database("temp", "harness9") as temp_url:
        print(temp_url, flush=True)
        input()
