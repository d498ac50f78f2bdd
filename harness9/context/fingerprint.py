"""Structured compression: a marker prompt, plus a rule-extracted fingerprint that
the summary is checked against and repaired with.

An LLM summary may drop a file path or an error. Before folding, the facts that
must survive (paths, declared names, error lines, decisions, and the rules the
user stated) are extracted by rules; after the model answers, ``validate_markers`` lists what it left out and
``repair_summary`` appends those under "Preserved facts". Every distinct fact is
kept up to a token budget (a share of the window); past it the
best-ranked facts are written and the rest counted ("… and N more paths not
shown") or handed to a ``spill`` that stores them. So no fingerprinted item is
ever silently lost, however the model summarises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from harness9.context.compaction import (
    ProgressCallback,
)
from harness9.context.patterns import (
    DECISION_RE,
    find_constraints,
    find_declarations,
    find_paths,
)
from harness9.context.prompts import prompt
from harness9.context.summarize import (
    SpanSummarizer,
    Summarizer,
)
from harness9.context.tokens import BYTES_PER_TOKEN
from harness9.errors import HarnessError
from harness9.schema import ROLE_ASSISTANT, ROLE_SYSTEM, ROLE_TOOL, ROLE_USER, Message

STRUCTURED_COMPRESSION_PROMPT = prompt("structured_compression")
# What the per-call instruction asks for; the system prompt above explains the markers.
MARKER_TEMPLATE = prompt("marker_template")

PRESERVED_HEADING = "## Preserved facts"
TOOL_CONTENT_CHARS = 200  # a tool result as the marker summariser sees it
# The "Preserved facts" section may take up to this share of the compaction target.
# Compaction fires at 80 % of the window; a summary that ate more than ~15 % would leave
# too little of the remaining room for the verbatim tail and the next turns before
# the trigger fires again. 15 % of a 32K window is 4,800 tokens: a few hundred facts.
PRESERVED_SHARE = 0.15
_LINE_CHARS = 200
_KINDS = ("file", "identifier", "error", "decision", "constraint")
_PLURAL = {
    "file": "paths",
    "identifier": "names",
    "error": "errors",
    "decision": "decisions",
    "constraint": "constraints",
}
# Rank tiers when the budget overflows (lower is kept first), see ``ranked_missing``.
TIER_ACTED, TIER_LAST_FAILURE, TIER_OUTPUT = 0, 1, 2
# Among facts seen only in tool output: an error line says most, a declared name is
# the API of a file the agent chose to read, a path seen only in output (a grep hit,
# a traceback frame) is the cheapest to find again by re-running the command.
_OUTPUT_KIND_ORDER = {"error": 0, "decision": 1, "identifier": 2, "file": 3, "constraint": 4}
# Within the top tier a user's rule comes first: it is what the user asked for in so
# many words, it is short, and unlike a path it cannot be found again by the agent.
_ACTED_KIND_ORDER = {"constraint": 0}
_ACTED_OTHER = 1

_EXCEPTION_LINE_RE = re.compile(r"^[\w.]*(?:Error|Exception)\b(?::.*)?$")
_ERROR_WORDS_RE = re.compile(r"Error:|error:|\bFAILED\b|\bexception\b")
# Source lines that mention errors without being one (``except ValueError:``).
_CODE_PREFIX_RE = re.compile(
    r"^(?:except|catch|raise|throw|if|elif|else|def|class|return|assert|try|finally|import|from|"
    r"#|//|\*|log|logger|print|fmt\.|console\.)\b|^[#/*]"
)
_MARKER_RE = re.compile(
    r"^\s*[-*]?\s*@(file|func|type|error|decision|constraint):\s*(.+?)\s*$", re.MULTILINE
)
_WORD_RE = re.compile(r"[a-z0-9_]{3,}|[\u3400-\u9fff]")
_DISTINCTIVE_RE = re.compile(r"[0-9_]")


class SummaryError(HarnessError):
    """The summariser returned nothing usable."""


@dataclass(slots=True)
class KeyInfoFingerprint:
    file_paths: list[str] = field(default_factory=list)
    identifiers: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    # Rules the user stated ("never touch migrations/"), from user messages only.
    constraints: list[str] = field(default_factory=list)
    # Sort key of each item (as ``validate_markers`` names it, "file: src/a.py"): lower is
    # kept first when the "Preserved facts" budget overflows. Empty: list order, newest first.
    rank: dict[str, tuple[int, int, int]] = field(default_factory=dict, compare=False, repr=False)

    def is_empty(self) -> bool:
        return not (
            self.file_paths or self.identifiers or self.errors or self.decisions or self.constraints
        )


def _string_values(arguments: str) -> list[str]:
    """Every string inside a tool call's JSON arguments (file contents included)."""
    try:
        data = json.loads(arguments)
    except (ValueError, TypeError):
        return [arguments]
    out: list[str] = []
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out


