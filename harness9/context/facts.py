"""The facts in text, found by rules: paths, declared names, errors, decisions, the user's
rules; the rule summary of a tool output; the fingerprint a summary must keep.

Plain regular expressions: they run on every tool result and every compaction, so they must
be cheap and predictable; a wrong guess only shifts a score or adds a summary line.

``OutputStats`` is fed byte chunks, so a 200 MB stream is summarised from constant memory (a
bounded head, a bounded tail and counters); text in memory is fed once (``stats_of``), so
both paths give the same summary for the same bytes.

``repair_summary`` appends what a summary left out under "Preserved facts", within a token
budget: past it the best-ranked are written and the rest counted ("… and N more paths not
shown"), so no fact is silently lost.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from harness9.context.stubs import summary_of
from harness9.schema import ROLE_ASSISTANT, ROLE_SYSTEM, ROLE_TOOL, ROLE_USER, Message
from harness9.tokens import BYTES_PER_TOKEN, utf8_len

# -- facts in text, by rules ---------------------------------------------------------------

LINE_CHARS = 200  # a fact line is kept up to this many characters
# Extensions of files an agent commonly reads or edits.
_EXTS = (
    "py|pyi|go|rs|js|jsx|ts|tsx|mjs|cjs|java|kt|kts|scala|rb|php|c|h|cc|cpp|hpp|cs|swift|m|mm|"
    "sh|bash|zsh|fish|ps1|sql|json|jsonl|yaml|yml|toml|ini|cfg|conf|env|lock|xml|html|htm|css|"
    "scss|sass|less|vue|svelte|md|rst|txt|csv|tsv|proto|graphql|gql|tf|dockerfile|gradle|mk|cmake|"
    "ipynb|lua|dart|ex|exs|erl|hs|ml|clj|r|jl|zig|nim|vim|log"
)
# A path: either has a separator (src/app.py, ./x, /etc/hosts, C:\x\y.txt) or ends in a
# known extension (setup.py). The look-arounds keep URLs' hosts and version numbers out.
FILE_PATH_RE = re.compile(
    r"(?<![\w@:/.\\-])"
    r"(?:"
    r"(?:[A-Za-z]:\\|\.{1,2}/|/|~/)?(?:[\w.-]+[/\\])+[\w.-]+"  # has a separator
    r"|[\w-][\w.-]*\.(?:" + _EXTS + r")"  # bare name with a known extension
    r")"
    r"(?![\w/\\(])",
    re.IGNORECASE,
)
_KNOWN_EXT_RE = re.compile(r"\.(?:" + _EXTS + r")$", re.IGNORECASE)

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

# Two recognisers of errors, on purpose: ``has_error`` is the broad test that a result
# mentions one (a density score), ``error_lines`` picks the lines worth keeping verbatim
# (an exception line, "error:", FAILED), leaving out source code that names an error.
ERROR_RE = re.compile(
    r"Traceback \(most recent call last\)|\b\w*(?:Error|Exception)\b|\berror:|\bERROR\b|"
    r"\bFAILED\b|\bfailed\b|\bexception\b|\bpanic:|\bfatal:",
)
_EXCEPTION_LINE_RE = re.compile(r"^[\w.]*(?:Error|Exception)\b(?::.*)?$")
_ERROR_WORDS_RE = re.compile(r"Error:|error:|\bFAILED\b|\bexception\b")
# Source lines that mention errors without being one (``except ValueError:``).
_CODE_PREFIX_RE = re.compile(
    r"^(?:except|catch|raise|throw|if|elif|else|def|class|return|assert|try|finally|import|from|"
    r"#|//|\*|log|logger|print|fmt\.|console\.)\b|^[#/*]"
)
DECISION_RE = re.compile(
    r"\b(?:decided|decide to|decision|we will|we'll|let's use|let us use|chose|choose to|"
    r"going with|go with|settled on|opted for)\b|决定|选择了|采用|改用",
    re.IGNORECASE,
)


def _is_path(candidate: str) -> bool:
    """Filters regex hits that are not paths: bare words with dots (``e.g``), and a
    separator with nothing path-like after it ("and/or")."""
    if candidate.startswith(("http", "www.")) or candidate.count(".") > 4:
        return False
    known_ext = bool(_KNOWN_EXT_RE.search(candidate))
    if "/" not in candidate and "\\" not in candidate:
        return known_ext
    return known_ext or candidate.count("/") >= 2 or candidate.startswith(("./", "../", "/", "~/"))


def find_paths(text: str) -> list[str]:
    """File paths in ``text``, first occurrence order, duplicates removed."""
    hits = (m.group(0).rstrip(".,;:") for m in FILE_PATH_RE.finditer(text))
    return list(dict.fromkeys(p for p in hits if _is_path(p)))


def find_declarations(text: str) -> list[str]:
    return list(dict.fromkeys(m.group(1) for m in DECLARATION_RE.finditer(text)))


def error_lines(text: str) -> list[str]:
    out = []
    for line in filter(None, map(str.strip, text.splitlines())):
        if line.startswith("Traceback (most recent call last)") or _CODE_PREFIX_RE.match(line):
            continue
        if _EXCEPTION_LINE_RE.match(line) or _ERROR_WORDS_RE.search(line):
            out.append(line[:LINE_CHARS])
    return out


def decision_lines(text: str) -> list[str]:
    return [ln.strip()[:LINE_CHARS] for ln in text.splitlines() if DECISION_RE.search(ln)]


def has_error(text: str) -> bool:
    return ERROR_RE.search(text) is not None


def has_decision(text: str) -> bool:
    return DECISION_RE.search(text) is not None


def has_path(text: str) -> bool:
    # The unstripped hit: "src/app.py." at a sentence's end does not count here.
    return any(_is_path(m.group(0)) for m in FILE_PATH_RE.finditer(text))


# ---- the user's rules ("never touch migrations/", "只能修改 src/"), by their wording --
# Each cue is a deontic phrase; ``_is_rule`` drops descriptive uses of the same words
# ("it always fails", "it must be a cache bug", "I don't know").
_RULE_CUE_RE = re.compile(
    r"\b(?:never|always|must(?:n['’]t)?|do\s+not|don['’]t|should\s+(?:not|never)|shouldn['’]t|"
    r"avoid|make\s+sure|be\s+sure\s+to|ensure|(?:is|are|be)\s+required|required\s+to|"
    r"prefer(?:ably)?|refrain\s+from|stick\s+to|under\s+no\s+circumstances|"
    r"(?:is|are)\s+(?:not\s+allowed|forbidden|prohibited)|only)\b"
    r"|^required\b"
    r"|不要|必须|只能|禁止|务必|切勿|不得|不准|不许|一定要|永远不(?!会)|(?:^|请|要|你)总是|"
    r"只(?:改|修改|编辑|用|使用|动)",
    re.IGNORECASE,
)
# Words whose third-person or past form after always/never describes ("it never
# returns", "always failed") rather than instructs ("never return", "always use").
_DESCRIPTIVE_NEXT_RE = re.compile(r"^(?:\w+(?<!s)(?<!u)(?<!i)s|\w+ed|mind|been)$", re.IGNORECASE)
_STATE_VERBS = {"is", "are", "was", "were", "has", "have", "had", "it's", "it’s"}
# "must be a/the/because …" guesses at a cause; "must be compatible" is a rule.
_EPISTEMIC_MUST_RE = re.compile(
    r"^be\s+(?:a|an|the|because|due|caused|related|something|why|what|where|from|in|that)\b",
    re.IGNORECASE,
)
_NOT_RULE_AFTER_DONT = {
    "know", "see", "understand", "think", "get", "remember", "mind", "care", "believe",
    "need", "have", "like", "want", "recall", "expect",
}  # fmt: skip
# "only" instructs when it opens the sentence or qualifies an action or a permission.
_ONLY_RULE_RE = re.compile(
    r"(?:^|\b(?:please|may|can|should|must|to|and|but|also|just|you)\s+)only\b"
    r"|\b(?:use|edit|change|touch|modify|import|run|write|commit|test|install|read)\s+only\b",
    re.IGNORECASE,
)
_SENTENCE_SPLIT_RE = re.compile(r"\n+|(?<=[.!?;])\s+|(?<=[。！？；])")
_BULLET_RE = re.compile(r"^(?:[-*•>]+|\d+[.)])\s+")
# A short lead-in before a colon ("One more thing: never …") is not part of the rule.
_LEAD_IN_RE = re.compile(r"^([^:：]{1,40})[:：]\s*(.+)$")


def _is_rule(sentence: str) -> bool:
    for m in _RULE_CUE_RE.finditer(sentence):
        cue, before, after = m.group(0).lower(), sentence[: m.start()], sentence[m.end() :]
        prev = before.split()[-1].lower().strip(",") if before.split() else ""
        nxt = after.split()[0].lower().strip(",.") if after.split() else ""
        if cue in ("always", "never"):
            descriptive = prev in _STATE_VERBS or bool(nxt and _DESCRIPTIVE_NEXT_RE.match(nxt))
        elif cue == "must":
            descriptive = bool(_EPISTEMIC_MUST_RE.match(after.strip()))
        elif cue.startswith(("don", "do")):
            descriptive = prev == "i" or nxt in _NOT_RULE_AFTER_DONT
        else:
            descriptive = cue == "only" and not _ONLY_RULE_RE.search(sentence[: m.end()][-40:])
        if not descriptive:
            return True
    return False


def find_constraints(text: str) -> list[str]:
    """Sentences of ``text`` that state a rule (meant for user messages), whitespace
    collapsed, a bullet, a short lead-in ("One more thing:") and the closing punctuation
    dropped; first occurrence order, duplicates (ignoring case) removed."""
    seen: dict[str, str] = {}
    for raw in _SENTENCE_SPLIT_RE.split(text):
        sentence = _BULLET_RE.sub("", " ".join(raw.split()))
        lead = _LEAD_IN_RE.match(sentence)
        if lead and not _is_rule(lead.group(1)) and _is_rule(lead.group(2)):
            sentence = lead.group(2)
        sentence = sentence.rstrip(".。;；!！,， ")
        if sentence and _is_rule(sentence):
            seen.setdefault(sentence.casefold(), sentence)
    return list(seen.values())


# -- the rule summary of a tool output (offloads and eviction stubs) -----------------------

_LINE_PREFIX_BYTES = 4096  # only the start of a line matters to the anchored patterns
MAX_DECLARATIONS = 20
GENERIC_CHARS = 300

# Tools whose output is one file's text (summarised as that file); not the smart trigger's
# READ_ONLY_TOOLS (harness9.context.policy), which are every tool that only looks.
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


def _arg(args_json: str, *keys: str) -> str | None:
    try:
        data = json.loads(args_json) if args_json else {}
    except (ValueError, TypeError):
        return None
    values = [data.get(k) for k in keys] if isinstance(data, dict) else []
    return next((v for v in values if isinstance(v, str) and v), None)


def _clip(line: str, n: int = 160) -> str:
    line = line.rstrip("\r")
    return line if len(line) <= n else line[: n - 1] + "…"


def _exit_status(metadata: dict, tail: str) -> str:
    """``exit code N`` as the shell tool reported it as data (``timed out`` when it killed
    the command). The output's last lines are read only for a result that came without the
    code as data: a log row stored before results' metadata was kept, or another shell
    tool (an MCP server's) that reports none. There a command's own "exit code" line can
    pass for the tool's; nowhere else is the text trusted for it."""
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


# -- the fingerprint a summary must keep, its check and repair -----------------------------

PRESERVED_HEADING = "## Preserved facts"
# Each kind of fact, in the order they are listed, and its plural in "… and N more".
_PLURAL = {
    "file": "paths",
    "identifier": "names",
    "error": "errors",
    "decision": "decisions",
    "constraint": "constraints",
}
# Rank tiers when the budget overflows (lower is kept first), see ``extract_fingerprint``.
TIER_ACTED, TIER_LAST_FAILURE, TIER_OUTPUT = 0, 1, 2
# Among facts seen only in tool output: an error line says most, a declared name is
# the API of a file the agent chose to read, a path seen only in output (a grep hit,
# a traceback frame) is the cheapest to find again by re-running the command.
_OUTPUT_KIND_ORDER = {"error": 0, "decision": 1, "identifier": 2, "file": 3, "constraint": 4}
_UNRANKED = (TIER_OUTPUT + 1, 0, 0)  # a fingerprint built by hand has no rank
_MARKER_RE = re.compile(
    r"^\s*[-*]?\s*@(file|func|type|error|decision|constraint):\s*(.+?)\s*$", re.MULTILINE
)
_WORD_RE = re.compile(r"[a-z0-9_]{3,}|[\u3400-\u9fff]")
_DISTINCTIVE_RE = re.compile(r"[0-9_]")
# A rule kept without its negation or its "only" says the opposite or much less
# ("touch the migrations folder"), so those words must survive with it.
_NEGATION_WORDS = frozenset(
    {"never", "not", "don", "dont", "mustn", "shouldn", "avoid", "without", "不", "别", "勿", "禁"}
)
_ONLY_WORDS = frozenset({"only", "只"})


@dataclass(slots=True)
class KeyInfoFingerprint:
    file_paths: list[str] = field(default_factory=list)
    identifiers: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)  # from user messages only
    # Sort key of each item (as ``validate_markers`` names it, "file: src/a.py"): lower is
    # kept first when the "Preserved facts" budget overflows. Empty: list order.
    rank: dict[str, tuple[int, int, int]] = field(default_factory=dict, compare=False, repr=False)


