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
    if checkpoint is not None:
        last = checkpoint.last_message_id
        if checkpoint.summary:
            messages.append(Message(ROLE_USER, SUMMARY_PREFIX + checkpoint.summary))
            ids.append(None)
    for rec in records:
        if rec.id > last:
            messages.append(rec.message)
            ids.append(rec.id)
    return ModelView(messages, ids)


def load_view(session: CheckpointedSession, system: Message) -> ModelView:
    checkpoint = session.latest_checkpoint()
    after = checkpoint.last_message_id if checkpoint is not None else 0
    return build_view(system, session.get_records(after_id=after), checkpoint)


def checkpoint_for(
    view: ModelView, result: CompactionResult, previous: Checkpoint | None = None
) -> Checkpoint | None:
    """The checkpoint recording ``result`` (computed on ``view.messages``); None if nothing folded.

    It covers up to the largest stored id among the folded messages. When
    only the previous summary was folded (re-summarised), the previous
    checkpoint's id still holds, so pass ``previous``; without it there is
    nothing to anchor the checkpoint to and None is returned.
    """
    plan = result.plan
    if not plan.would_compact or plan.cut <= 1:
        return None
    folded = [i for i in view.ids[1 : plan.cut] if i is not None]
    if folded:
        last = max(folded)
    elif previous is not None:
        last = previous.last_message_id
    else:
        return None
    return Checkpoint(
        last_message_id=last,
        summary=result.summary or "",
        strategy=result.strategy,
        tokens_before=plan.tokens_before,
        tokens_after=estimate_tokens(result.messages),
        messages_before=len(view.messages),
        messages_after=len(result.messages),
    )
