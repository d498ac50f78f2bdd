"""The context package's prompts, kept as text files beside this module and reviewed as text.

Each ``<name>.txt`` holds one prompt; its final newline is the file's, not the prompt's.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def prompt(name: str) -> str:
    """The text of ``<name>.txt`` in this package (without the file's final newline)."""
    text = files(__package__).joinpath(f"{name}.txt").read_text(encoding="utf-8")
    return text.removesuffix("\n")
