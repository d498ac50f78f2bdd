"""A home that cannot be written, for real: a command run in a mount namespace of its own
(``unshare -rm``, no root needed) in which the home is a read-only file system."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support.cli import REPO_ROOT, cli_env

# Then run the rest of the arguments, with $0 the home: ``BIND`` binds it read-only onto
# itself (what it holds stays readable), ``EMPTY`` mounts an empty read-only tmpfs on it.
BIND = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
EMPTY = 'mount -t tmpfs -o ro,size=64k tmpfs "$0" && exec "$@"'


def run_read_only(home: Path, *args: str, mount: str = BIND) -> subprocess.CompletedProcess[str]:
    """``args`` run with ``home`` mounted read-only as ``mount`` says, as ``HARNESS9_HOME``."""
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", mount, str(home), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        env=cli_env(HARNESS9_HOME=str(home)),
    )


def can_mount_read_only(home: Path, mount: str = BIND) -> bool:
    """Whether this machine lets a test make ``home`` read-only (mount namespaces)."""
    return (
        shutil.which("unshare") is not None
        and run_read_only(home, "true", mount=mount).returncode == 0
    )
