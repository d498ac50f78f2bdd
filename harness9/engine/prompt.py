"""The system prompt's parts, rebuilt every turn and never stored.

Rebuilding it means an edited AGENTS.md reaches the model on the next turn, and
old sessions never lock in an old prompt. It holds nothing that changes within a
session (see docs/architecture.md, 'Cache-stable requests'): the first message is the
start of every cached
prefix, so a todo list or a clock in it would invalidate the whole prompt cache on
every change. The todo list reaches the model through the ``write_todos`` results
in the conversation and, after a compaction, through the checkpoint's state note
(harness9.context.view.state_items); the date is the one the session was first
seen on in this process.

The prompt is two parts (harness9.request.SystemPart): the stable text, then the
session state (the date). The context policy adds the pins and the kept instructions after
them and builds the request (``ContextPolicy.prepare``). Where the provider caches only at
the client's breakpoints (Claude), the breakpoint goes at the end of the stable part
(harness9.provider.caching), so the tools and the rest of the prompt stay one cached
prefix across days and sessions; nothing that varies sits before that breakpoint.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path

from harness9.prompts import prompt
from harness9.request import PART_PROMPT, PART_SEPARATOR, PART_STATE, SystemPart, system_message
from harness9.schema import Message
from harness9.store.session import Session

AGENTS_FILE = "AGENTS.md"
# AGENTS.md is user text placed in every request: cap it so a huge file cannot eat the window.
AGENTS_MAX_BYTES = 32 * 1024
# The session state part's heading; in the whole text, it follows the stable part thus.
STATE_HEADER = "# Session state\n"
STATE_MARK = PART_SEPARATOR + STATE_HEADER

BASE_PROMPT = prompt("agent")


@dataclass(slots=True)
class PromptBuilder:
    workdir: Path
    base_prompt: str = BASE_PROMPT
    _dates: dict[str, str] = field(default_factory=dict)

    def parts(self, session: Session | None) -> tuple[SystemPart, SystemPart]:
        """The stable part (prompt, working directory, AGENTS.md), then the state."""
        lines = [self.base_prompt, "", f"Working directory: {self.workdir}"]
        agents = self._agents_md()
        if agents:
            lines += ["", f"Project instructions from {AGENTS_FILE}:", agents]
        state = f"{STATE_HEADER}Today's date: {self.session_date(session)}"
        return SystemPart(PART_PROMPT, "\n".join(lines)), SystemPart(PART_STATE, state)

    def build(self, session: Session | None) -> Message:
        """The system message the parts make (before any pin or kept instruction)."""
        return system_message(self.parts(session))

    def session_date(self, session: Session | None) -> str:
        """The date the prompt shows: fixed for a session once it has been built."""
        today = _dt.date.today().isoformat()
        if session is None:
            return today
        return self._dates.setdefault(session.session_id, today)

    def _agents_md(self) -> str:
        path = self.workdir / AGENTS_FILE
        try:
            with path.open("rb") as fh:
                data = fh.read(AGENTS_MAX_BYTES + 1)
        except OSError:
            return ""
        text = data[:AGENTS_MAX_BYTES].decode("utf-8", "replace").strip()
        if len(data) > AGENTS_MAX_BYTES:
            text += f"\n[{AGENTS_FILE} truncated at {AGENTS_MAX_BYTES} bytes]"
        return text
