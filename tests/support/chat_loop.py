"""The real chat loop (engine, store, approval question) against a scripted model, driven
in-process with a line reader of the test's own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from harness9.config import ContextOptions, Settings
from harness9.engine.setup import build_engine
from harness9.provider import get_model_limits
from harness9.provider.pricing import call_cost
from harness9.store import Manager
from harness9.ui.approval import TerminalApprover
from harness9.ui.repl import ChatIO, ChatLoop


def chat_loop(
    server,  # noqa: ANN001 - any scripted server (tests/support/llm_server.py)
    manager: Manager,
    workdir: Path,
    console: Console,
    read_line: Callable[[str], str],
    *,
    model: str = "openai/gpt-4o-mini",
    approver: TerminalApprover | None = None,
    markdown: bool = True,
) -> ChatLoop:
    """A chat in a new session of ``manager``, asking ``approver`` before each action."""
    settings = Settings(model=model, api_base=server.base_url)
    engine = build_engine(
        settings,
        ContextOptions(),
        manager.new_session(),
        workdir,
        get_model_limits(model).context_tokens,
        confirm=approver,
    )
    io_ = ChatIO(console, console, read_line, interactive=False, markdown=markdown)
    return ChatLoop(engine, manager, io_, model, pricing=call_cost, approver=approver)
