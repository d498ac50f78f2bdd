"""Structured compression: a marker prompt, plus a rule-extracted fingerprint that
the summary is checked against and repaired with.

An LLM summary may drop a file path or an error. Before folding, the facts that
must survive (paths, declared names, error lines, decisions) are extracted by
rules; after the model answers, ``validate_markers`` lists what it left out and
``repair_summary`` appends those under "Preserved facts". So no fingerprinted
item is ever silently lost, however the model summarises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from harness9.errors import HarnessError
from harness9.memory.compaction import DEFAULT_MIN_TAIL
from harness9.memory.patterns import DECISION_RE, find_declarations, find_paths
from harness9.memory.summarization import SummarizationCompactor, Summarizer
from harness9.schema import ROLE_ASSISTANT, ROLE_SYSTEM, ROLE_USER, Message

STRUCTURED_COMPRESSION_PROMPT = """\
You are a context compression expert. You will receive part of a conversation between \
a user and a coding agent (tool calls and abbreviated tool results included). Compress it \
into a dense summary the agent can continue from without the original messages.

## OUTPUT FORMAT
Use these markers, one item per line:
@file:{path} — File references (every file read, written or mentioned)
@func:{name} — Function signatures (name and, when known, parameters)
@type:{name} — Type definitions (classes, structs, interfaces)
@error:{description} — Errors encountered, and whether they were fixed
@decision:{description} — Decisions made, with the reason
@todo:{description} — Pending tasks
@config:{key=value} — Config changes

Then add a short free-text section "Progress:" with the user's goal and what was done.

