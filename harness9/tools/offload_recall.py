"""offload_recall: page an offloaded tool result back into the conversation."""

from __future__ import annotations

from typing import Any

from harness9.context.offload import RECALL_MAX_CHARS, OffloadError, OffloadStore
from harness9.schema import ToolDefinition
from harness9.tools.base import ToolContext, ToolResult


class OffloadRecallTool:
    """Returns up to 8,000 characters of an offloaded result; ``offset`` pages on."""

    name = "offload_recall"
    # Its output is already a bounded page of an offloaded result: offloading it again
    # would hand the model a marker for the content it just asked for.
    offload_exempt = True

    def __init__(self, store: OffloadStore) -> None:
        self.store = store

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            description=(
                "Recall the full content of a tool result that was offloaded to disk. "
                "The id is in the result's '📂 [offload:<id>]' marker. Returns at most "
                f"{RECALL_MAX_CHARS} characters; pass offset to continue where a "
                "truncated recall stopped."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "offload id, e.g. ofl_0123456789ab"},
                    "offset": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "first character to return (default 0)",
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": RECALL_MAX_CHARS,
                        "description": f"characters to return (default and max {RECALL_MAX_CHARS})",
                    },
                },
                "required": ["id"],
            },
        )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if not ctx.session_id:
            return ToolResult.error("offload_recall needs a session context")
        oid = args.get("id")
        if not isinstance(oid, str) or not oid:
            return ToolResult.error("offload_recall: 'id' must be a non-empty string")
        try:
            offset = int(args.get("offset", 0) or 0)
            limit = int(args.get("limit", RECALL_MAX_CHARS) or RECALL_MAX_CHARS)
        except (TypeError, ValueError):
            return ToolResult.error("offload_recall: offset and limit must be integers")
        try:
            text = self.store.recall(ctx.session_id, oid, offset=offset, limit=limit)
        except OffloadError as exc:
            return ToolResult.error(f"offload_recall: {exc}", offload_id=oid)
        return ToolResult(text, metadata={"offload_id": oid, "offset": offset})
