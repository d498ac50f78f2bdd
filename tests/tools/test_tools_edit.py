"""edit_file on real files: exact replacement, its refusals, confinement, approval and diff."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness9.config import db_path
from harness9.store import Manager
from harness9.tools import ToolContext
from harness9.tools.base import Approval, Declined
from harness9.ui.approval import TerminalApprover
from tests.support.cli import answering
from tests.support.tools import make_ctx, run_tool
from tests.ui.test_terminal import chat_loop, lines_of, terminal

APP = "def main():\n    x = 1\n    y = 2\n    return x + y\n"


@pytest.fixture
def ctx(workdir: Path) -> ToolContext:
    # --yes: these tests are about editing; approvals have their own tests below.
    return make_ctx(workdir, assume_yes=True)


@pytest.fixture
def app(workdir: Path) -> Path:
    path = workdir / "app.py"
    path.write_text(APP)
    return path


def edit(ctx: ToolContext, path: str, old: str, new: str, **extra: object):
    return run_tool(ctx, "edit_file", path=path, old_string=old, new_string=new, **extra)


# --- replacing -------------------------------------------------------------------------------


def test_a_unique_old_string_is_replaced_and_the_rest_of_the_file_kept(
    ctx: ToolContext, app: Path
) -> None:
    result = edit(ctx, "app.py", "    y = 2\n", "    y = 3\n")
    assert not result.is_error
    assert app.read_text() == "def main():\n    x = 1\n    y = 3\n    return x + y\n"
    assert result.content == "edited app.py: replaced line 3 (4 lines now)"
    assert result.metadata == {"path": "app.py", "replacements": 1, "line": 3, "lines": 4}


def test_a_missing_old_string_is_refused_and_the_file_left_as_it_was(
    ctx: ToolContext, app: Path
) -> None:
    result = edit(ctx, "app.py", "z = 9", "z = 10")
    assert result.is_error
    assert result.content == (
        "error: old_string was not found in app.py; read the file again and copy the text exactly"
    )
    assert app.read_text() == APP


def test_a_missing_old_string_whose_first_line_exists_says_where_it_differs(
    ctx: ToolContext, app: Path
) -> None:
    result = edit(ctx, "app.py", "    y = 2\n  return x + y\n", "    y = 3\n")
    assert result.content == (
        "error: old_string was not found in app.py; its first line occurs at line 3 but the "
        "rest differs (whitespace, indentation or content): read the file again and copy "
        "the text exactly"
    )
    assert app.read_text() == APP


def test_an_old_string_copied_with_read_files_line_numbers_is_refused_saying_so(
    ctx: ToolContext, app: Path
) -> None:
    result = edit(ctx, "app.py", "     3\t    y = 2", "     3\t    y = 3")
    assert result.content == (
        "error: old_string was not found in app.py; it carries read_file's line-number "
        "prefixes, which are not in the file"
    )
    assert app.read_text() == APP


def test_a_repeated_old_string_is_refused_naming_where_it_occurs(
    ctx: ToolContext, workdir: Path
) -> None:
    (workdir / "cfg.txt").write_text("debug = false\nport = 1\ndebug = false\n\ndebug = false\n")
    result = edit(ctx, "cfg.txt", "debug = false", "debug = true")
    assert result.content == (
        "error: old_string occurs 3 times in cfg.txt (lines 1, 3, 5); include more "
        "surrounding lines to make it unique, or set replace_all to replace every one"
    )
    assert (workdir / "cfg.txt").read_text().count("debug = false") == 3


def test_replace_all_replaces_every_occurrence(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "cfg.txt").write_text("port = 1\ndebug = false\nx\ndebug = false\n")
    result = edit(ctx, "cfg.txt", "debug = false", "debug = true", replace_all=True)
    assert result.content == "edited cfg.txt: replaced 2 places, first at line 2 (4 lines now)"
    assert (workdir / "cfg.txt").read_text() == "port = 1\ndebug = true\nx\ndebug = true\n"


def test_replace_all_of_a_missing_string_is_still_refused(ctx: ToolContext, app: Path) -> None:
    result = edit(ctx, "app.py", "nowhere", "x", replace_all=True)
    assert result.content.startswith("error: old_string was not found in app.py")
    assert app.read_text() == APP


def test_an_empty_old_string_is_refused_pointing_to_write_file(ctx: ToolContext, app: Path) -> None:
    result = edit(ctx, "app.py", "", "new text")
    assert result.content == (
        "error: old_string is empty; to create or overwrite a whole file use write_file"
    )
    assert app.read_text() == APP


def test_identical_strings_are_refused_as_changing_nothing(ctx: ToolContext, app: Path) -> None:
    result = edit(ctx, "app.py", "x = 1", "x = 1")
    assert result.content == ("error: old_string and new_string are the same; nothing would change")


def test_new_string_may_be_empty_to_delete_text(ctx: ToolContext, app: Path) -> None:
    edit(ctx, "app.py", "    y = 2\n", "")
    assert app.read_text() == "def main():\n    x = 1\n    return x + y\n"


def test_a_file_with_windows_line_endings_keeps_them(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    result = edit(ctx, "w.txt", "one\ntwo\n", "one\n2\n")
    assert not result.is_error, result.content
    assert (workdir / "w.txt").read_bytes() == b"one\r\n2\r\nthree\r\n"


def test_utf8_text_is_replaced_exactly(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "t.md").write_text("標題\nnaïve café\n", encoding="utf-8")
    edit(ctx, "t.md", "naïve", "naive")
    assert (workdir / "t.md").read_text(encoding="utf-8") == "標題\nnaive café\n"


def test_an_edit_keeps_the_files_mode(ctx: ToolContext, workdir: Path) -> None:
    script = workdir / "run.sh"
    script.write_text("echo a\n")
    os.chmod(script, 0o750)
    edit(ctx, "run.sh", "echo a", "echo b")
    assert script.read_text() == "echo b\n"
    assert script.stat().st_mode & 0o777 == 0o750


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (None, "error: no such file: f.txt (create it with write_file)"),
        ("dir", "error: f.txt is a directory, not a file"),
        (b"\x00\x01binary", "error: f.txt is a binary file; edit_file only edits text"),
        (b"caf\xe9 latin-1\n", "error: f.txt is not valid UTF-8; edit_file would damage it"),
    ],
)
def test_what_cannot_be_edited_is_refused_saying_why(
    ctx: ToolContext, workdir: Path, setup: object, message: str
) -> None:
    target = workdir / "f.txt"
    if setup == "dir":
        target.mkdir()
    elif isinstance(setup, bytes):
        target.write_bytes(setup)
    result = edit(ctx, "f.txt", "caf", "x")
    assert result.content == message
    if isinstance(setup, bytes):
        assert target.read_bytes() == setup


def test_a_placeholder_of_an_old_argument_is_not_written_as_text(
    ctx: ToolContext, app: Path
) -> None:
    stub = '[stubbed] 1500 tokens of content; offload_recall(id="msg_12") for it'
    result = edit(ctx, "app.py", "    y = 2\n", stub)
    assert result.content.startswith(
        "error: new_string is the placeholder of an earlier call's argument, not text"
    )
    written = run_tool(ctx, "write_file", path="app.py", content=stub)
    assert written.content.startswith(
        "error: content is the placeholder of an earlier call's argument, not the file"
    )
    assert app.read_text() == APP


# --- confinement ---------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("TOP SECRET\n")
    return d.resolve()


def test_an_edit_outside_the_working_directory_is_refused(ctx: ToolContext, outside: Path) -> None:
    for path in ("../outside/secret.txt", str(outside / "secret.txt")):
        result = edit(ctx, path, "TOP", "NOT")
        assert result.content == f"error: path escapes the working directory: {path}"
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"


def test_an_edit_through_a_symlink_pointing_outside_is_refused(
    ctx: ToolContext, workdir: Path, outside: Path
) -> None:
    (workdir / "notes.txt").symlink_to(outside / "secret.txt")
    result = edit(ctx, "notes.txt", "TOP", "NOT")
    assert result.content == "error: path escapes the working directory: notes.txt"
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"


# --- approval and diff -----------------------------------------------------------------------


def test_without_a_terminal_or_yes_an_edit_is_refused_and_nothing_written(
    workdir: Path, app: Path
) -> None:
    result = edit(make_ctx(workdir), "app.py", "x = 1", "x = 5")
    assert result.is_error
    assert result.content == (
        "refused: editing files needs confirmation; re-run harness9 with --yes to allow it"
    )
    assert app.read_text() == APP


def test_the_user_is_asked_with_the_edits_diff(workdir: Path, app: Path) -> None:
    asked: list[Approval] = []

    def confirm(approval: Approval) -> bool:
        asked.append(approval)
        return True

    edit(make_ctx(workdir, confirm=confirm), "app.py", "    y = 2\n", "    y = 3\n")
    [approval] = asked
    assert (approval.tool, approval.subject, approval.question) == (
        "edit_file",
        "app.py",
        "Edit app.py?",
    )
    assert approval.preview == (
        "--- a/app.py\n+++ b/app.py\n@@ -1,4 +1,4 @@\n def main():\n     x = 1\n"
        "-    y = 2\n+    y = 3\n     return x + y\n"
    )


def test_a_declined_edit_leaves_the_file_and_tells_the_model_why(workdir: Path, app: Path) -> None:
    ctx = make_ctx(workdir, confirm=lambda approval: Declined("keep y at 2"))
    result = edit(ctx, "app.py", "y = 2", "y = 3")
    assert result.is_error
    assert result.content == (
        "the user declined this edit; the file was not changed; the user said: keep y at 2"
    )
    assert app.read_text() == APP


def test_a_file_changed_while_the_user_was_asked_is_not_overwritten(
    workdir: Path, app: Path
) -> None:
    def confirm(approval: Approval) -> bool:
        app.write_text(APP + "# added meanwhile\n")
        return True

    result = edit(make_ctx(workdir, confirm=confirm), "app.py", "y = 2", "y = 3")
    assert result.content == (
        "error: app.py changed while the edit waited for approval; read it again"
    )
    assert app.read_text() == APP + "# added meanwhile\n"


@pytest.fixture
def manager(harness9_home: Path):
    harness9_home.mkdir(parents=True, exist_ok=True)
    with Manager(db_path()) as m:
        yield m


def edit_call(call_id: str, path: str, old: str, new: str) -> tuple[str, str, str]:
    args = {"path": path, "old_string": old, "new_string": new}
    return (call_id, "edit_file", json.dumps(args))


def test_in_chat_an_edit_shows_its_diff_and_asks(llm_server, manager, workdir, app) -> None:
    llm_server.reply_tool_calls([edit_call("c1", "app.py", "    y = 2\n", "    y = 3\n")])
    llm_server.reply_text("done")
    console = terminal(width=80)
    approver, questions = answering(console, "y", then="y")
    loop = chat_loop(llm_server, manager, workdir, console, lines_of("bump y"), approver=approver)
    assert loop.run() == 0

    assert questions == ["Edit app.py? [y/N/a] "]
    shown = console.export_text()
    assert "--- a/app.py\n+++ b/app.py" in shown and "-    y = 2\n+    y = 3" in shown
    assert "✓ allowed once: app.py" in shown
    assert app.read_text() == "def main():\n    x = 1\n    y = 3\n    return x + y\n"
    tool_msg = llm_server.requests[1]["messages"][-1]
    assert tool_msg == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "edited app.py: replaced line 3 (4 lines now)",
    }


def test_in_chat_always_for_a_path_covers_its_later_edits(
    llm_server, manager, workdir, app
) -> None:
    write = json.dumps({"path": "app.py", "content": APP.replace("x = 1", "x = 2")})
    llm_server.reply_tool_calls([("c1", "write_file", write)])
    llm_server.reply_tool_calls([edit_call("c2", "app.py", "y = 2", "y = 4")])
    llm_server.reply_text("done")
    console = terminal(width=80)
    approver, questions = answering(console, "a", then="a")
    chat_loop(llm_server, manager, workdir, console, lines_of("go"), approver=approver).run()

    assert questions == ["Overwrite app.py? [y/N/a] "]  # the edit is not asked about again
    shown = console.export_text()
    assert "-    y = 2\n+    y = 4" in shown  # but its diff is still shown
    assert "✓ allowed: app.py (always, this session)" in shown
    assert app.read_text() == "def main():\n    x = 2\n    y = 4\n    return x + y\n"


def test_in_chat_a_declined_edit_reaches_the_model(llm_server, manager, workdir, app) -> None:
    llm_server.reply_tool_calls([edit_call("c1", "app.py", "y = 2", "y = 3")])
    llm_server.reply_text("ok")
    console = terminal()
    approver = TerminalApprover(console, ask=lambda prompt: "n", flush=lambda: None)
    chat_loop(llm_server, manager, workdir, console, lines_of("edit"), approver=approver).run()

    assert app.read_text() == APP
    assert "✗ declined: app.py" in console.export_text()
    tool_msg = llm_server.requests[1]["messages"][-1]
    assert tool_msg["content"] == "the user declined this edit; the file was not changed"
