"""The user's rules in text ("never touch migrations/", "只能修改 src/"), found by their
wording: a bottom-layer module of plain regular expressions, like harness9.tool_output.
The compaction keeps every rule the user states (harness9.context.facts).
"""

from __future__ import annotations

import re

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
