"""The rule summary of what a tool printed (a file read, a grep, a shell command's exit), and
the stand-in an old call's long argument becomes.

Both are shared by the tools and the context package: the offload (``harness9.tools.offload``)
and eviction (``harness9.context.pipeline``) summarise output; the context writes argument
stubs, the file tools refuse one copied back as text and ``offload_recall`` pages the
arguments back. So it sits at the bottom beside ``tokens`` and imports nothing of harness9
but the token arithmetic: neither user depends on the other.

``OutputStats`` is fed byte chunks, so a 200 MB stream is summarised from constant memory (a
bounded head, a bounded tail and counters); text in memory is fed once (``stats_of``), so
both paths give the same summary for the same bytes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from harness9.tokens import BYTES_PER_TOKEN, utf8_len

# def/class/func/type/... declarations; group 1 is the name. A leading line number
# ("  12\tdef f" or "12: def f", as file viewers print) is allowed.
DECLARATION_RE = re.compile(
    r"^(?:[ \t]*\d+(?:\t|: ?|\| ?))?[ \t]*(?:export[ \t]+)?(?:pub(?:\([\w:]+\))?[ \t]+)?(?:async[ \t]+)?"
    r"(?:def|class|func(?:[ \t]*\([^)]*\))?|fn|function|type|interface|struct|enum|trait)"
    r"[ \t]+([A-Za-z_][\w]*)",
    re.MULTILINE,
)

# "path:line:text", what grep -n, rg and most search tools print.
GREP_LINE_RE = re.compile(r"^[^\s:][^:\n]*:\d+:", re.MULTILINE)

_LINE_PREFIX_BYTES = 4096  # only the start of a line matters to the anchored patterns
MAX_DECLARATIONS = 20
GENERIC_CHARS = 300

# Tools whose output is one file's text (summarised as that file); the smart trigger's
# reads are the tools that declare themselves read-only (``ToolDefinition.read_only``).
FILE_READ_TOOLS = frozenset({"read_file", "read", "Read", "cat_file", "view_file"})
GREP_TOOLS = frozenset({"grep", "Grep", "rg", "search", "search_files"})
SHELL_TOOLS = frozenset({"bash", "shell", "Shell", "sh", "run_command", "exec"})

_GREP_B = re.compile(GREP_LINE_RE.pattern.encode() + rb".*", re.MULTILINE)  # the whole line
_DECL_B = re.compile(DECLARATION_RE.pattern.encode(), re.MULTILINE)
_NONEMPTY_B = re.compile(rb"^[ \t\r]*\S", re.MULTILINE)
_EXIT_RE = re.compile(
    r"(?im)^\W*(?:exit(?:[ _]?code|[ _]status)?|return code|exited with(?: code)?)\W*(-?\d+)\W*$"
)


@dataclass(slots=True)
class OutputStats:
    head_cap: int = 8 * 1024
    tail_cap: int = 8 * 1024
    total_bytes: int = 0
    line_count: int = 0
    nonempty_lines: int = 0
    grep_matches: int = 0
    first_matches: list[str] = field(default_factory=list)
    declarations: list[str] = field(default_factory=list)
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    _line: bytearray = field(default_factory=bytearray)  # the line not yet ended by "\n"

    @property
    def tokens(self) -> int:
        return self.total_bytes // BYTES_PER_TOKEN

    def feed(self, chunk: bytes) -> None:
        self.total_bytes += len(chunk)
        self.head += chunk[: max(0, self.head_cap - len(self.head))]
        self.tail = (self.tail + chunk[-self.tail_cap :])[-self.tail_cap :]
        self.line_count += chunk.count(b"\n")
        first, last = chunk.find(b"\n") + 1, chunk.rfind(b"\n") + 1  # 0: no line ends here
        if first:
            self._scan((self._line + chunk[:first])[:_LINE_PREFIX_BYTES])
            self._scan(chunk[first:last])
            self._line = bytearray()
        self._line = (self._line + chunk[last : last + _LINE_PREFIX_BYTES])[:_LINE_PREFIX_BYTES]

    def finish(self) -> OutputStats:
        if self._line:  # a last line with no newline still counts
            self.line_count += 1
            self._scan(self._line)
            self._line = bytearray()
        return self

    def _scan(self, block: bytes | bytearray) -> None:
        """Counts the complete lines of ``block`` (at most one fed chunk: bounded memory)."""
        self.nonempty_lines += len(_NONEMPTY_B.findall(block))
        matches = _GREP_B.findall(block)
        self.grep_matches += len(matches)
        for line in matches[: 3 - len(self.first_matches)]:
            self.first_matches.append(line.decode("utf-8", "replace")[:200])
        for m in _DECL_B.finditer(block):
            if len(self.declarations) >= MAX_DECLARATIONS:
                break
            if (name := m.group(1).decode("ascii", "replace")) not in self.declarations:
                self.declarations.append(name)


def stats_of(text: str) -> OutputStats:
    data = text.encode("utf-8", "surrogatepass")
    stats = OutputStats(head_cap=len(data))
    stats.feed(data)
    return stats.finish()


def arguments_of(args_json: str) -> dict | None:
    """A call's JSON arguments when they are an object."""
    try:
        args = json.loads(args_json) if args_json else None
    except (ValueError, TypeError):
        return None
    return args if isinstance(args, dict) else None