def _strings(data: object) -> list[str]:
    """Every string inside decoded JSON, the last first."""
    if isinstance(data, str):
        return [data]
    items = list(data.values()) if isinstance(data, dict) else data
    return (
        [s for item in reversed(items) for s in _strings(item)] if isinstance(items, list) else []
    )


def _argument_strings(arguments: str) -> list[str]:
    """Every string inside a tool call's JSON arguments (file contents included)."""
    try:
        return _strings(json.loads(arguments))
    except (ValueError, TypeError):
        return [arguments]


def _clean(line: str) -> str:
    return " ".join(line.split())[:LINE_CHARS]


def _clean_path(path: str) -> str:
    return path[2:] if path.startswith("./") else path


def extract_fingerprint(
    msgs: Sequence[Message], *, reread_summaries: bool = False
) -> KeyInfoFingerprint:
    """Every distinct fact of the messages about to be folded (system message ignored),
    each list in order of last mention, normalised (whitespace collapsed, a leading ``./``
    dropped) and deduplicated, uncapped. An earlier summary gives its markers and paths;
    with ``reread_summaries`` its other lines are read as the user's and assistant's words
    too (a fold without a model keeps what it folded as those words, not as markers).

    ``rank`` orders them for a budget: first what the user or the agent acted on (their
    text, tool-call arguments, an earlier summary's markers), the user's rules ahead (short,
    and not found again by re-running a command); then the error lines of each command's
    last failing run; then facts seen only in tool output. Newest first within a tier.
    """
    last: dict[str, dict[str, int]] = {kind: {} for kind in _PLURAL}  # fact -> last index
    acted: set[str] = set()
    spelling: dict[str, str] = {}  # casefolded rule -> its first spelling
    failed: dict[str, list[str]] = {}  # command -> error lines of its newest failing run

    def add(kind: str, values: Iterable[str], i: int, talk: bool) -> None:
        for value in filter(None, values):
            last[kind].pop(value, None)  # re-adding moves it to the end: last mention
            last[kind][value] = i
            if talk:
                acted.add(f"{kind}: {value}")

    def add_text(text: str, i: int, talk: bool, rules: bool = False) -> None:
        add("file", map(_clean_path, find_paths(text)), i, talk)
        add("identifier", find_declarations(text), i, talk)
        add("error", map(_clean, error_lines(text)), i, talk)
        if talk:
            add("decision", map(_clean, decision_lines(text)), i, talk)
        if rules:
            cleaned = map(_clean, find_constraints(text))
            add("constraint", (spelling.setdefault(r.casefold(), r) for r in cleaned), i, talk)

    command_of = {tc.id: f"{tc.name} {tc.arguments}" for m in msgs for tc in m.tool_calls}
    for i, m in enumerate(msgs):
        if m.role == ROLE_SYSTEM:
            continue
        if m.is_summary:  # a previous summary: carry its markers forward
            for kind, value in _MARKER_RE.findall(m.content):
                kind = {"func": "identifier", "type": "identifier"}.get(kind, kind)
                add(kind, [_clean_path(value) if kind == "file" else value], i, True)
            add("file", map(_clean_path, find_paths(m.content)), i, True)
            if reread_summaries:
                add_text(_MARKER_RE.sub("", summary_of(m)), i, True, rules=True)
        elif m.role == ROLE_TOOL:
            add_text(m.content, i, False)
            if errors := error_lines(m.content):
                failed[command_of.get(m.tool_call_id or "", "")] = errors
        else:
            # Tool call names are not identifiers: they name harness tools.
            talk = m.role in (ROLE_USER, ROLE_ASSISTANT)
            add_text(m.content, i, talk, rules=m.role == ROLE_USER)
            for text in (s for tc in m.tool_calls for s in _argument_strings(tc.arguments)):
                add_text(text, i, talk)
    last_failures = {_clean(e) for errors in failed.values() for e in errors}
    rank: dict[str, tuple[int, int, int]] = {}
    for kind, facts in last.items():
        for value, i in facts.items():
            item = f"{kind}: {value}"
            if item in acted:
                rank[item] = (TIER_ACTED, 0 if kind == "constraint" else 1, -i)
            elif kind == "error" and value in last_failures:
                rank[item] = (TIER_LAST_FAILURE, 0, -i)
            else:
                rank[item] = (TIER_OUTPUT, _OUTPUT_KIND_ORDER[kind], -i)
    paths, names, errors, decisions, rules = map(list, last.values())
    return KeyInfoFingerprint(paths, names, errors, decisions, rules, rank)


