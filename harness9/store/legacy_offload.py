"""Tool results stored before their offload link was data: the link read from their text.

Until migration ``message_offload_link`` a logged tool result that was offloaded held
only its summary, whose first line harness9 wrote in one fixed format,
``📂 [offload:<id>] <N> tokens offloaded``. Such rows (and export files of that time)
are still read: this module reads the link from that line, once per read, with plain
string operations. Nothing written since is read this way (harness9.store.codec).
"""

from __future__ import annotations

from harness9.schema import ROLE_TOOL
from harness9.store.session import OffloadLink

__all__ = ["legacy_offload"]

_MARKER = "📂 [offload:"
_ID_CHARS = 16  # ofl_ + 12 hex


def legacy_offload(role: str, content: str) -> OffloadLink | None:
    """The offload an old row's summary names; None for any other message."""
    if role != ROLE_TOOL or not content.startswith(_MARKER):
        return None
    head = content[len(_MARKER) :].split("\n", 1)[0]
    oid, sep, rest = head.partition("] ")
    words = rest.split(" ")
    if not (sep and len(oid) == _ID_CHARS and oid.startswith("ofl_") and len(words) == 3):
        return None
    size, unit, what = words
    if unit != "tokens" or what != "offloaded" or not (size.isascii() and size.isdigit()):
        return None
    return OffloadLink(oid, int(size))
