"""history_search: full-text search over this session's whole stored log.

The log keeps every message, folded or not, so this finds what compaction took out
of the context (ARCHITECTURE decision 6). Each hit carries a recall handle for
``offload_recall``; hits still in the current context are marked, so the model does
not page back what it already has. Offloaded outputs are searched too: their full
text lives on disk, not in the log.
"""

from __future__ import annotations

from typing import Any

from harness9.context.offload import OffloadStore
from harness9.context.recall import message_handle
from harness9.errors import HarnessError
from harness9.schema import ROLE_TOOL
from harness9.store.search import plain_snippet
from harness9.store.session import CheckpointedSession
from harness9.tools.base import ToolContext, ToolResult

HEADER = "[history_search]"
MAX_HITS = 8


class HistorySearchTool:
    name = "history_search"
    # Hits are short snippets; its output must stay inline.
    offload_exempt = True

    def __init__(self, store: OffloadStore | None = None) -> None:
        self.store = store

    def definition(self) -> Any:
        from harness9.schema import ToolDefinition

        return ToolDefinition(
            name=self.name,
            description=(
                "Search everything said and every tool result in this session, including "
                "what compaction folded out of the context. All words must match. Returns "
                "snippets with handles; pass a handle to offload_recall for the full text."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "words to find, e.g. a path"}
                },
                "required": ["query"],
            },
        )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            return ToolResult.error("history_search: 'query' must be a non-empty string")
        session = ctx.session
        if not isinstance(session, CheckpointedSession):
            return ToolResult.error("history_search needs a stored session")
        try:
            hits = session.search(query, limit=MAX_HITS * 2)
        except HarnessError as exc:
            return ToolResult.error(f"history_search: {exc}")
        cp = session.latest_checkpoint()
        floor = cp.last_message_id if cp is not None else 0
        stubbed = cp.rewrites if cp is not None else {}
        lines: list[str] = []
        for hit in hits:
            record = session.get_record(hit.message_id)
            if record is None or record.message.content.startswith(HEADER):
                continue  # an earlier search's own output
            if hit.message_id in stubbed or hit.message_id <= floor:
                where = "folded" if hit.message_id <= floor else "stubbed"
            else:
                where = "in context"
            role = "tool result" if record.message.role == ROLE_TOOL else record.message.role
            snippet = plain_snippet(hit.snippet)
            lines.append(f"{message_handle(hit.message_id)} [{role}, {where}] {snippet}")
            if len(lines) >= MAX_HITS:
                break
        if self.store is not None and len(lines) < MAX_HITS:
            for oid, line in self.store.search(ctx.session_id, query, limit=MAX_HITS - len(lines)):
                lines.append(f"{oid} [offloaded output] {line}")
        if not lines:
            return ToolResult(f"{HEADER} no match for {query.strip()!r} in this session")
        head = (
            f"{HEADER} {len(lines)} hits for {query.strip()!r} "
            f'(offload_recall(id="<handle>") pages one in full):'
        )
        return ToolResult("\n".join([head, *lines]))


__all__ = ["HEADER", "HistorySearchTool"]