def error_lines(text: str) -> list[str]:
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("Traceback (most recent call last)"):
            continue
        if _CODE_PREFIX_RE.match(line):
            continue
        if _EXCEPTION_LINE_RE.match(line) or _ERROR_WORDS_RE.search(line):
            out.append(line[:_LINE_CHARS])
    return out


def decision_lines(text: str) -> list[str]:
    return [ln.strip()[:_LINE_CHARS] for ln in text.splitlines() if DECISION_RE.search(ln)]


def _clean(line: str) -> str:
    return " ".join(line.split())[:_LINE_CHARS]


def _clean_path(path: str) -> str:
    return path[2:] if path.startswith("./") else path


class _Collector:
    """Distinct facts per kind in order of last mention, with where each was seen."""

    def __init__(self) -> None:
        self.last: dict[str, dict[str, int]] = {k: {} for k in _KINDS}
        self.acted: set[str] = set()  # items seen in user/assistant text or call arguments
        self.error_at: dict[str, set[int]] = {}
        self.rule_spelling: dict[str, str] = {}  # casefolded constraint -> first spelling

    def add(self, kind: str, values: Iterable[str], index: int, acted: bool) -> None:
        bucket = self.last[kind]
        for value in values:
            if not value:
                continue
            # Re-adding moves an item to the end: list order is order of last mention.
            bucket.pop(value, None)
            bucket[value] = index
            if acted:
                self.acted.add(f"{kind}: {value}")
            if kind == "error":
                self.error_at.setdefault(value, set()).add(index)

    def add_text(
        self, text: str, index: int, acted: bool, decisions: bool, constraints: bool = False
    ) -> None:
        self.add("file", (_clean_path(p) for p in find_paths(text)), index, acted)
        self.add("identifier", find_declarations(text), index, acted)
        self.add("error", (_clean(e) for e in error_lines(text)), index, acted)
        if decisions:
            self.add("decision", (_clean(d) for d in decision_lines(text)), index, acted)
        if constraints:
            rules = (_clean(c) for c in find_constraints(text))
            rules = (self.rule_spelling.setdefault(r.casefold(), r) for r in rules)
            self.add("constraint", rules, index, acted)


def _command_key(msgs: Sequence[Message]) -> dict[str, str]:
    """tool_call_id -> "name arguments", what identifies a repeated run of one command."""
    return {tc.id: f"{tc.name} {tc.arguments}" for m in msgs for tc in m.tool_calls}


def extract_fingerprint(msgs: Sequence[Message]) -> KeyInfoFingerprint:
    """Every distinct rule-extracted fact of the messages about to be folded (system
    message ignored), each list in order of last mention, normalised (whitespace
    collapsed, a leading ``./`` dropped) and deduplicated.

    Nothing is capped here: the size limit is applied when the facts are written
    (``repair_summary``'s budget), using ``rank``: facts the user or the agent acted on
    (user/assistant text, tool-call arguments, an earlier summary's markers) first,
    the user's constraints ahead of the rest of that tier;
    then the error lines of each command's last failing run; then facts seen only in
    tool output (errors, then declared names, then paths). Newest first within a tier.
    Tool call names are not identifiers: they name harness tools, not the user's code.
    Constraints come from user messages only: a rule quoted in a file or proposed by
    the assistant is not one the user set.
    """
    col = _Collector()
    command_of = _command_key(msgs)
    last_failure: dict[str, int] = {}  # command -> index of its newest result with errors
    for i, m in enumerate(msgs):
        if m.role == ROLE_SYSTEM:
            continue
        if m.is_summary:  # a previous summary: carry its markers forward
            for kind, value in _MARKER_RE.findall(m.content):
                kind = {"func": "identifier", "type": "identifier"}.get(kind, kind)
                col.add(kind, [_clean_path(value) if kind == "file" else value], i, True)
            col.add("file", (_clean_path(p) for p in find_paths(m.content)), i, True)
            continue
        if m.role == ROLE_TOOL:
            col.add_text(m.content, i, acted=False, decisions=False)
            if error_lines(m.content):
                last_failure[command_of.get(m.tool_call_id or "", "")] = i
            continue
        talk = m.role in (ROLE_USER, ROLE_ASSISTANT)
        col.add_text(m.content, i, acted=talk, decisions=talk, constraints=m.role == ROLE_USER)
        for text in (s for tc in m.tool_calls for s in _string_values(tc.arguments)):
            col.add_text(text, i, acted=talk, decisions=talk)
    last_runs = set(last_failure.values())
    rank: dict[str, tuple[int, int, int]] = {}
    for kind in _KINDS:
        for value, index in col.last[kind].items():
            item = f"{kind}: {value}"
            if item in col.acted:
                tier = TIER_ACTED
            elif kind == "error" and col.error_at[value] & last_runs:
                tier = TIER_LAST_FAILURE
            else:
                tier = TIER_OUTPUT
            if tier == TIER_OUTPUT:
                order = _OUTPUT_KIND_ORDER[kind]
            else:
                order = _ACTED_KIND_ORDER.get(kind, _ACTED_OTHER) if tier == TIER_ACTED else 0
            rank[item] = (tier, order, -index)
    return KeyInfoFingerprint(
        file_paths=list(col.last["file"]),
        identifiers=list(col.last["identifier"]),
        errors=list(col.last["error"]),
        decisions=list(col.last["decision"]),
        constraints=list(col.last["constraint"]),
        rank=rank,
    )


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


