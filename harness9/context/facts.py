"""The facts in text, found by rules (paths, declared names, errors, decisions, the user's
rules), and the fingerprint a summary must keep (docs/architecture.md, 'Stand-ins, the
repair and the preserved facts'). Plain regular expressions: they run on every tool
result and every compaction, so they must be cheap and predictable; a wrong guess only
shifts a score or adds a summary line.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from harness9.context.stubs import facts_of, is_summary, summary_of
from harness9.schema import ROLE_ASSISTANT, ROLE_SYSTEM, ROLE_TOOL, ROLE_USER, Message
from harness9.tokens import BYTES_PER_TOKEN, utf8_len
from harness9.tool_output import DECLARATION_RE

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
    """Drops hits that are not paths: ``e.g``, "and/or"."""
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
    """Sentences of ``text`` that state a rule, without a bullet, a short lead-in or the
    closing punctuation; first occurrence order, duplicates (ignoring case) removed."""
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


# -- the fingerprint a summary must keep, its check and repair -----------------------------

PRESERVED_HEADING = "## Preserved facts"
# Each kind of fact, in listing order, and its plural in "… and N more".
_PLURAL = {
    "file": "paths",
    "identifier": "names",
    "error": "errors",
    "decision": "decisions",
    "constraint": "constraints",
}
# Rank tiers when the "Preserved facts" budget overflows, kept first to last: what the
# user or the agent acted on (their text, call arguments, an earlier summary's facts;
# the user's rules ahead: short, and not found again by re-running a command), the error
# lines of each command's last failing run, facts seen only in tool output. Newest first
# within a tier.
TIER_ACTED, TIER_LAST_FAILURE, TIER_OUTPUT = 0, 1, 2
# Among facts seen only in tool output: an error line says most, a declared name is the
# API of a file the agent read, a path (a grep hit) is the cheapest to find again.
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
    # Sort key of each item ("file: src/a.py"), lower kept first. Empty: list order.
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


def markers_in(text: str, *, paths: bool = False) -> list[str]:
    """The facts ``text``'s marker lines state (``@func:load``: "identifier: load"); with
    ``paths`` every path in it too: how a summary kept before facts were is read."""
    kinds = {"func": "identifier", "type": "identifier"}
    out = [
        f"{kinds.get(k, k)}: {_clean_path(v) if k == 'file' else v}"
        for k, v in _MARKER_RE.findall(text)
    ]
    return out + ([f"file: {p}" for p in map(_clean_path, find_paths(text))] if paths else [])


def extract_fingerprint(
    msgs: Sequence[Message], *, reread_summaries: bool = False
) -> KeyInfoFingerprint:
    """Every distinct fact of the messages about to be folded, each list in order of last
    mention, normalised and deduplicated, ranked by the tiers above. An earlier summary
    gives the facts its checkpoint keeps (``facts_of``), never its text, which is largely
    harness9's own (preserved facts, recall index, todos). One whose checkpoint predates
    them is read: its markers and paths, with ``reread_summaries`` its other lines too."""
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
        if is_summary(m):  # an earlier summary: the facts its checkpoint keeps
            kept = facts_of(m)
            for item in markers_in(m.content, paths=True) if kept is None else kept:
                kind, value = item.partition(": ")[::2]
                if kind == "constraint":
                    value = spelling.setdefault(value.casefold(), value)
                add(kind, [value] if kind in last else [], i, True)
            if kept is None and reread_summaries:  # kept before facts were: its text
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
    """The fact verbatim, or 60 % of its words present and every distinctive one (with a
    digit or an underscore): lines that differ only in an id are different facts."""
    norm, words = _hay(fact)
    if norm in hay[0]:
        return True
    if not words or any(w not in hay[1] for w in words if _DISTINCTIVE_RE.search(w)):
        return False
    return len(words & hay[1]) >= 0.6 * len(words)


def _rule_in(hay: _Hay, lines: list[_Hay], rule: str) -> bool:
    """The rule verbatim, or a line similar to it that keeps its negation and "only"."""
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
    """The items kept and a "… and N more" line per kind that lost some: over the
    budget, the longest prefix of the ranking that fits (a fact never displaces a better)."""
    size = sum(map(_line_tokens, [PRESERVED_HEADING, *map(_marker_for, missing)]))
    if budget_tokens is None or size <= budget_tokens:
        return missing, []
    ranked = sorted(missing, key=lambda item: fp.rank.get(item, _UNRANKED))
    totals = list(accumulate(_line_tokens(_marker_for(item)) for item in ranked))
    fit = bisect_right(totals, budget_tokens - _RESERVED_TOKENS)
    chosen = set(ranked[:fit])
    counts = Counter(item.partition(": ")[0] for item in ranked[fit:])
    more = [f"… and {counts[k]} more {p} not shown" for k, p in _PLURAL.items() if counts[k]]
    return [item for item in missing if item in chosen], more


def keep_facts(
    summary: str, fp: KeyInfoFingerprint, budget: int | None, repair: bool = True, reply: str = ""
) -> tuple[str, list[str]]:
    """``summary`` (``repair``: with missing facts appended under "Preserved facts", within
    ``budget`` tokens if not None) and the facts it keeps, best-ranked first: the fingerprint's
    it holds, then those the marker lines of ``reply``, the model's fresh words, state."""
    missing = validate_markers(summary, fp)
    appended, more = _preserved(missing, fp, budget) if repair and missing else ([], [])
    if appended or more:
        lines = [*map(_marker_for, appended), *more]
        summary = f"{summary.rstrip()}\n\n{PRESERVED_HEADING}\n" + "\n".join(lines)
    lost = set(missing) - set(appended)
    items = sorted(
        (i for i in fact_items(fp) if i not in lost), key=lambda i: fp.rank.get(i, _UNRANKED)
    )
    return summary, list(dict.fromkeys([*items, *markers_in(reply)]))


def fact_items(fp: KeyInfoFingerprint) -> list[str]:
    """Every fact of ``fp`` as ``"<kind>: <value>"``, kind by kind."""
    lists = (fp.file_paths, fp.identifiers, fp.errors, fp.decisions, fp.constraints)
    return [f"{kind}: {v}" for kind, values in zip(_PLURAL, lists, strict=True) for v in values]


def repair_summary(
    summary: str, fp: KeyInfoFingerprint, *, budget_tokens: int | None = None
) -> str:
    """Missing items appended under "Preserved facts", within ``budget_tokens`` if given."""
    return keep_facts(summary, fp, budget_tokens)[0]


def facts_focus(fp: KeyInfoFingerprint, budget_tokens: int | None = None) -> str | None:
    """The facts that fit the budget, as a hint in the prompt (the repair guarantees them)."""
    missing = validate_markers("", fp)
    if not missing:
        return None
    kept, more = _preserved(missing, fp, budget_tokens)
    facts = "\n".join(map(_marker_for, kept)) + "".join("\n" + line for line in more)
    return f"keeping these facts verbatim:\n<facts-to-keep>\n{facts}\n</facts-to-keep>"
