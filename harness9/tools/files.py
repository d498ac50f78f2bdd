"""read_file and write_file: text files inside the working directory (edit_file: tools.edit)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from harness9.schema import ToolDefinition
from harness9.tool_output import is_argument_stub
from harness9.tools.base import Approval, ToolContext, ToolError, ToolResult, refusal
from harness9.tools.sandbox import display_path, resolve_in_workdir

DEFAULT_LIMIT = 2000  # lines per read
MAX_READ_BYTES = 256 * 1024  # per read, so one call cannot flood the context
MAX_LINE_BYTES = 8 * 1024  # longer lines (minified files) are cut
BINARY_SNIFF_BYTES = 8 * 1024  # a NUL byte in here marks the file as binary (git's heuristic)
PREVIEW_LINES = 200  # at most this much diff (or new-file head) is offered for approval
PREVIEW_MAX_OLD_BYTES = 2 * 1024 * 1024  # a bigger existing file is not diffed, only named
NEW_FILE_HEAD = 20  # lines of a new file shown before the question

# Both tools take the same path: one inside the working directory (resolve_in_workdir).
PATH_PARAMETER = {"type": "string", "description": "File path, relative to the working directory."}

DECLINED_WRITE = "the user declined this write; the file was not changed"
REFUSED_WRITE_NO_TTY = (
    "refused: writing files needs confirmation; re-run harness9 with --yes to allow it"
)


class ReadFileTool:
    name = "read_file"

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            reads=True,
            description=(
                "Read a UTF-8 text file inside the working directory. Returns the lines "
                "prefixed with their 1-based line numbers. For large files read a window "
                f"with offset and limit (default {DEFAULT_LIMIT} lines, at most "
                f"{MAX_READ_BYTES // 1024} KB per call)."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "path": dict(PATH_PARAMETER),
                    "offset": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "First line to read (1-based). Default 1.",
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "description": f"Maximum number of lines to read. Default {DEFAULT_LIMIT}.",
                    },
                },
                "required": ["path"],
            },
        )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raw = args["path"]
        offset = args.get("offset", 1)
        limit = args.get("limit", DEFAULT_LIMIT)
        target = resolve_in_workdir(ctx.workdir, raw)
        rel = display_path(ctx.workdir, target)
        if not target.exists():
            raise ToolError(f"no such file: {raw}")
        if target.is_dir():
            raise ToolError(f"{raw} is a directory, not a file (list it with bash: ls {rel})")
        if not target.is_file():
            # FIFOs and devices would block or never end.
            raise ToolError(f"{raw} is not a regular file")
        with target.open("rb") as f:
            if b"\0" in f.read(BINARY_SNIFF_BYTES):
                raise ToolError(f"{raw} is a binary file; read_file only reads text")
            f.seek(0)
            return _read_window(f, rel, offset, limit)


def _read_window(f: BinaryIO, rel: str, offset: int, limit: int) -> ToolResult:
    out: list[str] = []
    out_bytes = 0
    capped = False
    last = offset - 1  # last line number included in the output
    total = 0
    for total, (line, cut) in enumerate(_iter_lines(f), start=1):
        if total < offset or total >= offset + limit or capped:
            continue  # still counted, so the trailer can say "of N"
        text = line.rstrip(b"\n").rstrip(b"\r").decode("utf-8", errors="replace")
        if cut:
            text += " [... line truncated]"
        rendered = f"{total:>6}\t{text}"
        size = len(rendered.encode("utf-8")) + 1
        if out and out_bytes + size > MAX_READ_BYTES:
            capped = True
            continue
        out.append(rendered)
        out_bytes += size
        last = total
    meta = {"path": rel, "total_lines": total}
    if total == 0:
        return ToolResult(content=f"({rel} is empty)", metadata=meta)
    if offset > total:
        raise ToolError(f"offset {offset} is past the end of {rel} ({total} lines)")
    body = "\n".join(out)
    if capped:
        body += (
            f"\n(lines {offset}–{last} of {total}; output capped at {MAX_READ_BYTES // 1024} KB, "
            f"continue with offset={last + 1})"
        )
    elif offset > 1 or last < total:
        body += f"\n(lines {offset}–{last} of {total})"
    meta["lines"] = last - offset + 1
    return ToolResult(content=body, metadata=meta)


def _iter_lines(f: BinaryIO) -> Iterator[tuple[bytes, bool]]:
    """Yield ``(line, was_cut)`` without ever holding more than MAX_LINE_BYTES of a line."""
    while True:
        line = f.readline(MAX_LINE_BYTES)
        if not line:
            return
        if line.endswith(b"\n") or len(line) < MAX_LINE_BYTES:
            yield line, False
            continue
        cut = False
        while True:  # skip the rest of an overlong line
            rest = f.readline(MAX_LINE_BYTES)
            if rest not in (b"", b"\n"):
                cut = True
            if not rest or rest.endswith(b"\n"):
                break
        yield line, cut


class WriteFileTool:
    name = "write_file"

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            description=(
                "Create or overwrite a text file inside the working directory with the given "
                "content (the whole file). Missing parent directories are created. "
                "The user may be asked to approve the write after seeing the diff."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "path": dict(PATH_PARAMETER),
                    "content": {"type": "string", "description": "The complete new file content."},
                },
                "required": ["path", "content"],
            },
        )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raw, content = args["path"], args["content"]
        # The resolved path already has every symlink followed, so a link pointing
        # outside was refused here and a link pointing inside is written through.
        target = resolve_in_workdir(ctx.workdir, raw)
        rel = display_path(ctx.workdir, target)
        if target.is_dir():
            raise ToolError(f"{raw} is a directory; give a file path")
        if is_argument_stub(content):
            raise ToolError(
                "content is the placeholder of an earlier call's argument, not the file: "
                "recall the original with offload_recall, or write the text itself"
            )
        data = content.encode("utf-8")
        if not ctx.assume_yes:
            why = refusal(
                ctx,
                lambda: Approval(
                    "write_file",
                    rel,
                    f"{'Overwrite' if target.exists() else 'Create'} {rel}?",
                    write_preview(target, rel, content),
                ),
                refused=REFUSED_WRITE_NO_TTY,
                declined_as=DECLINED_WRITE,
            )
            if why is not None:
                return ToolResult(content=why, is_error=True)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, data)
        except OSError as exc:
            raise ToolError(f"could not write {raw}: {exc.strerror or exc}") from exc
        lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
        return ToolResult(
            content=f"wrote {len(data)} bytes ({lines} line{'' if lines == 1 else 's'}) to {rel}",
            metadata={"path": rel, "bytes": len(data), "lines": lines},
        )


def write_preview(target: Path, rel: str, content: str) -> str:
    """What the user sees before approving a write: a unified diff, or a new file's head."""
    new_lines = content.splitlines(keepends=True)
    if not target.exists():
        head = new_lines[:NEW_FILE_HEAD]
        more = len(new_lines) - len(head)
        n = len(new_lines)
        text = f"new file {rel} ({n} line{'' if n == 1 else 's'})\n" + "".join(head)
        if head and not head[-1].endswith("\n"):
            text += "\n"
        return text + (f"… {more} more line{'' if more == 1 else 's'}\n" if more > 0 else "")
    try:
        size = target.stat().st_size
        if size > PREVIEW_MAX_OLD_BYTES:
            return f"{rel} exists ({size} bytes, too big to diff); it will be replaced\n"
        old = target.read_bytes()
    except OSError as exc:
        return f"{rel} exists but could not be read ({exc.strerror or exc})\n"
    if b"\0" in old[:BINARY_SNIFF_BYTES]:
        return f"{rel} is a binary file ({size} bytes); it will be replaced by text\n"
    return diff_preview(rel, old.decode("utf-8", errors="replace"), content)


def diff_preview(rel: str, old: str, new: str) -> str:
    """The unified diff of ``old`` to ``new`` shown for approval (at most PREVIEW_LINES)."""
    import difflib

    old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    diff = list(difflib.unified_diff(old_lines, new_lines, fromfile=f"a/{rel}", tofile=f"b/{rel}"))
    if not diff:
        return f"{rel} is unchanged\n"
    shown = [line if line.endswith("\n") else line + "\n" for line in diff[:PREVIEW_LINES]]
    more = len(diff) - len(shown)
    return "".join(shown) + (
        f"… {more} more diff line{'' if more == 1 else 's'}\n" if more > 0 else ""
    )


def atomic_write(target: Path, data: bytes) -> None:
    """Write via a sibling temp file and os.replace: readers see the old file or the new one.

    os.replace swaps the directory entry and never follows a symlink at the
    destination, so a link planted after resolution is replaced, not written through.
    """
    existing = target.stat().st_mode & 0o7777 if target.exists() else None
    mode = 0o666 if existing is None else existing  # a new file gets 0o666 minus the umask
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if existing is not None:
            os.chmod(tmp, existing)  # the umask must not narrow an existing file's mode
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
