"""What the model is sent: the log after the latest checkpoint, its data rendered as text.

The log is append-only and a compaction is recorded as a checkpoint (ARCHITECTURE decision
1), so the view is ``[system] + [summary message] + messages after it``, and a resumed
session sees exactly what the live one saw. ``build_view`` is where the checkpoint's data
(summary, recall entries, stubs, state, kept instructions) becomes text, ``checkpoint_for``
where a compaction's result becomes that data. The policy repairs each request's messages.
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
    """The view from the session's records (all, or those after the checkpoint); the system
    message carries the session's ``pins`` and the checkpoint's kept instructions."""
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
            messages.append(
                SummaryMessage(ROLE_USER, SUMMARY_PREFIX + text, summary=checkpoint.summary)
            )
            ids.append(None)
    for rec in records:
        if rec.id > last:
            messages.append(shown_message(rec, stubs.get(rec.id)))
            ids.append(rec.id)
    return ModelView(messages, ids)


def shown_message(rec: StoredMessage, stub: Stub | None = None) -> Message:
    """A record as the view shows it: its checkpoint's ``stub``, else the message, carrying
    its link to the offload when its content is an offload's summary."""
    if stub is not None:
        return stub_message(stub, rec.message, rec.id)
    if rec.offload is not None:
        return offloaded_message(rec.message, rec.offload)
    return rec.message


def summary_text(checkpoint: Checkpoint) -> str:
    """The summary message's text: the summary, then the recall index, then the state."""
    recall = render_recall(checkpoint.recall, checkpoint.recall_overflow)
    parts = [p for p in (checkpoint.summary, recall, render_state(checkpoint.state)) if p]
    return "\n\n".join(parts)


def load_view(session: CheckpointedSession, system: Message) -> ModelView:
    checkpoint = session.latest_checkpoint()
    after = checkpoint.last_message_id if checkpoint is not None else 0
    return build_view(system, session.get_records(after_id=after), checkpoint, session.pins())


def kept_stubs(view: ModelView, result: CompactionResult, cut: int) -> dict[int, Stub]:
    """Kept messages the compactor replaced by stubs, by stored id: ``view.messages[cut:]``
    matched to the end of ``result.messages`` (a repair that changed its shape: none). A
    kept message changed other than by a stub is kept as its text (``STUB_VERBATIM``)."""
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
    """The checkpoint recording ``result`` (made on ``view.messages``); None if it changed
    nothing. It covers up to the largest stored id folded (the previous checkpoint's when
    only its summary was re-summarised, or results were only stubbed). Kept messages'
    stubs are stored with the previous ones still in view, so every request and
    ``--resume`` rebuild the same view. ``recall_budget`` and ``instruction_budget``
    (tokens) add the folded tool results and user messages to those ``previous`` kept;
    ``state`` (the todo list now) replaces the previous state unless empty."""
    plan = result.plan
    if not plan.would_compact:
        return None
    cut = max(1, plan.cut)
    folded = [i for i in view.ids[1:cut] if i is not None]
    if cut > 1 and not folded and previous is None:
        return None  # only an earlier summary was folded, and nothing anchors it
    prev = previous or Checkpoint(0, "", "", 0, 0, 0, 0)  # no checkpoint: nothing carried
    last = max(folded, default=prev.last_message_id)
    stubs = {k: v for k, v in prev.stubs.items() if k > last}
    stubs.update(kept_stubs(view, result, cut))
    if cut <= 1 and (not stubs or stubs == prev.stubs):
        return None
    # Nothing folded, or a fallback kept it: the previous summary stands.
    kept_summary = previous is not None and (cut <= 1 or result.kept_previous_summary)
    recall, overflow = [*prev.recall], prev.recall_overflow
    if recall_budget > 0:
        recall += folded_entries(view.messages[1:cut], view.ids[1:cut])
        recall, overflow = budget_recall(recall, overflow, recall_budget)
    return Checkpoint(
        last_message_id=last,
        summary=prev.summary if kept_summary else result.summary or "",
        strategy=result.strategy,
        tokens_before=plan.tokens_before,
        tokens_after=estimate_tokens(result.messages),
        messages_before=len(view.messages),
        messages_after=len(result.messages),
        recall=recall,
        recall_overflow=overflow,
        stubs=stubs,
        state=list(state or prev.state),
        instructions=carry_instructions(
            prev.instructions,
            [m for m, i in zip(view.messages[1:cut], view.ids[1:cut], strict=True) if i],
            instruction_budget,
        ),
    )
