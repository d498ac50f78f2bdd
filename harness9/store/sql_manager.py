"""An SQL store's manager, written once for every driver and composed of its parts.

``Manager`` (SQLite, harness9.store.sqlite) and ``PostgresManager``
(harness9.store.postgres) add how they connect, lock, search and delete by age to
``SqlManagerBase``, which is made of one part per concern:

- ``harness9.store.sessions``: create, open, list, look up by id prefix, delete;
- ``harness9.store.usage``: usage rows and their roll-ups;
- ``harness9.store.lineage``: forks and sub-agents' sessions;
- ``harness9.store.snapshots``: a session read whole, and stored back (it reads every
  other part, so it stands on them);

all of them written against ``harness9.store.sql_base``. A session's own reads and
writes are ``harness9.store.sql_session``'s.
"""

from __future__ import annotations

from harness9.store.snapshots import SnapshotStore
from harness9.store.sql_base import S


class SqlManagerBase(SnapshotStore[S]):
    """Sessions, usage, lineage and snapshots of an SQL store (see the module's parts)."""
