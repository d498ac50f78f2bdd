"""Tool results stored before their offload link was data: the link read from their text.

Until migration ``message_offload_link`` a logged tool result that was offloaded held
only its summary, whose first line harness9 wrote in one fixed format,
``📂 [offload:<id>] <N> tokens offloaded``. Such rows (and export files of that time)
are still read: this module reads the link from that line, once per read, with plain
string operations. Nothing written since is read this way (harness9.store.codec). An
old checkpoint's eviction stub that names its offload is read the same way
(harness9.store.legacy_checkpoint).
"""

from __future__ import annotations

from harness9.schema import ROLE_TOOL
from harness9.store.session import OFFLOAD_MARKER, OffloadLink

__all__ = ["legacy_evicted_offload", "legacy_offload"]

_ID_CHARS = 16  # ofl_ + 12 hex


def _link(text: str, prefix: str, what: str) -> OffloadLink | None:
    """The link of a first line ``📂 [offload:<id>] <prefix><N> tokens <what>``."""
    if not text.startswith(OFFLOAD_MARKER):
        return None
    head = text[len(OFFLOAD_MARKER) :].split("\n", 1)[0]
    oid, sep, rest = head.partition("] ")
    if not (sep and len(oid) == _ID_CHARS and oid.startswith("ofl_") and rest.startswith(prefix)):
        return None
    words = rest[len(prefix) :].split(" ")
    if len(words) != 3 or words[1:] != ["tokens", what]:
        return None
    size = words[0]
    return OffloadLink(oid, int(size)) if size.isascii() and size.isdigit() else None


def legacy_offload(role: str, content: str) -> OffloadLink | None:
    """The offload an old row's summary names; None for any other message."""
    return _link(content, "", "offloaded") if role == ROLE_TOOL else None


def legacy_evicted_offload(text: str) -> OffloadLink | None:
    """The offload an old checkpoint's eviction stub text names (``📂 [offload:<id>]
    [evicted] <N> tokens evicted``, written when eviction offloaded the result)."""
    return _link(text, "[evicted] ", "evicted")
