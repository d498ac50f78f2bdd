"""offload_recall: page a stored tool result back into the conversation.

Two kinds of handle (see docs/architecture.md, 'Nothing the agent saw becomes unreachable'):
``ofl_<12 hex>`` names an output
offloaded to disk; ``msg_<n>`` names a message of this session's own log, which a
compaction folded or stubbed (its checkpoint's recall index and stubs give them,
and so do ``history_search`` hits): a tool result, or an assistant message whose
calls' long arguments (a ``write_file``'s content) an old call shows as stubs. The
log is never rewritten, so a handle works for the life of the session.
"""

from __future__ import annotations

import json
from typing import Any

from harness9.schema import ToolCall, ToolDefinition
from harness9.store.offloads import RECALL_MAX_CHARS, OffloadError, page_text
from harness9.store.session import CheckpointedSession, handle_message_id
from harness9.tool_output import long_arguments
from harness9.tools.base import ToolContext, ToolResult
from harness9.tools.offload import OffloadStore


class OffloadRecallTool:
    """Returns a page of a stored result (at most ``max_chars``, 8,000 by default; a small
    window's policy asks for less); ``offset`` pages on."""

    name = "offload_recall"

    def __init__(
        self,
        store: OffloadStore | None,
        *,
        handles: bool = True,
        max_chars: int = RECALL_MAX_CHARS,
    ) -> None:
        """``store``: offloaded outputs (None: offload is off); ``handles``: accept msg_<n>;
        ``max_chars``: the largest page (at most ``RECALL_MAX_CHARS``)."""
        self.store = store
        self.handles = handles
        self.max_chars = max(1, min(max_chars, RECALL_MAX_CHARS))

    def definition(self) -> ToolDefinition:
        where = []
        if self.store is not None:
            where.append("an offloaded output (ofl_<id>, from a '📂 [offload:<id>]' marker)")
        if self.handles:
            where.append(
                "a message of this session folded or stubbed by compaction (msg_<n>, from a "
                "stub, the summary's recall index or a history_search hit)"
            )
        return ToolDefinition(
            name=self.name,
            reads=True,
            description=(
                "Recall the full content of a stored tool result: "
                + "; or ".join(where)
                + f". Returns at most {self.max_chars} characters; pass offset to continue "
                "where a truncated recall stopped."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "id": {
                        "type": "string",
                        "description": "the handle, e.g. ofl_0123456789ab or msg_42",
                    },
                    "offset": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "first character to return (default 0)",
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": self.max_chars,
                        "description": f"characters to return (default and max {self.max_chars})",
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
            limit = int(args.get("limit", self.max_chars) or self.max_chars)
        except (TypeError, ValueError):
            return ToolResult.error("offload_recall: offset and limit must be integers")
        limit = min(limit, self.max_chars)
        message_id = handle_message_id(oid) if self.handles else None
        try:
            if message_id is not None:
                text = self._page_message(ctx, message_id, offset, limit)
            elif self.store is None:
                return ToolResult.error(f"offload_recall: no stored result with id {oid!r}")
            else:
                text = self.store.recall(ctx.session_id, oid, offset=offset, limit=limit)
        except OffloadError as exc:
            return ToolResult.error(f"offload_recall: {exc}", offload_id=oid)
        # A bounded page of a stored result: offloading it again would hand the model a
        # marker for the content it just asked for.
        return ToolResult(text, metadata={"offload_id": oid, "offset": offset}, offload=False)

    @staticmethod
    def _page_message(ctx: ToolContext, message_id: int, offset: int, limit: int) -> str:
        session = ctx.session
        record = (
            session.get_record(message_id) if isinstance(session, CheckpointedSession) else None
        )
        if record is None:
            raise OffloadError(f"no message msg_{message_id} in this session")
        msg = record.message
        text = msg.content
        if msg.tool_calls:  # an assistant's calls: show what it asked for
            calls = "\n".join(call_text(c) for c in msg.tool_calls)
            text = f"{text}\n{calls}" if text else calls
        return page_text(text, offset, limit)


def call_text(call: ToolCall) -> str:
    """A call as recall shows it: its name and arguments, the long ones (those an old call
    shows as stubs) as plain text after it, so a recalled file reads as the file."""
    long = long_arguments(call.arguments)
    if not long:
        return f"-> {call.name}({call.arguments})"
    args = json.loads(call.arguments)  # long arguments come only from a JSON object
    short = {k: v for k, v in args.items() if k not in long}
    parts = [f"-> {call.name}({json.dumps(short, ensure_ascii=False)})"]
    for key, value in long.items():
        end = "" if value.endswith("\n") else "\n"
        parts.append(f"--- {key} ---\n{value}{end}--- end of {key} ---")
    return "\n".join(parts)