## RULES
- Keep exact paths, names, error messages and values; never paraphrase them.
- If a <previous-summary> is present, merge it: keep every marker it has unless the new \
conversation shows it is obsolete.
- Tool results marked with 📂 [offload:<id>] are stored on disk: keep their ids so \
offload_recall can fetch them.
- Output only the summary.
"""
# What the per-call instruction asks for; the system prompt above explains the markers.
MARKER_TEMPLATE = (
    "One marker per line (@file:, @func:, @type:, @error:, @decision:, @todo:, @config:), "
    'then a short "Progress:" section.'
)

PRESERVED_HEADING = "## Preserved facts"
TOOL_CONTENT_CHARS = 200  # a tool result as the marker summariser sees it (seed: 200 runes)
_MAX_PATHS, _MAX_IDENTIFIERS, _MAX_ERRORS, _MAX_DECISIONS = 40, 40, 12, 12
_LINE_CHARS = 200

_EXCEPTION_LINE_RE = re.compile(r"^[\w.]*(?:Error|Exception)\b(?::.*)?$")
_ERROR_WORDS_RE = re.compile(r"Error:|error:|\bFAILED\b|\bexception\b")
# Source lines that mention errors without being one (``except ValueError:``).
_CODE_PREFIX_RE = re.compile(
    r"^(?:except|catch|raise|throw|if|elif|else|def|class|return|assert|try|finally|import|from|"
    r"#|//|\*|log|logger|print|fmt\.|console\.)\b|^[#/*]"
)
_MARKER_RE = re.compile(r"^\s*[-*]?\s*@(file|func|type|error|decision):\s*(.+?)\s*$", re.MULTILINE)
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

    def is_empty(self) -> bool:
        return not (self.file_paths or self.identifiers or self.errors or self.decisions)


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


def _add(bucket: dict[str, None], items: Iterable[str]) -> None:
    for item in items:
        # Re-adding moves an item to the end, so caps keep the most recent facts.
        bucket.pop(item, None)
        bucket[item] = None


def _last(bucket: dict[str, None], n: int) -> list[str]:
    return list(bucket)[-n:]


def extract_fingerprint(msgs: Sequence[Message]) -> KeyInfoFingerprint:
    """Rule-extracted facts of the messages about to be folded (system message ignored).

    Tool call names are not identifiers: they name harness tools, not code the user works on.
    Caps (40 paths, 40 names, 12 errors, 12 decisions) keep the most recent.
    """
    paths: dict[str, None] = {}
    names: dict[str, None] = {}
    errors: dict[str, None] = {}
    decisions: dict[str, None] = {}
    for m in msgs:
        if m.role == ROLE_SYSTEM:
            continue
        if m.is_summary:  # a previous summary: carry its markers forward
            for kind, value in _MARKER_RE.findall(m.content):
                bucket = {"file": paths, "func": names, "type": names, "error": errors}.get(
                    kind, decisions
                )
                _add(bucket, [value])
            _add(paths, find_paths(m.content))
            continue
        texts = [m.content] + [s for tc in m.tool_calls for s in _string_values(tc.arguments)]
        for text in texts:
            _add(paths, find_paths(text))
            _add(names, find_declarations(text))
            _add(errors, error_lines(text))
            if m.role in (ROLE_USER, ROLE_ASSISTANT):
                _add(decisions, decision_lines(text))
    return KeyInfoFingerprint(
        file_paths=_last(paths, _MAX_PATHS),
        identifiers=_last(names, _MAX_IDENTIFIERS),
        errors=_last(errors, _MAX_ERRORS),
        decisions=_last(decisions, _MAX_DECISIONS),
    )


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def semantic_match(summary: str, fact: str) -> bool:
    """The fact verbatim (case/space-insensitive), or 60 % of its words present and
    every distinctive token (one with a digit or an underscore: ids, numbers, names)
    among them: near-identical lines that differ only in an id are different facts."""
    hay = _norm(summary)
    if _norm(fact) in hay:
        return True
    words = set(_WORD_RE.findall(_norm(fact)))
    if not words:
        return False
    present = set(_WORD_RE.findall(hay))
    if any(w not in present for w in words if _DISTINCTIVE_RE.search(w)):
        return False
    return len(words & present) >= 0.6 * len(words)


def validate_markers(summary: str, fp: KeyInfoFingerprint) -> list[str]:
    """Fingerprinted items the summary does not contain, as ``"<kind>: <item>"``."""
    missing = [f"file: {p}" for p in fp.file_paths if p not in summary]
    missing += [
        f"identifier: {n}"
        for n in fp.identifiers
        if not re.search(rf"(?<!\w){re.escape(n)}(?!\w)", summary)
    ]
    missing += [f"error: {e}" for e in fp.errors if not semantic_match(summary, e)]
    missing += [f"decision: {d}" for d in fp.decisions if not semantic_match(summary, d)]
    return missing


def _marker_for(item: str) -> str:
    kind, _, value = item.partition(": ")
    if kind == "identifier":
        return ("@type:" if value[:1].isupper() else "@func:") + value
    return f"@{kind}:{value}"


def repair_summary(summary: str, fp: KeyInfoFingerprint) -> str:
    """Append every missing item under "Preserved facts"; unchanged when nothing is missing."""
    missing = validate_markers(summary, fp)
    if not missing:
        return summary
    lines = "\n".join(_marker_for(item) for item in missing)
    return f"{summary.rstrip()}\n\n{PRESERVED_HEADING}\n{lines}"


def marker_compactor(
    summarizer: Summarizer,
    max_tokens: int,
    *,
    min_tail_messages: int = DEFAULT_MIN_TAIL,
    summarizer_window: int | None = None,
) -> SummarizationCompactor:
    """A SummarizationCompactor that asks for the marker format (tool results cut to 200)."""
    return SummarizationCompactor(
        summarizer,
        max_tokens,
        min_tail_messages,
        summarizer_window=summarizer_window,
        system_prompt=STRUCTURED_COMPRESSION_PROMPT,
        template=MARKER_TEMPLATE,
        tool_result_chars=TOOL_CONTENT_CHARS,
    )


def facts_focus(fp: KeyInfoFingerprint) -> str | None:
    """The fingerprint as a hint in the prompt (the repair afterwards is what guarantees it)."""
    if fp.is_empty():
        return None
    facts = "\n".join(_marker_for(item) for item in validate_markers("", fp))
    return f"keeping these facts verbatim:\n<facts-to-keep>\n{facts}\n</facts-to-keep>"


def structured_summary(
    compactor: SummarizationCompactor,
    msgs: Sequence[Message],
    *,
    fingerprint_from: Sequence[Message] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> str:
    """``compactor.summarize`` (chunked, merging a previous summary), then fingerprint repair.

    ``compactor`` is normally a ``marker_compactor``. ``fingerprint_from`` lets a
    caller fingerprint the original messages while the model sees an
    already-evicted rendering of them. Raises SummaryError on an empty reply.
    """
    fp = extract_fingerprint(fingerprint_from if fingerprint_from is not None else msgs)
    text = compactor.summarize(msgs, focus=facts_focus(fp), on_progress=on_progress).strip()
    if not text:
        raise SummaryError("the summariser returned an empty summary")
    return repair_summary(text, fp)
