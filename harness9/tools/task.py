"""``task``: hand a self-contained job to a sub-agent with a fresh context.

The tool only parses and checks its arguments; running the sub-agent (its own
session, context policy and bounds) is the engine's business
(harness9.engine.subagents), reached through the ``SubAgentRunner`` seam, so the
tools layer never imports the engine.
"""

from __future__ import annotations

from typing import Any, Protocol

from harness9.schema import ToolDefinition
from harness9.tools.base import ToolContext, ToolError, ToolResult

TASK_TOOL = "task"
DESCRIPTION_MAX = 80  # characters of the short description shown on the screen


class SubAgentRunner(Protocol):
    def run_task(self, prompt: str, description: str, ctx: ToolContext) -> ToolResult:
        """Run a sub-agent on ``prompt`` to its final reply (or its bound); the reply."""
        ...

    def stopped_result(self, call_id: str) -> str:
        """The result of call ``call_id`` when its turn is stopped before it ends."""
        ...


class TaskTool:
    name = TASK_TOOL

    def __init__(self, runner: SubAgentRunner) -> None:
        self.runner = runner

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            sub_agent=True,
            description=(
                "Hand a self-contained job (explore code, search logs, run and read tests) "
                "to a sub-agent with a fresh context and the same tools and working "
                "directory; you get back only its final answer, not the files it read. "
                "The sub-agent sees nothing of this conversation: put everything it needs "
                "into the prompt. Several task calls in one reply run at the same time."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "prompt": {
                        "type": "string",
                        "description": "The whole job: what to find or do, where, and what "
                        "the answer must contain.",
                    },
                    "description": {
                        "type": "string",
                        "description": "A short label (3-6 words) shown while it runs.",
                    },
                },
                "required": ["prompt"],
            },
        )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        prompt = args["prompt"].strip()
        if not prompt:
            raise ToolError("task needs a non-empty prompt: the whole job for the sub-agent")
        return self.runner.run_task(prompt, short_description(args, prompt), ctx)

    def stopped_result(self, call_id: str) -> str:
        """What call ``call_id`` had when the user stopped the turn (Ctrl-C)."""
        return self.runner.stopped_result(call_id)


def short_description(args: dict[str, Any], prompt: str) -> str:
    """The call's description on one line (from the prompt when it has none)."""
    raw = args.get("description")
    text = raw if isinstance(raw, str) and raw.strip() else prompt
    line = " ".join(text.split())
    return line if len(line) <= DESCRIPTION_MAX else line[: DESCRIPTION_MAX - 1] + "…"