class _Haystack:
    """A summary prepared once for many ``semantic_match`` look-ups."""

    __slots__ = ("norm", "words")

    def __init__(self, summary: str) -> None:
        self.norm = _norm(summary)
        self.words = set(_WORD_RE.findall(self.norm))


def _semantic_in(hay: _Haystack, fact: str) -> bool:
    if _norm(fact) in hay.norm:
        return True
    words = set(_WORD_RE.findall(_norm(fact)))
    if not words:
        return False
    if any(w not in hay.words for w in words if _DISTINCTIVE_RE.search(w)):
        return False
    return len(words & hay.words) >= 0.6 * len(words)


def semantic_match(summary: str, fact: str) -> bool:
    """The fact verbatim (case/space-insensitive), or 60 % of its words present and
    every distinctive token (one with a digit or an underscore: ids, numbers, names)
    among them: near-identical lines that differ only in an id are different facts."""
    return _semantic_in(_Haystack(summary), fact)


# A rule kept without its negation or its "only" says the opposite or much less
# ("touch the migrations folder"), so those words must survive with it.
_NEGATION_WORDS = frozenset(
    {"never", "not", "don", "dont", "mustn", "shouldn", "avoid", "without", "不", "别", "勿", "禁"}
)
_ONLY_WORDS = frozenset({"only", "只"})


def _constraint_in(hay: _Haystack, lines: list[_Haystack], rule: str) -> bool:
    """The rule verbatim, or one summary line holding most of its words (as for a
    decision) together with its negation and its "only", when it has them."""
    if _norm(rule) in hay.norm:
        return True
    words = set(_WORD_RE.findall(_norm(rule)))
    for line in lines:
        if not _semantic_in(line, rule):
            continue
        if words & _NEGATION_WORDS and not line.words & _NEGATION_WORDS:
            continue
        if words & _ONLY_WORDS and not line.words & _ONLY_WORDS:
            continue
        return True
    return False


def validate_markers(summary: str, fp: KeyInfoFingerprint) -> list[str]:
    """Fingerprinted items the summary does not contain, as ``"<kind>: <item>"``."""
    hay = _Haystack(summary)
    words = set(re.findall(r"\w+", summary))
    missing = [f"file: {p}" for p in fp.file_paths if p not in summary]
    missing += [
        f"identifier: {n}"
        for n in fp.identifiers
        if n not in words  # a whole-word match; \w+ tokens are exactly the whole words
    ]
    missing += [f"error: {e}" for e in fp.errors if not _semantic_in(hay, e)]
    missing += [f"decision: {d}" for d in fp.decisions if not _semantic_in(hay, d)]
    if fp.constraints:
        lines = [_Haystack(line) for line in summary.splitlines() if line.strip()]
        missing += [f"constraint: {c}" for c in fp.constraints if not _constraint_in(hay, lines, c)]
    return missing


def _marker_for(item: str) -> str:
    kind, _, value = item.partition(": ")
    if kind == "identifier":
        return ("@type:" if value[:1].isupper() else "@func:") + value
    return f"@{kind}:{value}"