_Hay = tuple[str, set[str]]  # a text normalised (lower case, spaces collapsed) and its words


def _hay(text: str) -> _Hay:
    norm = " ".join(text.lower().split())
    return norm, set(_WORD_RE.findall(norm))


def _similar_in(hay: _Hay, fact: str) -> bool:
    """The fact verbatim (case/space-insensitive), or 60 % of its words present and
    every distinctive token (one with a digit or an underscore: ids, numbers, names)
    among them: near-identical lines that differ only in an id are different facts."""
    norm, words = _hay(fact)
    if norm in hay[0]:
        return True
    if not words or any(w not in hay[1] for w in words if _DISTINCTIVE_RE.search(w)):
        return False
    return len(words & hay[1]) >= 0.6 * len(words)


def _rule_in(hay: _Hay, lines: list[_Hay], rule: str) -> bool:
    """The rule verbatim, or one summary line similar to it that keeps its negation
    and its "only", when it has them."""
    norm, words = _hay(rule)
    kept = [group for group in (_NEGATION_WORDS, _ONLY_WORDS) if words & group]
    return norm in hay[0] or any(
        _similar_in(line, rule) and all(line[1] & group for group in kept) for line in lines
    )


def validate_markers(summary: str, fp: KeyInfoFingerprint) -> list[str]:
    """Fingerprinted items the summary does not contain, as ``"<kind>: <item>"``."""
    hay = _hay(summary)
    words = set(re.findall(r"\w+", summary))  # an identifier must match a whole word
    lines = [_hay(line) for line in summary.splitlines() if line.strip()] if fp.constraints else []
    checks: list[tuple[str, list[str], Callable[[str], bool]]] = [
        ("file", fp.file_paths, lambda path: path in summary),
        ("identifier", fp.identifiers, words.__contains__),
        ("error", fp.errors, lambda error: _similar_in(hay, error)),
        ("decision", fp.decisions, lambda decision: _similar_in(hay, decision)),
        ("constraint", fp.constraints, lambda rule: _rule_in(hay, lines, rule)),
    ]
    return [f"{kind}: {v}" for kind, values, found in checks for v in values if not found(v)]


