"""Stores for tests that need one to misbehave as a real one can."""

from __future__ import annotations

from collections.abc import Sequence

from harness9.schema import Message
from harness9.store import MemorySession
from harness9.store.session import StoreBusyError


class LockedMemorySession(MemorySession):
    """A store whose writes fail while ``locked``, as a database another process locks."""

    locked = False

    def add_messages(self, msgs: list[Message], offloads: Sequence = ()) -> list[int]:
        if self.locked:
            raise StoreBusyError("database is locked")
        return super().add_messages(msgs, offloads)
