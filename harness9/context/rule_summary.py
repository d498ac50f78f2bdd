"""Rule summaries of tool output: what an offloaded or evicted result is replaced by.

The statistics are gathered incrementally (``OutputStatsBuilder.feed``) so a
200 MB stream is summarised from constant memory: a bounded head, a bounded
tail and counters. The in-memory path feeds the whole text once, so both paths
produce the same summary for the same bytes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from harness9.context.patterns import DECLARATION_RE, GREP_LINE_RE
from harness9.context.tokens import BYTES_PER_TOKEN

HEAD_BYTES = 8 * 1024
TAIL_BYTES = 8 * 1024
# Only the start of a line matters to the anchored patterns below.
_LINE_PREFIX_BYTES = 4096
MAX_DECLARATIONS = 20
GENERIC_CHARS = 300

READ_TOOLS = frozenset({"read_file", "read", "Read", "cat_file", "view_file"})
GREP_TOOLS = frozenset({"grep", "Grep", "rg", "search", "search_files"})
SHELL_TOOLS = frozenset({"bash", "shell", "Shell", "sh", "run_command", "exec"})

_GREP_B = re.compile(GREP_LINE_RE.pattern.encode(), re.MULTILINE)
_DECL_B = re.compile(DECLARATION_RE.pattern.encode(), re.MULTILINE)
_NONEMPTY_B = re.compile(rb"^[ \t\r]*\S", re.MULTILINE)
_EXIT_RE = re.compile(
    r"(?im)^\W*(?:exit(?:[ _]?code|[ _]status)?|return code|exited with(?: code)?)\W*(-?\d+)\W*$"
)


@dataclass(slots=True)
class OutputStats:
    total_bytes: int = 0
    line_count: int = 0
    nonempty_lines: int = 0
    grep_matches: int = 0
    first_matches: list[str] = field(default_factory=list)
    declarations: list[str] = field(default_factory=list)
    head: bytes = b""
    tail: bytes = b""

    @property
    def tokens(self) -> int:
        return self.total_bytes // BYTES_PER_TOKEN

    @property
    def complete(self) -> bool:
        """True when ``head`` holds every byte of the output."""
        return self.total_bytes == len(self.head)

    @property
    def grep_like(self) -> bool:
        return self.grep_matches > 0 and self.grep_matches * 2 > self.nonempty_lines

    def head_text(self) -> str:
        return self.head.decode("utf-8", "replace")

    def tail_text(self) -> str:
        return self.tail.decode("utf-8", "replace")


class OutputStatsBuilder:
    """Feeds byte chunks; keeps a head of ``head_bytes`` and a tail of ``tail_bytes``."""

    def __init__(self, head_bytes: int = HEAD_BYTES, tail_bytes: int = TAIL_BYTES) -> None:
        self._head_cap = head_bytes
        self._tail_cap = tail_bytes
        self._head = bytearray()
        self._tail = bytearray()
        self._line = bytearray()  # prefix of the line not yet ended by a newline
        self._declared: dict[str, None] = {}
        self.stats = OutputStats()

    @property
    def head_size(self) -> int:
        return len(self._head)

    @property
    def tail_size(self) -> int:
        return len(self._tail)

    def head_bytes(self) -> bytes:
        return bytes(self._head)

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        st = self.stats
        st.total_bytes += len(chunk)
        if len(self._head) < self._head_cap:
            self._head += chunk[: self._head_cap - len(self._head)]
        if len(chunk) >= self._tail_cap:
            self._tail = bytearray(chunk[-self._tail_cap :])
        else:
            self._tail += chunk
            del self._tail[: -self._tail_cap]
        st.line_count += chunk.count(b"\n")
        first_nl = chunk.find(b"\n")
        if first_nl < 0:
            self._extend_line(chunk)
            return
        last_nl = chunk.rfind(b"\n")
        self._extend_line(chunk[: first_nl + 1])
        self._scan(bytes(self._line))
        self._line.clear()
        if last_nl > first_nl:
            self._scan(chunk[first_nl + 1 : last_nl + 1])
        self._extend_line(chunk[last_nl + 1 :])

    def finish(self) -> OutputStats:
        st = self.stats
        if self._line:  # a last line with no newline still counts
            st.line_count += 1
            self._scan(bytes(self._line))
            self._line.clear()
        st.head = bytes(self._head)
        st.tail = bytes(self._tail)
        st.declarations = list(self._declared)
        return st

    def _extend_line(self, part: bytes) -> None:
        room = _LINE_PREFIX_BYTES - len(self._line)
        if room > 0:
            self._line += part[:room]

    def _scan(self, block: bytes) -> None:
        """Counts complete lines in ``block`` (each ending in a newline, or the last one)."""
        st = self.stats
        st.nonempty_lines += len(_NONEMPTY_B.findall(block))
        # Findall on one fed chunk at most: memory stays bounded by the chunk size.
        st.grep_matches += len(_GREP_B.findall(block))
        if len(st.first_matches) < 3:
            for m in _GREP_B.finditer(block):
                end = block.find(b"\n", m.start())
                line = block[m.start() : end if end >= 0 else len(block)]
                st.first_matches.append(line.decode("utf-8", "replace")[:200])
                if len(st.first_matches) >= 3:
                    break
        if len(self._declared) < MAX_DECLARATIONS:
            for m in _DECL_B.finditer(block):
                self._declared.setdefault(m.group(1).decode("ascii", "replace"), None)
                if len(self._declared) >= MAX_DECLARATIONS:
                    break


def stats_of(text: str) -> OutputStats:
    builder = OutputStatsBuilder(head_bytes=len(text.encode("utf-8", "surrogatepass")) or 1)
    builder.feed(text.encode("utf-8", "surrogatepass"))
    return builder.finish()


def _arg(args_json: str, *keys: str) -> str | None:
    try:
        data = json.loads(args_json) if args_json else {}
    except (ValueError, TypeError):
        return None
    if not isinstance(data, dict):
        return None
    for key in keys:
        value = data.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _clip(line: str, n: int = 160) -> str:
    line = line.rstrip("\r")
    return line if len(line) <= n else line[: n - 1] + "…"


def _exit_code(stats: OutputStats, metadata: dict | None) -> str:
    if metadata and metadata.get("exit_code") is not None:
        return str(metadata["exit_code"])
    found = _EXIT_RE.findall(stats.tail_text())
    return found[-1] if found else "unknown"


def summary_kind(tool_name: str, stats: OutputStats) -> str:
    """read_file | grep | bash | generic (read and shell win over the grep shape)."""
    if tool_name in READ_TOOLS:
        return "read_file"
    if tool_name in GREP_TOOLS or stats.grep_like:
        return "grep"
    if tool_name in SHELL_TOOLS:
        return "bash"
    return "generic"


def summarize_output(
    tool_name: str,
    args_json: str,
    stats: OutputStats,
    *,
    metadata: dict | None = None,
    brief: bool = False,
) -> str:
    """The body of a rule summary (no marker, no recall hint).

    ``brief`` is the one-line-ish form eviction uses, where every byte kept
    competes with the conversation itself.
    """
    kind = summary_kind(tool_name, stats)
    if kind == "read_file":
        path = _arg(args_json, "path", "file_path", "filename", "file") or (
            (metadata or {}).get("path") or "?"
        )
        lines = [f"read_file {path}: {stats.line_count} lines"]
        names = stats.declarations[: 8 if brief else MAX_DECLARATIONS]
        if names:
            lines.append("defines: " + ", ".join(names))
        if not brief:
            head = stats.head_text().splitlines()[:5]
            tail = stats.tail_text().splitlines()[-3:] if stats.line_count > 5 else []
            lines += ["head:"] + ["  " + _clip(x) for x in head]
            if tail:
                lines += ["tail:"] + ["  " + _clip(x) for x in tail]
        return "\n".join(lines)
    if kind == "grep":
        shown = stats.first_matches[: 1 if brief else 3]
        lines = [f"{tool_name}: {stats.grep_matches} matches"]
        lines += ["  " + _clip(x) for x in shown]
        return "\n".join(lines)
    if kind == "bash":
        last = [x for x in stats.tail_text().splitlines() if x.strip()][-(2 if brief else 5) :]
        cmd = _arg(args_json, "command", "cmd")
        lines = [
            f"{tool_name}{' `' + _clip(cmd, 80) + '`' if cmd else ''}: exit code "
            f"{_exit_code(stats, metadata)}, {stats.line_count} lines"
        ]
        lines += ["last lines:"] + ["  " + _clip(x) for x in last]
        return "\n".join(lines)
    text = stats.head_text()
    n = 120 if brief else GENERIC_CHARS
    return f"{tool_name}: " + (text[:n] + ("…" if len(text) > n or not stats.complete else ""))
