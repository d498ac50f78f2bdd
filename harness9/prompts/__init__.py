"""Every prompt harness9 writes for a model, kept as text files beside this module and
reviewed as text: the agent's and the sub-agent's system prompts (``agent``, ``subagent``),
the summariser's (``summarizer_system``, ``structured_compression``, the templates and
``instruction_*``) and the headings of the system message's pins and kept instructions.

Each ``<name>.txt`` holds one prompt; its final newline is the file's, not the prompt's. A
bottom-layer module: it imports nothing from harness9.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def prompt(name: str) -> str:
    """The text of ``<name>.txt`` in this package (without the file's final newline)."""
    text = files(__package__).joinpath(f"{name}.txt").read_text(encoding="utf-8")
    return text.removesuffix("\n")