def _marker_for(item: str) -> str:
    kind, _, value = item.partition(": ")
    if kind == "identifier":
        return ("@type:" if value[:1].isupper() else "@func:") + value
    return f"@{kind}:{value}"


def _line_tokens(line: str) -> int:
    # Same estimate as tokens.estimate_tokens, plus the newline, rounded up.
    return -(-(utf8_len(line) + 1) // BYTES_PER_TOKEN)


# Room kept for the heading, one "… and N more" line per kind (each at its longest for
# fewer than 100,000 left out) and 40 more: 96 tokens, the figure budgets are pinned to.
_RESERVED_TOKENS = (
    8 + sum(_line_tokens(f"… and 99999 more {p} not shown") for p in _PLURAL.values()) + 40
)


def _preserved(
    missing: list[str], fp: KeyInfoFingerprint, budget_tokens: int | None
) -> tuple[list[str], list[str]]:
    """The markers kept (in ``missing``'s order) and one "… and N more" line per kind that
    lost some. Over the budget, the longest prefix of the ranking that fits is kept, so a
    lower-ranked fact never displaces a higher-ranked one."""
    markers = [*map(_marker_for, missing)]
    size = sum(map(_line_tokens, [PRESERVED_HEADING, *markers]))
    if budget_tokens is None or size <= budget_tokens:
        return markers, []
    ranked = sorted(missing, key=lambda item: fp.rank.get(item, _UNRANKED))
    totals = list(accumulate(_line_tokens(_marker_for(item)) for item in ranked))
    fit = bisect_right(totals, budget_tokens - _RESERVED_TOKENS)
    chosen = set(ranked[:fit])
    counts = Counter(item.partition(": ")[0] for item in ranked[fit:])
    more = [f"… and {counts[k]} more {p} not shown" for k, p in _PLURAL.items() if counts[k]]
    return [_marker_for(item) for item in missing if item in chosen], more


def repair_summary(
    summary: str, fp: KeyInfoFingerprint, *, budget_tokens: int | None = None
) -> str:
    """Missing items appended under "Preserved facts" (unchanged when none is missing),
    within ``budget_tokens`` when given."""
    missing = validate_markers(summary, fp)
    if not missing:
        return summary
    kept, more = _preserved(missing, fp, budget_tokens)
    return f"{summary.rstrip()}\n\n{PRESERVED_HEADING}\n" + "\n".join(kept + more)


def facts_focus(fp: KeyInfoFingerprint, budget_tokens: int | None = None) -> str | None:
    """The facts that fit the budget, as a hint in the prompt (the repair afterwards is
    what guarantees them)."""
    missing = validate_markers("", fp)
    if not missing:
        return None
    kept, more = _preserved(missing, fp, budget_tokens)
    facts = "\n".join(kept) + "".join("\n" + line for line in more)
    return f"keeping these facts verbatim:\n<facts-to-keep>\n{facts}\n</facts-to-keep>"
