"""Ctrl-C at a tool call: what the model is told of the call it stopped. A call stopped at
its approval question never ran; a command stopped while it ran had printed something."""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness9.config import ContextOptions
from harness9.context.policy import ContextPolicy
from harness9.engine import events as ev
from harness9.engine.engine import INTERRUPTED_STUB, AgentEngine, EngineOptions
from harness9.engine.prompt import PromptBuilder
from harness9.provider import LLMProvider
from harness9.tools import default_registry
from harness9.tools.base import NOT_RUN, Approval


def engine_on(server, session, workdir: Path, on_event, **options) -> AgentEngine:
    provider = LLMProvider("openai/test-model", api_base=server.base_url, backoff_base=0.01)
    return AgentEngine(
        provider,
        default_registry(),
        workdir,
        session=session,
        policy=ContextPolicy(ContextOptions(), provider, 128_000),
        prompt_builder=PromptBuilder(workdir),
        on_event=on_event,
        options=EngineOptions(**options),
    )


def tool_results(manager, session) -> dict[str, str]:
    stored = manager.open_session(session.session_id).get_messages()
    return {m.tool_call_id: m.content for m in stored if m.role == "tool"}


def ctrl_c_at_the_question(approval: Approval) -> bool:
    raise KeyboardInterrupt


def test_ctrl_c_at_the_approval_question_tells_the_model_the_command_never_ran(
    llm_server, manager, workdir
):
    command = "touch made.txt"
    llm_server.reply_tool_calls([("c1", "bash", json.dumps({"command": command}))])
    session = manager.new_session()
    engine = engine_on(llm_server, session, workdir, lambda e: None, confirm=ctrl_c_at_the_question)

    result = engine.run_turn("make a file")

    assert result.interrupted
    assert tool_results(manager, session) == {"c1": NOT_RUN}
    assert not (workdir / "made.txt").exists()


def test_ctrl_c_at_the_approval_question_ends_the_call_on_screen_as_not_run(
    llm_server, manager, workdir
):
    llm_server.reply_tool_calls(
        [("c1", "bash", json.dumps({"command": "true"})), ("c2", "bash", "{}")]
    )
    seen: list[ev.Event] = []
    session = manager.new_session()
    engine = engine_on(llm_server, session, workdir, seen.append, confirm=ctrl_c_at_the_question)

    engine.run_turn("do two things")

    finished = [(e.call.id, e.content, e.is_error) for e in seen if isinstance(e, ev.ToolFinished)]
    assert finished == [("c1", NOT_RUN, True)]
    assert tool_results(manager, session) == {"c1": NOT_RUN, "c2": INTERRUPTED_STUB}


def test_a_command_stopped_by_ctrl_c_leaves_the_model_what_it_had_printed(
    llm_server, manager, workdir
):
    command = "echo compiled 3 of 7; echo compiled 4 of 7; sleep 30"
    llm_server.reply_tool_calls([("c1", "bash", json.dumps({"command": command}))])

    printed: list[str] = []

    def ctrl_c_once_it_printed(event: ev.Event) -> None:
        if isinstance(event, ev.ToolOutput):
            printed.append(event.text)
            if "4 of 7" in "".join(printed):
                raise KeyboardInterrupt

    session = manager.new_session()
    engine = engine_on(llm_server, session, workdir, ctrl_c_once_it_printed, assume_yes=True)

    result = engine.run_turn("build it")

    assert result.interrupted
    [stored] = tool_results(manager, session).values()
    assert re.fullmatch(
        r"compiled 3 of 7\ncompiled 4 of 7\n"
        r"\[interrupted by the user after \ds: the command was stopped\]",
        stored,
    ), stored
