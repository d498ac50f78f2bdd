"""The facts a summary must keep (paths, declared names, errors, decisions, the user's
rules), found by rules before folding, and the check and repair of the model's summary.

``repair_summary`` appends what the summary left out under "Preserved facts", within a
token budget: past it the best-ranked are written and the rest counted ("… and N more
paths not shown"), so no fact is silently lost.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from harness9.context.compaction import ProgressCallback
from harness9.context.patterns import (
    LINE_CHARS,
    decision_lines,
    error_lines,
    find_constraints,
    find_declarations,
    find_paths,
)
from harness9.context.prompts import prompt
from harness9.context.stubs import summary_of
from harness9.context.summarize import SpanSummarizer, Summarizer, clipped
from harness9.errors import HarnessError
from harness9.schema import ROLE_ASSISTANT, ROLE_SYSTEM, ROLE_TOOL, ROLE_USER, Message
from harness9.tokens import BYTES_PER_TOKEN, utf8_len

STRUCTURED_COMPRESSION_PROMPT = prompt("structured_compression")
MARKER_TEMPLATE = prompt("marker_template")  # the per-call instruction
PRESERVED_HEADING = "## Preserved facts"
TOOL_CONTENT_CHARS = 200  # a tool result as the marker summariser sees it
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


class SummaryError(HarnessError):
    """The summariser returned nothing usable."""


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
    """The facts that fit the budget, as a hint in the prompt (the repair afterwards is
    what guarantees them)."""
    missing = validate_markers("", fp)
    if not missing:
        return None
    kept, more = _preserved(missing, fp, budget_tokens)
    facts = "\n".join(kept) + "".join("\n" + line for line in more)
    return f"keeping these facts verbatim:\n<facts-to-keep>\n{facts}\n</facts-to-keep>"


def structured_summary(
    span: SpanSummarizer,
    msgs: Sequence[Message],
    *,
    fingerprint_from: Sequence[Message] | None = None,
    on_progress: ProgressCallback | None = None,
    preserved_budget: int | None = None,
    instructions: str | None = None,
    text_budget: int | None = None,
) -> str:
    """``span.summarize`` (chunked, merging a previous summary), then fingerprint repair.

    ``fingerprint_from`` lets a caller fingerprint the original messages while the model
    sees an already-evicted rendering of them. ``preserved_budget`` (tokens) bounds both
    the facts hint and the "Preserved facts" section; ``text_budget`` the model's text,
    ``clipped`` before the repair adds what it lost. Raises SummaryError on an empty reply.
    """
    fp = extract_fingerprint(fingerprint_from if fingerprint_from is not None else msgs)
    focus = facts_focus(fp, preserved_budget)
    if instructions:  # the user's own focus (/compact <instructions>) comes first
        focus = instructions + (f"\n{focus}" if focus else "")
    text = span.summarize(msgs, focus=focus, on_progress=on_progress).strip()
    if not text:
        raise SummaryError("the summariser returned an empty summary")
    return repair_summary(clipped(text, text_budget), fp, budget_tokens=preserved_budget)
