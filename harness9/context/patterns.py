"""Rule-based recognisers of facts in text: paths, declared names, errors, decisions, rules.

Plain regular expressions: they run on every tool result and every compaction, so they
must be cheap and predictable; a wrong guess only shifts a score or adds a summary line.
"""

from __future__ import annotations

import re

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