# -- the stand-in for an old call's long argument ---------------------------------------------

STUBBED_PREFIX = "[stubbed] "
RECALL_CALL = "offload_recall("
# A call's string argument of this many bytes or more is stubbed once the call is old: a
# file's content, an edit's strings, a long heredoc. Shorter ones say what the call did.
LONG_ARGUMENT_BYTES = 512
_ARGUMENT_STUB_RE = re.compile(
    re.escape(STUBBED_PREFIX) + r'\d+ tokens of [^;\s]+(?:; offload_recall\(id="[^"]*"\) for it)?'
)


def recallable(content: str, handle: str) -> str:
    """``content`` followed by the call that pages the original back by ``handle``."""
    return f'{content}; {RECALL_CALL}id="{handle}") for it'


def argument_stub(name: str, value: str, handle: str = "") -> str:
    """The text in place of an old call's argument ``name`` (its value ``value``)."""
    text = f"{STUBBED_PREFIX}{utf8_len(value) // BYTES_PER_TOKEN} tokens of {name}"
    return recallable(text, handle) if handle else text


def is_argument_stub(value: object) -> bool:
    """``value`` is an old call's argument stub (a model may copy one into a new call)."""
    return isinstance(value, str) and _ARGUMENT_STUB_RE.fullmatch(value) is not None


def long_arguments(args_json: str) -> dict[str, str]:
    """A call's string arguments of ``LONG_ARGUMENT_BYTES`` or more, by name."""
    args = arguments_of(args_json)
    if args is None:
        return {}
    return {
        k: v
        for k, v in args.items()
        if isinstance(v, str) and utf8_len(v) >= LONG_ARGUMENT_BYTES and not is_argument_stub(v)
    }


def _arg(args_json: str, *keys: str) -> str | None:
    values = [(arguments_of(args_json) or {}).get(k) for k in keys]
    return next((v for v in values if isinstance(v, str) and v), None)


def _clip(line: str, n: int = 160) -> str:
    line = line.rstrip("\r")
    return line if len(line) <= n else line[: n - 1] + "…"


def _exit_status(metadata: dict, tail: str) -> str:
    """``exit code N`` as the shell tool reported it as data (``timed out`` when it killed
    the command). The output's last lines are read only for a result that came without the
    code as data: a log row stored before results' metadata was kept, or another shell
    tool (an MCP server's) that reports none."""
    if "exit_code" in metadata:
        code = metadata["exit_code"]
        if code is not None:
            return f"exit code {code}"
        return "timed out" if metadata.get("timed_out") else "exit code unknown"
    return f"exit code {(_EXIT_RE.findall(tail) or ['unknown'])[-1]}"


def summarize_output(
    tool_name: str,
    args_json: str,
    stats: OutputStats,
    *,
    metadata: dict | None = None,
    brief: bool = False,
) -> str:
    """The body of a rule summary (no marker, no recall hint); read and shell tools win
    over the grep shape. ``brief`` is the short form eviction uses, where every byte
    kept competes with the conversation itself."""
    head, tail = stats.head.decode("utf-8", "replace"), stats.tail.decode("utf-8", "replace")
    if tool_name in FILE_READ_TOOLS:
        path = _arg(args_json, "path", "file_path", "filename", "file")
        path = path or (metadata or {}).get("path") or "?"
        lines = [f"read_file {path}: {stats.line_count} lines"]
        if names := stats.declarations[: 8 if brief else MAX_DECLARATIONS]:
            lines.append("defines: " + ", ".join(names))
        if not brief:
            lines += ["head:"] + ["  " + _clip(x) for x in head.splitlines()[:5]]
            if stats.line_count > 5 and (last := tail.splitlines()[-3:]):
                lines += ["tail:"] + ["  " + _clip(x) for x in last]
        return "\n".join(lines)
    grep_like = stats.grep_matches > 0 and stats.grep_matches * 2 > stats.nonempty_lines
    if tool_name in GREP_TOOLS or grep_like:
        shown = stats.first_matches[: 1 if brief else 3]
        return "\n".join(
            [f"{tool_name}: {stats.grep_matches} matches"] + ["  " + _clip(x) for x in shown]
        )
    if tool_name in SHELL_TOOLS:
        cmd = _arg(args_json, "command", "cmd")
        status = _exit_status(metadata or {}, tail)
        quoted = f" `{_clip(cmd, 80)}`" if cmd else ""
        last = [x for x in tail.splitlines() if x.strip()][-(2 if brief else 5) :]
        lines = [f"{tool_name}{quoted}: {status}, {stats.line_count} lines", "last lines:"]
        return "\n".join(lines + ["  " + _clip(x) for x in last])
    n = 120 if brief else GENERIC_CHARS
    cut = len(head) > n or stats.total_bytes != len(stats.head)
    return f"{tool_name}: {head[:n]}" + ("…" if cut else "")
