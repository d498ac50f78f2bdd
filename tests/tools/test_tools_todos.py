"""write_todos and read_todos through the registry, persisted with Session.save_todos."""

from __future__ import annotations

from pathlib import Path

from harness9.schema import TodoItem
from tests.support.tools import TodoOnlySession, make_ctx, run_tool


def test_written_todos_are_saved_and_rendered(tmp_path: Path) -> None:
    session = TodoOnlySession()
    todos = [
        {"content": "write tests", "status": "pending"},
        {"content": "fix the bug", "status": "in_progress"},
        {"content": "plan", "status": "completed"},
    ]
    result = run_tool(make_ctx(tmp_path, session=session), "write_todos", todos=todos)
    assert not result.is_error
    assert result.content == "[ ] write tests\n[~] fix the bug\n[x] plan"
    assert session.saved == [
        TodoItem("write tests", "pending"),
        TodoItem("fix the bug", "in_progress"),
        TodoItem("plan", "completed"),
    ]
    assert result.metadata == {"total": 3, "completed": 1, "in_progress": 1}


def test_read_todos_returns_what_was_written(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, session=TodoOnlySession())
    run_tool(
        ctx,
        "write_todos",
        todos=[{"content": "a", "status": "completed"}, {"content": "b", "status": "pending"}],
    )
    assert run_tool(ctx, "read_todos").content == "[x] a\n[ ] b"


def test_read_todos_without_any_says_no_todos(tmp_path: Path) -> None:
    result = run_tool(make_ctx(tmp_path, session=TodoOnlySession()), "read_todos")
    assert not result.is_error
    assert result.content == "no todos"


def test_writing_replaces_the_whole_list(tmp_path: Path) -> None:
    session = TodoOnlySession()
    ctx = make_ctx(tmp_path, session=session)
    run_tool(ctx, "write_todos", todos=[{"content": "old", "status": "pending"}])
    run_tool(ctx, "write_todos", todos=[{"content": "new", "status": "in_progress"}])
    assert session.saved == [TodoItem("new", "in_progress")]


def test_writing_an_empty_list_clears_the_todos(tmp_path: Path) -> None:
    session = TodoOnlySession()
    ctx = make_ctx(tmp_path, session=session)
    run_tool(ctx, "write_todos", todos=[{"content": "a", "status": "pending"}])
    result = run_tool(ctx, "write_todos", todos=[])
    assert result.content == "no todos"
    assert session.saved == []
    assert run_tool(ctx, "read_todos").content == "no todos"


def test_unknown_status_is_an_error_and_saves_nothing(tmp_path: Path) -> None:
    session = TodoOnlySession()
    result = run_tool(
        make_ctx(tmp_path, session=session),
        "write_todos",
        todos=[{"content": "a", "status": "pending"}, {"content": "b", "status": "done"}],
    )
    assert result.is_error
    assert result.content == (
        "error: invalid arguments for write_todos: todos[1].status must be one of: "
        "pending, in_progress, completed (got 'done')"
    )
    assert session.save_calls == 0


def test_blank_content_is_an_error_and_saves_nothing(tmp_path: Path) -> None:
    session = TodoOnlySession()
    result = run_tool(
        make_ctx(tmp_path, session=session),
        "write_todos",
        todos=[{"content": "a", "status": "pending"}, {"content": "  ", "status": "pending"}],
    )
    assert result.content == "error: todo 2 has empty content"
    assert session.save_calls == 0


def test_todos_without_a_session_are_an_error(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, session=None)
    expected = "error: todos are not available: this run has no session"
    assert run_tool(ctx, "read_todos").content == expected
    result = run_tool(ctx, "write_todos", todos=[{"content": "a", "status": "pending"}])
    assert result.is_error
    assert result.content == expected
