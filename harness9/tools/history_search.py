"""history_search: full-text search over this session's whole stored log.

The log keeps every message, folded or not, so this finds what compaction took out
of the context (see docs/architecture.md, 'Nothing the agent saw becomes unreachable').
Each hit carries a recall handle for
``offload_recall``; hits still in the current context are marked, so the model does
not page back what it already has. Offloaded outputs are searched too: their full
text lives on disk, not in the log.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from harness9.errors import HarnessError
from harness9.schema import ROLE_TOOL
from harness9.store.offloads import matching_line, query_words
from harness9.store.search import plain_snippet
from harness9.store.session import CheckpointedSession, StoredMessage, message_handle
from harness9.tools.base import ToolContext, ToolResult
from harness9.tools.offload import OffloadStore

HEADER = "[history_search]"
MAX_HITS = 8
SUBAGENT_HITS = 4  # hits from the sub-agents' sessions, after this session's
SCAN_HITS = 200
CALLS_BACK = 64  # rows looked back for the call a result answers (parallel calls' results)


class HistorySearchTool:
    name = "history_search"

    def __init__(
        self,
        store: OffloadStore | None = None,
        *,
        subagents: Callable[[str], Sequence[tuple[str, CheckpointedSession]]] | None = None,
    ) -> None:
        self.store = store
        # The sessions of the sub-agents a session ran, with their descriptions: searched
        # too, since a sub-agent's reads never entered this session's log.
        self.subagents = subagents

    def definition(self) -> Any:
        from harness9.schema import ToolDefinition

        # Not ``reads`` for the smart trigger: a search brings back a few lines, mostly of
        # what a compaction folded, and counting the searches that follow a compaction
        # compacted again sooner (bench_session's probe: one compaction more).
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
            # Over-fetch: earlier searches' outputs quote the same words and are skipped.
            hits = session.search(query, limit=SCAN_HITS)
        except HarnessError as exc:
            return ToolResult.error(f"history_search: {exc}")
        cp = session.latest_checkpoint()
        floor = cp.last_message_id if cp is not None else 0
        stubbed = cp.stubs if cp is not None else {}
        words = query_words(query)
        out_of_view: list[str] = []
        in_view: list[str] = []
        for hit in hits:
            record = session.get_record(hit.message_id)
            if record is None or _search_output(session, record):
                continue  # an earlier search's own output
            msg = record.message
            body = msg.content + "".join(f"\n{c.name} {c.arguments}" for c in msg.tool_calls)
            snippet = matching_line(body, words) or plain_snippet(hit.snippet)
            role = "tool result" if msg.role == ROLE_TOOL else msg.role
            if hit.message_id <= floor or hit.message_id in stubbed:
                where = "folded" if hit.message_id <= floor else "stubbed"
                out_of_view.append(f"{message_handle(hit.message_id)} [{role}, {where}] {snippet}")
            else:
                in_view.append(f"{message_handle(hit.message_id)} [{role}, in context] {snippet}")
            if len(out_of_view) >= MAX_HITS:
                break
        # What the context no longer shows comes first: that is what the search is for.
        lines = (out_of_view + in_view)[:MAX_HITS]
        if self.store is not None and len(lines) < MAX_HITS:
            for oid, line in self.store.search(ctx.session_id, query, limit=MAX_HITS - len(lines)):
                lines.append(f"{oid} [offloaded output] {line}")
        if self.subagents is not None:  # room of their own: this log would fill it first
            lines += self._in_subagents(ctx.session_id, query, words, SUBAGENT_HITS)
        if not lines:
            return ToolResult(
                f"{HEADER} no match for {query.strip()!r} in this session", offload=False
            )
        head = (
            f"{HEADER} {len(lines)} hits for {query.strip()!r} "
            f'(offload_recall(id="<handle>") pages one in full):'
        )
        return ToolResult("\n".join([head, *lines]), offload=False)  # hits, already bounded

    def _in_subagents(self, session_id: str, query: str, words: set[str], room: int) -> list[str]:
        """Hits in the sub-agents' sessions (their text only: offload_recall pages this
        session's own messages)."""
        assert self.subagents is not None
        out: list[str] = []
        for description, child in self.subagents(session_id):
            try:
                hits = child.search(query, limit=room)
            except HarnessError:
                continue
            for hit in hits:
                record = child.get_record(hit.message_id)
                if record is None or _search_output(child, record):
                    continue
                snippet = matching_line(record.message.content, words) or plain_snippet(hit.snippet)
                out.append(f"[sub-agent {description!r}, session {child.session_id}] {snippet}")
                if len(out) >= room:
                    return out
        return out


def _search_output(session: CheckpointedSession, record: StoredMessage) -> bool:
    """A result of a ``history_search`` call: its call's name, read from the assistant
    message before it (the results of one message's calls follow it, one row each)."""
    msg = record.message
    if msg.role != ROLE_TOOL:
        return False
    for mid in range(record.id - 1, max(0, record.id - CALLS_BACK) - 1, -1):
        prev = session.get_record(mid)
        if prev is None or prev.message.role == ROLE_TOOL:
            continue
        calls = prev.message.tool_calls
        return any(c.id == msg.tool_call_id and c.name == HistorySearchTool.name for c in calls)
    return False


__all__ = ["HEADER", "HistorySearchTool"]
