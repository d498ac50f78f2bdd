"""read_file and write_file on real files: windows, errors, and confinement to the workdir."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness9.tools import ToolContext
from harness9.tools.files import MAX_READ_BYTES
from tests.support.tools import make_ctx, run_tool


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("TOP SECRET\n")
    return d.resolve()


@pytest.fixture
def ctx(workdir: Path) -> ToolContext:
    # --yes: these tests are about reading and writing; approvals have their own tests.
    return make_ctx(workdir, assume_yes=True)


def write_lines(path: Path, n: int) -> None:
    path.write_text("".join(f"line {i}\n" for i in range(1, n + 1)))


# --- read_file ---------------------------------------------------------------------------


def test_read_returns_whole_file_with_line_numbers(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "a.txt").write_text("alpha\nbeta\n")
    result = run_tool(ctx, "read_file", path="a.txt")
    assert not result.is_error
    assert result.content == "     1\talpha\n     2\tbeta"
    assert result.metadata == {"path": "a.txt", "total_lines": 2, "lines": 2}


def test_read_with_offset_and_limit_returns_that_window_and_says_so(
    ctx: ToolContext, workdir: Path
) -> None:
    write_lines(workdir / "ten.txt", 10)
    result = run_tool(ctx, "read_file", path="ten.txt", offset=3, limit=2)
    assert result.content == "     3\tline 3\n     4\tline 4\n(lines 3–4 of 10)"


def test_read_from_offset_to_end_of_file(ctx: ToolContext, workdir: Path) -> None:
    write_lines(workdir / "ten.txt", 10)
    result = run_tool(ctx, "read_file", path="ten.txt", offset=9)
    assert result.content == "     9\tline 9\n    10\tline 10\n(lines 9–10 of 10)"


def test_read_default_limit_is_2000_lines(ctx: ToolContext, workdir: Path) -> None:
    write_lines(workdir / "big.txt", 2500)
    result = run_tool(ctx, "read_file", path="big.txt")
    assert result.content.endswith("  2000\tline 2000\n(lines 1–2000 of 2500)")


def test_read_offset_past_the_end_is_an_error(ctx: ToolContext, workdir: Path) -> None:
    write_lines(workdir / "ten.txt", 10)
    result = run_tool(ctx, "read_file", path="ten.txt", offset=11)
    assert result.is_error
    assert result.content == "error: offset 11 is past the end of ten.txt (10 lines)"


def test_read_offset_zero_is_an_argument_error(ctx: ToolContext, workdir: Path) -> None:
    write_lines(workdir / "ten.txt", 10)
    result = run_tool(ctx, "read_file", path="ten.txt", offset=0)
    assert result.content == (
        "error: invalid arguments for read_file: offset must be at least 1 (got 0)"
    )


def test_read_missing_file_is_an_error(ctx: ToolContext) -> None:
    result = run_tool(ctx, "read_file", path="nope.txt")
    assert result.is_error
    assert result.content == "error: no such file: nope.txt"


def test_read_directory_is_an_error_saying_so(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "src").mkdir()
    result = run_tool(ctx, "read_file", path="src")
    assert result.is_error
    assert result.content.startswith("error: src is a directory, not a file")


def test_read_binary_file_is_an_error(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    result = run_tool(ctx, "read_file", path="img.png")
    assert result.is_error
    assert result.content == "error: img.png is a binary file; read_file only reads text"


def test_read_empty_file_says_it_is_empty(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "empty.txt").write_text("")
    result = run_tool(ctx, "read_file", path="empty.txt")
    assert not result.is_error
    assert result.content == "(empty.txt is empty)"


def test_read_invalid_utf8_text_is_shown_with_replacement_characters(
    ctx: ToolContext, workdir: Path
) -> None:
    (workdir / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    assert run_tool(ctx, "read_file", path="latin1.txt").content == "     1\tcaf\ufffd"


def test_read_is_capped_in_bytes_and_says_where_to_continue(
    ctx: ToolContext, workdir: Path
) -> None:
    # 2000 lines (the default limit) of 200 bytes would be ~400 KB: the byte cap bites first.
    (workdir / "wide.txt").write_text(
        "".join(f"{i:05d}" + "x" * 195 + "\n" for i in range(1, 5001))
    )
    result = run_tool(ctx, "read_file", path="wide.txt")
    assert len(result.content.encode()) < MAX_READ_BYTES + 200
    last_shown = int(result.content.splitlines()[-2].split("\t")[0])
    assert 1000 < last_shown < 2000
    assert result.content.endswith(
        f"(lines 1–{last_shown} of 5000; output capped at 256 KB, "
        f"continue with offset={last_shown + 1})"
    )
    following = run_tool(ctx, "read_file", path="wide.txt", offset=last_shown + 1, limit=1)
    assert following.content.startswith(f"{last_shown + 1:>6}\t{last_shown + 1:05d}xxx")


def test_read_cuts_an_overlong_line_and_keeps_counting(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "min.js").write_text("a" * 100_000 + "\nnext\n")
    result = run_tool(ctx, "read_file", path="min.js")
    first, second = result.content.split("\n")
    assert first.endswith("a [... line truncated]")
    assert len(first) < 9_000
    assert second == "     2\tnext"


def test_read_accepts_an_absolute_path_inside_the_workdir(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "a.txt").write_text("alpha\n")
    assert run_tool(ctx, "read_file", path=str(workdir / "a.txt")).content == "     1\talpha"


def test_read_dotdot_escape_is_refused(ctx: ToolContext, outside: Path) -> None:
    result = run_tool(ctx, "read_file", path="../outside/secret.txt")
    assert result.is_error
    assert result.content == "error: path escapes the working directory: ../outside/secret.txt"


def test_read_absolute_path_outside_is_refused(ctx: ToolContext, outside: Path) -> None:
    path = str(outside / "secret.txt")
    result = run_tool(ctx, "read_file", path=path)
    assert result.content == f"error: path escapes the working directory: {path}"


def test_read_through_symlinked_file_pointing_outside_is_refused(
    ctx: ToolContext, workdir: Path, outside: Path
) -> None:
    (workdir / "innocent.txt").symlink_to(outside / "secret.txt")
    result = run_tool(ctx, "read_file", path="innocent.txt")
    assert result.is_error
    assert "TOP SECRET" not in result.content
    assert result.content == "error: path escapes the working directory: innocent.txt"


def test_read_through_symlinked_directory_pointing_outside_is_refused(
    ctx: ToolContext, workdir: Path, outside: Path
) -> None:
    (workdir / "docs").symlink_to(outside, target_is_directory=True)
    result = run_tool(ctx, "read_file", path="docs/secret.txt")
    assert result.content == "error: path escapes the working directory: docs/secret.txt"


def test_read_through_symlink_to_etc_is_refused(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "etc").symlink_to("/etc", target_is_directory=True)
    result = run_tool(ctx, "read_file", path="etc/passwd")
    assert result.content == "error: path escapes the working directory: etc/passwd"


def test_read_through_symlink_inside_the_workdir_is_allowed(
    ctx: ToolContext, workdir: Path
) -> None:
    (workdir / "real.txt").write_text("real\n")
    (workdir / "alias.txt").symlink_to(workdir / "real.txt")
    result = run_tool(ctx, "read_file", path="alias.txt")
    assert result.content == "     1\treal"
    assert result.metadata["path"] == "real.txt"


# --- write_file --------------------------------------------------------------------------


def test_write_creates_parent_directories_and_the_content(ctx: ToolContext, workdir: Path) -> None:
    result = run_tool(ctx, "write_file", path="src/pkg/mod.py", content="x = 1\ny = 2\n")
    assert not result.is_error
    assert result.content == "wrote 12 bytes (2 lines) to src/pkg/mod.py"
    assert (workdir / "src/pkg/mod.py").read_text() == "x = 1\ny = 2\n"
    assert result.metadata == {"path": "src/pkg/mod.py", "bytes": 12, "lines": 2}


def test_write_replaces_an_existing_file_and_keeps_its_mode(
    ctx: ToolContext, workdir: Path
) -> None:
    target = workdir / "run.sh"
    target.write_text("old\n")
    target.chmod(0o750)
    run_tool(ctx, "write_file", path="run.sh", content="new\n")
    assert target.read_text() == "new\n"
    assert target.stat().st_mode & 0o777 == 0o750


def test_write_leaves_no_temporary_file_behind(ctx: ToolContext, workdir: Path) -> None:
    run_tool(ctx, "write_file", path="a.txt", content="one")
    run_tool(ctx, "write_file", path="a.txt", content="two")
    assert os.listdir(workdir) == ["a.txt"]
    assert (workdir / "a.txt").read_text() == "two"


def test_write_keeps_utf8_content_exactly(ctx: ToolContext, workdir: Path) -> None:
    result = run_tool(ctx, "write_file", path="zh.txt", content="上下文\r\n")
    assert (workdir / "zh.txt").read_bytes() == "上下文\r\n".encode()
    assert result.metadata["bytes"] == 11


def test_write_to_a_directory_path_is_an_error(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "src").mkdir()
    result = run_tool(ctx, "write_file", path="src", content="x")
    assert result.is_error
    assert result.content == "error: src is a directory; give a file path"


def test_write_under_an_existing_file_is_an_error(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "a.txt").write_text("x")
    result = run_tool(ctx, "write_file", path="a.txt/b.txt", content="y")
    assert result.is_error
    assert result.content.startswith("error: could not write a.txt/b.txt:")


def test_write_dotdot_escape_is_refused_and_writes_nothing(
    ctx: ToolContext, tmp_path: Path
) -> None:
    result = run_tool(ctx, "write_file", path="../escaped.txt", content="x")
    assert result.content == "error: path escapes the working directory: ../escaped.txt"
    assert not (tmp_path / "escaped.txt").exists()


def test_write_absolute_path_outside_is_refused(ctx: ToolContext, outside: Path) -> None:
    path = str(outside / "new.txt")
    result = run_tool(ctx, "write_file", path=path, content="x")
    assert result.content == f"error: path escapes the working directory: {path}"
    assert not (outside / "new.txt").exists()


def test_write_through_symlinked_file_pointing_outside_is_refused(
    ctx: ToolContext, workdir: Path, outside: Path
) -> None:
    (workdir / "notes.txt").symlink_to(outside / "secret.txt")
    result = run_tool(ctx, "write_file", path="notes.txt", content="pwned")
    assert result.content == "error: path escapes the working directory: notes.txt"
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"


def test_write_through_symlinked_directory_pointing_outside_is_refused(
    ctx: ToolContext, workdir: Path, outside: Path
) -> None:
    (workdir / "out").symlink_to(outside, target_is_directory=True)
    result = run_tool(ctx, "write_file", path="out/sub/new.txt", content="x")
    assert result.content == "error: path escapes the working directory: out/sub/new.txt"
    assert not (outside / "sub").exists()


def test_write_through_dangling_symlink_pointing_outside_is_refused(
    ctx: ToolContext, workdir: Path, outside: Path
) -> None:
    (workdir / "later.txt").symlink_to(outside / "not-yet.txt")
    result = run_tool(ctx, "write_file", path="later.txt", content="x")
    assert result.content == "error: path escapes the working directory: later.txt"
    assert not (outside / "not-yet.txt").exists()


def test_write_through_symlink_inside_the_workdir_updates_the_target(
    ctx: ToolContext, workdir: Path
) -> None:
    (workdir / "real.txt").write_text("old\n")
    (workdir / "alias.txt").symlink_to("real.txt")
    result = run_tool(ctx, "write_file", path="alias.txt", content="new\n")
    assert result.metadata["path"] == "real.txt"
    assert (workdir / "real.txt").read_text() == "new\n"
    assert (workdir / "alias.txt").is_symlink()


def test_read_through_a_symlink_loop_is_an_error_result(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "loop").symlink_to("loop")
    result = run_tool(ctx, "read_file", path="loop")
    assert result.is_error
    assert result.content.startswith("error: ")
    assert "loop" in result.content


def test_path_with_a_nul_byte_is_an_error_result(ctx: ToolContext) -> None:
    result = run_tool(ctx, "read_file", path="a\x00b")
    assert result.content == "error: invalid path: it contains a NUL byte"
