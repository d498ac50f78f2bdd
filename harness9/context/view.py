"""The model view: what is sent to the model, rebuilt from the log and its latest checkpoint.

The message log is append-only; a compaction is recorded as a checkpoint
(ARCHITECTURE decision 1). The view is ``[system] + [summary of the latest
checkpoint, if it has one] + messages after it``, so a resumed session sees
exactly what the live one saw. The repair is not applied here: the context
policy repairs the messages of each request.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness9.context.compaction import CompactionResult
from harness9.context.recall import folded_entries, render_index, with_handle
from harness9.context.tokens import estimate_tokens
from harness9.schema import ROLE_USER, SUMMARY_PREFIX, Message
from harness9.store.session import Checkpoint, CheckpointedSession, StoredMessage

__all__ = ["ModelView", "build_view", "checkpoint_for", "load_view"]


@dataclass(slots=True)
class ModelView:
    messages: list[Message]  # [system] + [summary message] + messages after the checkpoint
    ids: list[int | None]  # stored id of each message; None for the system and summary messages


def build_view(
    system: Message, records: list[StoredMessage], checkpoint: Checkpoint | None
) -> ModelView:
    """The view from the session's records (all of them, or only those after the checkpoint)."""
    messages: list[Message] = [system]
    ids: list[int | None] = [None]
    last = 0
    rewrites: dict[int, str] = {}
    if checkpoint is not None:
        last = checkpoint.last_message_id
        rewrites = checkpoint.rewrites
        text = summary_text(checkpoint)
        if text:
            messages.append(Message(ROLE_USER, SUMMARY_PREFIX + text))
            ids.append(None)
    for rec in records:
        if rec.id > last:
            msg = rec.message
            stub = rewrites.get(rec.id)
            if stub is not None:
                msg = Message(msg.role, stub, msg.tool_calls, msg.tool_call_id)
            messages.append(msg)
            ids.append(rec.id)
    return ModelView(messages, ids)


def summary_text(checkpoint: Checkpoint) -> str:
    """The summary message's text: the summary, then the recall index, then the state."""
    parts = [p for p in (checkpoint.summary, checkpoint.recall_index, checkpoint.state_note) if p]
    return "\n\n".join(parts)


def load_view(session: CheckpointedSession, system: Message) -> ModelView:
    checkpoint = session.latest_checkpoint()
    after = checkpoint.last_message_id if checkpoint is not None else 0
    return build_view(system, session.get_records(after_id=after), checkpoint)


def kept_rewrites(view: ModelView, result: CompactionResult) -> dict[int, str]:
    """Kept messages whose content the compactor replaced (eviction stubs), by stored id.

    The kept part ``view.messages[cut:]`` is matched to the end of ``result.messages``;
    a repair that changed its shape means no rewrite can be placed safely: none is kept.
    """
    cut = max(1, result.plan.cut) if result.plan.would_compact else 1
    kept = view.messages[cut:]
    out = result.messages[len(result.messages) - len(kept) :] if kept else []
    if len(out) != len(kept):
        return {}
    rewrites: dict[int, str] = {}
    for mid, old, new in zip(view.ids[cut:], kept, out, strict=True):
        if old.role != new.role or old.tool_call_id != new.tool_call_id:
            return {}
        if mid is not None and new.content != old.content:
            rewrites[mid] = with_handle(new.content, mid)
    return rewrites


def checkpoint_for(
    view: ModelView,
    result: CompactionResult,
    previous: Checkpoint | None = None,
    *,
    recall_budget: int = 0,
    state_note: str = "",
) -> Checkpoint | None:
    """The checkpoint recording ``result`` (computed on ``view.messages``); None if it changed nothing.

    It covers up to the largest stored id among the folded messages. When
    only the previous summary was folded (re-summarised), or nothing was folded
    and old tool results were only stubbed, the previous checkpoint's id still
    holds (0 without one). Stubs of kept messages are stored as ``rewrites``,
    each with its recall handle, together with the previous checkpoint's stubs
    still in view, so the view is rebuilt the same way on every request and on
    ``--resume``. With ``recall_budget`` (tokens) the folded tool results are
    added to the recall index carried over from ``previous``.
    """
    plan = result.plan
    if not plan.would_compact:
        return None
    cut = max(1, plan.cut)
    folded = [i for i in view.ids[1:cut] if i is not None]
    if cut > 1 and not folded and previous is None:
        return None  # only an earlier summary was folded, and nothing anchors it
    prev_last = previous.last_message_id if previous is not None else 0
    last = max(folded) if folded else prev_last
    rewrites = {k: v for k, v in (previous.rewrites if previous else {}).items() if k > last}
    rewrites.update(kept_rewrites(view, result))
    if cut <= 1 and not rewrites:
        return None
    if cut <= 1 and previous is not None and rewrites == previous.rewrites:
        return None
    # Nothing folded, or a fallback kept it: the previous summary stands.
    kept_summary = (cut <= 1 or result.kept_previous_summary) and previous is not None
    summary = previous.summary if kept_summary and previous else result.summary or ""
    index = previous.recall_index if previous is not None else ""
    if recall_budget > 0:
        entries = folded_entries(view.messages, view.ids, 1, cut)
        index = render_index(index, entries, recall_budget)
    return Checkpoint(
        last_message_id=last,
        summary=summary,
        strategy=result.strategy,
        tokens_before=plan.tokens_before,
        tokens_after=estimate_tokens(result.messages),
        messages_before=len(view.messages),
        messages_after=len(result.messages),
        recall_index=index,
        rewrites=rewrites,
        state_note=state_note or (previous.state_note if previous is not None else ""),
    )