def _line_tokens(line: str) -> int:
    # Same estimate as tokens.estimate_tokens, plus the newline, rounded up.
    return -(-(len(line.encode("utf-8", "surrogatepass")) + 1) // BYTES_PER_TOKEN)


# Room kept for the heading and up to one "… and N more" line per kind (each at its
# longest for fewer than 100,000 left out) plus the spill reference, so the whole
# section stays within the budget.
_RESERVED_TOKENS = (
    8 + sum(_line_tokens(f"… and 99999 more {p} not shown") for p in _PLURAL.values()) + 40
)


def select_facts(
    missing: Sequence[str], fp: KeyInfoFingerprint, budget_tokens: int | None
) -> tuple[list[str], list[str]]:
    """(kept in ``missing``'s order, left out in rank order) for a budget in tokens.

    ``None`` keeps everything. Otherwise, when every line fits the budget all are
    kept; else items are taken in ``fp.rank`` order while they fit, and the first
    one that does not ends the selection (a strict prefix of the ranking, so a
    lower-ranked fact is never kept in place of a higher-ranked one).
    """
    if budget_tokens is None:
        return list(missing), []
    total = _line_tokens(PRESERVED_HEADING) + sum(_line_tokens(_marker_for(i)) for i in missing)
    if total <= budget_tokens:
        return list(missing), []
    default = (TIER_OUTPUT, len(_OUTPUT_KIND_ORDER), 0)
    position = {item: n for n, item in enumerate(missing)}
    ranked = sorted(missing, key=lambda i: (fp.rank.get(i, default), position[i]))
    room = budget_tokens - _RESERVED_TOKENS
    kept: set[str] = set()
    for n, item in enumerate(ranked):
        cost = _line_tokens(_marker_for(item))
        if cost > room:
            return [i for i in missing if i in kept], ranked[n:]
        room -= cost
        kept.add(item)
    return list(missing), []


def omitted_lines(left_out: Sequence[str]) -> list[str]:
    """One "… and N more <kind> not shown" line per kind that lost items."""
    counts = {k: 0 for k in _KINDS}
    for item in left_out:
        counts[item.partition(": ")[0]] += 1
    return [f"… and {n} more {_PLURAL[k]} not shown" for k, n in counts.items() if n]


def repair_summary(
    summary: str,
    fp: KeyInfoFingerprint,
    *,
    budget_tokens: int | None = None,
    spill: Callable[[str], str] | None = None,
) -> str:
    """Append missing items under "Preserved facts"; unchanged when nothing is missing.

    With ``budget_tokens`` the section stays within that many tokens: when every
    missing item does not fit, the best-ranked ones are written (``select_facts``)
    and a "… and N more paths not shown" line per kind says what was left out. If
    ``spill`` is given it receives the left-out items (one marker per line, rank
    order) and returns a line to add, e.g. an offload marker the agent can recall
    them with; "" when it could not store them.
    """
    missing = validate_markers(summary, fp)
    if not missing:
        return summary
    kept, left_out = select_facts(missing, fp, budget_tokens)
    lines = [_marker_for(item) for item in kept] + omitted_lines(left_out)
    if left_out and spill is not None:
        reference = spill("\n".join(_marker_for(item) for item in left_out))
        if reference:
            lines.append(reference)
    body = "\n".join(lines)
    return f"{summary.rstrip()}\n\n{PRESERVED_HEADING}\n{body}"


def marker_summarizer(summarizer: Summarizer, *, window: int | None = None) -> SpanSummarizer:
    """A SpanSummarizer that asks for the marker format (tool results cut to 200)."""
    return SpanSummarizer(
        summarizer,
        window=window,
        system_prompt=STRUCTURED_COMPRESSION_PROMPT,
        template=MARKER_TEMPLATE,
        tool_result_chars=TOOL_CONTENT_CHARS,
    )


def facts_focus(fp: KeyInfoFingerprint, budget_tokens: int | None = None) -> str | None:
    """The fingerprint as a hint in the prompt (the repair afterwards is what guarantees it).

    With a budget, only the best-ranked facts that fit are listed.
    """
    if fp.is_empty():
        return None
    kept, left_out = select_facts(validate_markers("", fp), fp, budget_tokens)
    facts = "\n".join(_marker_for(item) for item in kept)
    more = "".join("\n" + line for line in omitted_lines(left_out))
    return f"keeping these facts verbatim:\n<facts-to-keep>\n{facts}{more}\n</facts-to-keep>"


def structured_summary(
    span: SpanSummarizer,
    msgs: Sequence[Message],
    *,
    fingerprint_from: Sequence[Message] | None = None,
    on_progress: ProgressCallback | None = None,
    preserved_budget: int | None = None,
    spill: Callable[[str], str] | None = None,
    instructions: str | None = None,
) -> str:
    """``span.summarize`` (chunked, merging a previous summary), then fingerprint repair.

    ``span`` is normally a ``marker_summarizer``. ``fingerprint_from`` lets a
    caller fingerprint the original messages while the model sees an
    already-evicted rendering of them. ``preserved_budget`` (tokens) bounds both the
    facts hint in the prompt and the "Preserved facts" section; ``spill`` stores what
    does not fit (see ``repair_summary``). Raises SummaryError on an empty reply.
    """
    fp = extract_fingerprint(fingerprint_from if fingerprint_from is not None else msgs)
    focus = facts_focus(fp, preserved_budget)
    if instructions:  # the user's own focus (/compact <instructions>) comes first
        focus = instructions + (f"\n{focus}" if focus else "")
    text = span.summarize(msgs, focus=focus, on_progress=on_progress).strip()
    if not text:
        raise SummaryError("the summariser returned an empty summary")
    return repair_summary(text, fp, budget_tokens=preserved_budget, spill=spill)
