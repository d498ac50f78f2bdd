"""edit_file: an exact replacement in a text file inside the working directory.

A change of a few lines costs the model those lines, not the whole file as ``write_file``
would (in output tokens, and in the context that carries the call). The replacement is
exact: ``old_string`` must occur once (or ``replace_all``), else nothing is written and
the model is told why. The user sees the diff and is asked, as for ``write_file``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness9.schema import ToolDefinition
from harness9.tool_output import is_argument_stub
from harness9.tools.base import Approval, ToolContext, ToolError, ToolResult, refusal
from harness9.tools.files import (
    BINARY_SNIFF_BYTES,
    PATH_PARAMETER,
    atomic_write,
    diff_preview,
)
from harness9.tools.sandbox import display_path, resolve_in_workdir

MAX_EDIT_BYTES = 8 * 1024 * 1024  # a bigger file is not read whole to edit it
MAX_LINES_NAMED = 5  # a refusal names at most this many lines where old_string occurs
DECLINED_EDIT = "the user declined this edit; the file was not changed"
REFUSED_EDIT_NO_TTY = (
    "refused: editing files needs confirmation; re-run harness9 with --yes to allow it"
)
# A line as read_file shows it: its number, a tab, the text. Copied into old_string, it
# never matches the file.
_NUMBERED_LINE = re.compile(r"^ *\d+\t")


class EditFileTool:
    name = "edit_file"

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            description=(
                "Replace exact text in a file inside the working directory: old_string must "
                "match exactly (whitespace included, without read_file's line numbers) and "
                "occur once, unless replace_all. Use it, not write_file, to change part of "
                "a file. The user may be asked to approve the diff."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "path": dict(PATH_PARAMETER),
                    "old_string": {"type": "string", "description": "The text to replace."},
                    "new_string": {"type": "string", "description": "Its replacement."},
                    "replace_all": {
                        "type": "boolean",
                        "description": "Replace every occurrence (default: exactly one).",
                    },
                },
                "required": ["path", "old_string", "new_string"],
            },
        )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raw, old, new = args["path"], args["old_string"], args["new_string"]
        replace_all = bool(args.get("replace_all", False))
        target = resolve_in_workdir(ctx.workdir, raw)
        rel = display_path(ctx.workdir, target)
        if is_argument_stub(new):
            raise ToolError(
                "new_string is the placeholder of an earlier call's argument, not text: "
                "recall the original with offload_recall, or write the text itself"
            )
        before = read_text(target, raw)
        old, new = _line_endings(before, old, new)
        after, count = replaced(before, old, new, rel, replace_all=replace_all)
        if not ctx.assume_yes:
            why = refusal(
                ctx,
                lambda: Approval(
                    "edit_file", rel, f"Edit {rel}?", diff_preview(rel, before, after)
                ),
                refused=REFUSED_EDIT_NO_TTY,
                declined_as=DECLINED_EDIT,
            )
            if why is not None:
                return ToolResult(content=why, is_error=True)
            if read_text(target, raw) != before:  # changed while the user was reading the diff
                raise ToolError(f"{rel} changed while the edit waited for approval; read it again")
        try:
            atomic_write(target, after.encode("utf-8"))
        except OSError as exc:
            raise ToolError(f"could not write {raw}: {exc.strerror or exc}") from exc
        first = line_of(before, before.index(old))
        where = f"line {first}" if count == 1 else f"{count} places, first at line {first}"
        total = after.count("\n") + (1 if after and not after.endswith("\n") else 0)
        return ToolResult(
            content=f"edited {rel}: replaced {where} ({total} lines now)",
            metadata={"path": rel, "replacements": count, "line": first, "lines": total},
        )


def read_text(target: Path, raw: str) -> str:
    """The file's text for an edit; a ToolError says why it cannot be edited."""
    if not target.exists():
        raise ToolError(f"no such file: {raw} (create it with write_file)")
    if target.is_dir():
        raise ToolError(f"{raw} is a directory, not a file")
    if not target.is_file():
        raise ToolError(f"{raw} is not a regular file")
    try:
        if target.stat().st_size > MAX_EDIT_BYTES:
            raise ToolError(
                f"{raw} is over {MAX_EDIT_BYTES // (1024 * 1024)} MB; edit it with bash"
            )
        data = target.read_bytes()
    except OSError as exc:
        raise ToolError(f"could not read {raw}: {exc.strerror or exc}") from exc
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        raise ToolError(f"{raw} is a binary file; edit_file only edits text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        # Replacing undecodable bytes would change more than the edit asked for.
        raise ToolError(f"{raw} is not valid UTF-8; edit_file would damage it") from None


def _line_endings(text: str, old: str, new: str) -> tuple[str, str]:
    """``old`` and ``new`` with the file's Windows line endings, when it has them and they
    do not (models write ``\\n``)."""
    if "\r\n" in text and "\n" in old and "\r\n" not in old and old not in text:
        return old.replace("\n", "\r\n"), new.replace("\r\n", "\n").replace("\n", "\r\n")
    return old, new


def replaced(text: str, old: str, new: str, rel: str, *, replace_all: bool) -> tuple[str, int]:
    """``text`` with ``old`` replaced by ``new`` and the number of replacements; a ToolError
    when ``old`` is empty, missing, the same as ``new``, or (without ``replace_all``) not
    unique."""
    if not old:
        raise ToolError("old_string is empty; to create or overwrite a whole file use write_file")
    if old == new:
        raise ToolError("old_string and new_string are the same; nothing would change")
    count = text.count(old)
    if count == 0:
        raise ToolError(f"old_string was not found in {rel}{_missing_hint(text, old)}")
    if count > 1 and not replace_all:
        lines = occurrence_lines(text, old)
        named = ", ".join(map(str, lines[:MAX_LINES_NAMED])) + (
            ", …" if len(lines) > MAX_LINES_NAMED else ""
        )
        raise ToolError(
            f"old_string occurs {count} times in {rel} (lines {named}); include more "
            "surrounding lines to make it unique, or set replace_all to replace every one"
        )
    return (text.replace(old, new) if replace_all else text.replace(old, new, 1)), count


def _missing_hint(text: str, old: str) -> str:
    """Why an old_string may not match: the commonest slips, or where to look."""
    lines = [x for x in old.splitlines() if x.strip()]
    if lines and all(_NUMBERED_LINE.match(x) for x in lines):
        return "; it carries read_file's line-number prefixes, which are not in the file"
    first = lines[0].strip() if lines else ""
    if first and first in text:
        at = line_of(text, text.index(first))
        return (
            f"; its first line occurs at line {at} but the rest differs (whitespace, "
            "indentation or content): read the file again and copy the text exactly"
        )
    return "; read the file again and copy the text exactly"


def occurrence_lines(text: str, old: str) -> list[int]:
    """The line numbers (1-based) where each non-overlapping occurrence of ``old`` starts."""
    out, at = [], text.find(old)
    while at >= 0:
        out.append(line_of(text, at))
        at = text.find(old, at + len(old))
    return out


def line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1
