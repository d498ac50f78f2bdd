"""The system prompt, rebuilt every turn and never stored (seed §8.3).

Rebuilding it means an edited AGENTS.md or a changed todo list reaches the
model on the next turn, and old sessions never lock in an old prompt.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path

from harness9.schema import ROLE_SYSTEM, Message
from harness9.store.session import Session

AGENTS_FILE = "AGENTS.md"
# AGENTS.md is user text placed in every request: cap it so a huge file cannot eat the window.
AGENTS_MAX_BYTES = 32 * 1024

BASE_PROMPT = """\
You are harness9, a careful software agent working in a terminal.
You can call tools to run shell commands, read and write files in the working
directory, and keep a todo list. Work step by step until the user's task is
done, then answer briefly with what you did. Prefer reading files over guessing.
Paths are relative to the working directory; you cannot reach outside it.
When a tool result starts with "📂 [offload:<id>]", the full output was stored
aside: call offload_recall with that id if you need more than the summary."""

_STATUS_MARK = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


@dataclass(slots=True)
class PromptBuilder:
    workdir: Path
    base_prompt: str = BASE_PROMPT

    def build(self, session: Session | None) -> Message:
        parts = [self.base_prompt, "", f"Working directory: {self.workdir}"]
        parts.append(f"Today's date: {_dt.date.today().isoformat()}")
        agents = self._agents_md()
        if agents:
            parts += ["", f"Project instructions from {AGENTS_FILE}:", agents]
        todos = session.get_todos() if session is not None else None
        if todos:
            parts += ["", "Current todo list:"]
            parts += [f"{_STATUS_MARK.get(t.status, '[ ]')} {t.content}" for t in todos]
        return Message(ROLE_SYSTEM, "\n".join(parts))

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
