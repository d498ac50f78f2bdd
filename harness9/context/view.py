"""The model view: what is sent to the model, rebuilt from the log and its latest checkpoint.

The message log is append-only; a compaction is recorded as a checkpoint
(ARCHITECTURE decision 1). The view is ``[system] + [summary of the latest
checkpoint, if it has one] + messages after it``, so a resumed session sees
exactly what the live one saw. The checkpoint is data (its summary prose, recall
entries, stubs and state items); this module is where it becomes text, and
``checkpoint_for`` is where a compaction's result becomes that data again. The repair
is not applied here: the context policy repairs the messages of each request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness9.context.compaction import CompactionResult
from harness9.context.instructions import carry_instructions, with_notes
from harness9.context.recall import (
    SummaryMessage,
    budget_recall,
    folded_entries,
    render_recall,
    render_state,
)
from harness9.context.stubs import StubMessage, offloaded_message, stub_message, with_handle
from harness9.context.tokens import estimate_tokens
from harness9.schema import ROLE_USER, SUMMARY_PREFIX, Message, TodoItem
from harness9.store.session import (
    STUB_VERBATIM,
    Checkpoint,
    CheckpointedSession,
    StoredMessage,
    Stub,
)

__all__ = ["ModelView", "build_view", "checkpoint_for", "load_view"]


@dataclass(slots=True)
class ModelView:
    messages: list[Message]  # [system] + [summary message] + messages after the checkpoint
    ids: list[int | None]  # stored id of each message; None for the system and summary messages


def build_view(
    system: Message,
    records: list[StoredMessage],
    checkpoint: Checkpoint | None,
    pins: Sequence[str] = (),
) -> ModelView:
    """The view from the session's records (all of them, or only those after the checkpoint).

    The system message carries the session's ``pins`` and the checkpoint's earlier
    instructions (harness9.context.instructions): never folded, never lost.
    """
    kept = checkpoint.instructions if checkpoint is not None else []
    messages: list[Message] = [with_notes(system, pins, kept)]
    ids: list[int | None] = [None]
    last = 0
    stubs: dict[int, Stub] = {}
    if checkpoint is not None:
        last = checkpoint.last_message_id
        stubs = checkpoint.stubs
        text = summary_text(checkpoint)
        if text:
            summary = SummaryMessage(ROLE_USER, SUMMARY_PREFIX + text, summary=checkpoint.summary)
            messages.append(summary)
            ids.append(None)
    for rec in records:
        if rec.id > last:
            msg = rec.message
            stub = stubs.get(rec.id)
            if stub is not None:
                msg = stub_message(stub, msg, rec.id)
            elif rec.offload is not None:
                msg = offloaded_message(msg, rec.offload)
            messages.append(msg)
            ids.append(rec.id)
    return ModelView(messages, ids)


def summary_text(checkpoint: Checkpoint) -> str:
    """The summary message's text: the summary, then the recall index, then the state."""
    recall = render_recall(checkpoint.recall, checkpoint.recall_overflow)
    parts = [p for p in (checkpoint.summary, recall, render_state(checkpoint.state)) if p]
    return "\n\n".join(parts)


def load_view(session: CheckpointedSession, system: Message) -> ModelView:
    checkpoint = session.latest_checkpoint()
    after = checkpoint.last_message_id if checkpoint is not None else 0
    return build_view(system, session.get_records(after_id=after), checkpoint, session.pins())


def kept_stubs(view: ModelView, result: CompactionResult) -> dict[int, Stub]:
    """Kept messages the compactor replaced by stubs, by stored id.

    The kept part ``view.messages[cut:]`` is matched to the end of ``result.messages``;
    a repair that changed its shape means no stub can be placed safely: none is kept.
    A kept message changed other than by a stub is kept as its text (``STUB_VERBATIM``).
    """
    cut = max(1, result.plan.cut) if result.plan.would_compact else 1
    kept = view.messages[cut:]
    out = result.messages[len(result.messages) - len(kept) :] if kept else []
    if len(out) != len(kept):
        return {}
    stubs: dict[int, Stub] = {}
    for mid, old, new in zip(view.ids[cut:], kept, out, strict=True):
        if old.role != new.role or old.tool_call_id != new.tool_call_id:
            return {}
        if mid is not None and new.content != old.content:
            if isinstance(new, StubMessage) and new.stub.kind != STUB_VERBATIM:
                stubs[mid] = new.stub
            else:
                stubs[mid] = Stub(STUB_VERBATIM, text=with_handle(new.content, mid))
    return stubs


def checkpoint_for(
    view: ModelView,
    result: CompactionResult,
    previous: Checkpoint | None = None,
    *,
    recall_budget: int = 0,
    state: list[TodoItem] | None = None,
    instruction_budget: int = 0,
) -> Checkpoint | None:
    """The checkpoint recording ``result`` (computed on ``view.messages``); None if it changed nothing.

    It covers up to the largest stored id among the folded messages. When
    only the previous summary was folded (re-summarised), or nothing was folded
    and old tool results were only stubbed, the previous checkpoint's id still
    holds (0 without one). Stubs of kept messages are stored as data, together with
    the previous checkpoint's stubs still in view, so the view is rebuilt the same way
    on every request and on ``--resume``. With ``recall_budget`` (tokens) the folded
    tool results are added to the recall entries carried over from ``previous``. With
    ``instruction_budget`` (tokens) the folded user messages are kept verbatim, added
    to those ``previous`` kept. ``state`` (the todo list now) replaces the previous
    state; None or empty keeps it.
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
    stubs = {k: v for k, v in (previous.stubs if previous else {}).items() if k > last}
    stubs.update(kept_stubs(view, result))
    if cut <= 1 and not stubs:
        return None
    if cut <= 1 and previous is not None and stubs == previous.stubs:
        return None
    # Nothing folded, or a fallback kept it: the previous summary stands.
    kept_summary = (cut <= 1 or result.kept_previous_summary) and previous is not None
    summary = previous.summary if kept_summary and previous else result.summary or ""
    recall = list(previous.recall) if previous is not None else []
    overflow = previous.recall_overflow if previous is not None else 0
    if recall_budget > 0:
        recall += folded_entries(view.messages, view.ids, 1, cut)
        if recall or overflow:
            recall, overflow = budget_recall(recall, overflow, recall_budget)
    return Checkpoint(
        last_message_id=last,
        summary=summary,
        strategy=result.strategy,
        tokens_before=plan.tokens_before,
        tokens_after=estimate_tokens(result.messages),
        messages_before=len(view.messages),
        messages_after=len(result.messages),
        recall=recall,
        recall_overflow=overflow,
        stubs=stubs,
        state=list(state or (previous.state if previous is not None else [])),
        instructions=carry_instructions(
            previous.instructions if previous is not None else [],
            [m for m, i in zip(view.messages[1:cut], view.ids[1:cut], strict=True) if i],
            instruction_budget,
        ),
    )
