"""The view: what a ``Request`` (harness9.request, built by ``ContextPolicy.prepare``)
carries as its messages: ``[system] + [summary message] + the log after the latest checkpoint``.

``checkpoint_for`` makes a compaction's result a checkpoint's data, and ``build_view``
renders a view from stored values only, so every request between two compactions (and
``--resume``) carries the same bytes (docs/architecture.md, 'Compaction checkpoints',
'Cache-stable requests').
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from harness9.context.pipeline import CompactionResult
from harness9.context.stubs import (
    is_summary,
    offload_source,
    offloaded_message,
    stub_message,
    stub_of,
    summary_message,
    with_handle,
)
from harness9.prompts import prompt
from harness9.request import (
    PART_INSTRUCTIONS,
    PART_PINS,
    SystemPart,
    SystemPrompt,
    prompt_parts,
    system_message,
)
from harness9.schema import (
    ROLE_ASSISTANT,
    ROLE_TOOL,
    ROLE_USER,
    TODO_MARKS,
    Message,
    TodoItem,
)
from harness9.store.session import (
    STUB_VERBATIM,
    Checkpoint,
    CheckpointedSession,
    RecallEntry,
    Session,
    StoredMessage,
    Stub,
    message_handle,
)
from harness9.tokens import (
    BYTES_PER_TOKEN,
    estimate_tokens,
    format_token_count,
    message_bytes,
    utf8_len,
)

_RECALL_INTRO = (
    "Tool results folded out of this context, oldest first. "
    'offload_recall(id="<handle>") pages one back in full; '
    "history_search finds any text of this session."
)
_KEY_FIELDS = ("command", "path", "file", "query", "pattern", "url", "id", "description")
_KEY_CHARS = 80
# Codex's COMPACT_USER_MESSAGE_MAX_TOKENS, and the share of its 272K window that is.
MAX_INSTRUCTION_TOKENS = 20_000
INSTRUCTION_SHARE = 0.075
MESSAGE_SHARE = 0.25  # of that budget per message: a longer one is kept by its head
INSTRUCTIONS_HEADER = prompt("earlier_instructions")
PINS_HEADER = prompt("pinned_notes")

T = TypeVar("T")


@dataclass(slots=True)
class ModelView:
    messages: list[Message]  # [system] + [summary message] + messages after the checkpoint
    ids: list[int | None]  # stored id of each message; None for the system and summary messages


def prefix_digest(view: ModelView, checkpoint_key: object) -> str:
    """A digest of the checkpoint ``view`` starts from and of each stored message in it (id,
    role, content, tool calls): equal only when the log's prefix is the one ``view`` shows."""
    h = hashlib.sha256(repr(checkpoint_key).encode())
    for mid, m in zip(view.ids, view.messages, strict=True):
        if mid is None:
            continue
        calls = [(c.id, c.name, c.arguments) for c in m.tool_calls]
        record = [mid, m.role, m.content, calls, m.tool_call_id]
        h.update(json.dumps(record, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def prefix_of(view: ModelView, last_id: int) -> ModelView | None:
    """``view`` up to the message stored as ``last_id`` (None: it is not in the view)."""
    try:
        end = view.ids.index(last_id) + 1
    except ValueError:
        return None
    return ModelView(view.messages[:end], view.ids[:end])


def build_view(
    system: SystemPrompt,
    records: list[StoredMessage],
    checkpoint: Checkpoint | None,
    pins: Sequence[str] = (),
) -> ModelView:
    """The view of the session's records (all, or those after the checkpoint), the system
    message with the ``pins`` and the checkpoint's kept instructions."""
    view = ModelView([with_notes(system, pins, _instructions(checkpoint))], [None])
    last = 0
    stubs: dict[int, Stub] = {}
    if checkpoint is not None:
        last, stubs, text = checkpoint.last_message_id, checkpoint.stubs, summary_text(checkpoint)
        if text:
            view.messages.append(summary_message(checkpoint.summary, text, checkpoint.facts))
            view.ids.append(None)
    for rec in records:
        if rec.id > last:
            view.messages.append(shown_message(rec, stubs.get(rec.id)))
            view.ids.append(rec.id)
    return view


def shown_message(rec: StoredMessage, stub: Stub | None = None) -> Message:
    """A record as its checkpoint's ``stub``, else as stored (an offload's with its link)."""
    if stub is not None:
        return stub_message(stub, rec.message, rec.id)
    if rec.offload is not None:
        return offloaded_message(rec.message, rec.offload)
    return rec.message


def load_view(session: CheckpointedSession, system: SystemPrompt) -> ModelView:
    return measure_view(session, system).view


def measure_view(
    session: CheckpointedSession, system: SystemPrompt, fixed: int = 0
) -> MeasuredView:
    """The session's view read whole from the store, measured, counting ``fixed``."""
    checkpoint, pins = session.latest_checkpoint(), session.pins()
    view = build_view(system, session.get_records(after_id=_last_id(checkpoint)), checkpoint, pins)
    parts = system_parts(system, pins, _instructions(checkpoint))
    return MeasuredView(view, sum(map(message_bytes, view.messages)), checkpoint, parts, fixed)


def summary_text(checkpoint: Checkpoint) -> str:
    """The summary message's text: the summary, then the recall index, then the state."""
    recall = render_recall(checkpoint.recall, checkpoint.recall_overflow)
    todos = [f"{TODO_MARKS.get(t.status, '[ ]')} {t.content}" for t in checkpoint.state]
    state = "\n".join(["## State at the last compaction", "Todo list:", *todos]) if todos else ""
    return "\n\n".join(p for p in (checkpoint.summary, recall, state) if p)


def _entry_line(entry: RecallEntry) -> str:
    key = f" `{entry.key_argument}`" if entry.key_argument else ""
    return f"- {entry.handle} {entry.tool}{key} ({format_token_count(entry.tokens)} tokens)"


def render_recall(entries: Sequence[RecallEntry], overflow: int) -> str:
    """The recall index: every folded tool result by its handle (``msg_<id>`` in the log,
    ``ofl_<12 hex>`` offloaded); "" for none (docs/architecture.md, 'Nothing the agent saw
    becomes unreachable')."""
    if not entries and not overflow:
        return ""
    parts = ["## Recall index", _RECALL_INTRO]
    if overflow:
        parts.append(
            f"… and {overflow} earlier tool results not listed: "
            "history_search finds them (its hits carry their handles)."
        )
    parts += [_entry_line(e) for e in entries]
    return "\n".join(parts)


def render_instructions(messages: Sequence[str]) -> str:
    if not messages:
        return ""
    body = "\n\n".join(f"[user message {i}]\n{m}" for i, m in enumerate(messages, 1))
    return f"{INSTRUCTIONS_HEADER}\n\n{body}"


def system_parts(
    system: SystemPrompt, pins: Sequence[str], instructions: Sequence[str]
) -> tuple[SystemPart, ...]:
    """The system prompt's parts (never folded), then the pins, then the kept instructions."""
    parts = prompt_parts(system)
    if pins:
        text = PINS_HEADER + "".join(f"\n{i}. {p}" for i, p in enumerate(pins, 1))
        parts += (SystemPart(PART_PINS, text),)
    if instructions:
        parts += (SystemPart(PART_INSTRUCTIONS, render_instructions(instructions)),)
    return parts


def with_notes(system: SystemPrompt, pins: Sequence[str], instructions: Sequence[str]) -> Message:
    return system_message(system_parts(system, pins, instructions))


def _instructions(checkpoint: Checkpoint | None) -> list[str]:
    return checkpoint.instructions if checkpoint is not None else []


def _last_id(checkpoint: Checkpoint | None) -> int:
    return checkpoint.last_message_id if checkpoint is not None else 0


@dataclass(slots=True)
class MeasuredView:
    """A view, the system parts its first message was made of, and the estimate of a request
    of it (``tokens``): the messages' bytes / 4 plus ``fixed``, the tool definitions'."""

    view: ModelView
    nbytes: int
    checkpoint: Checkpoint | None
    parts: tuple[SystemPart, ...] = ()
    fixed: int = 0

    @property
    def tokens(self) -> int:
        return self.nbytes // BYTES_PER_TOKEN + self.fixed


class Views(Protocol):
    """Where the policy gets the view a model call starts from: ``load`` equals
    ``measure_view`` on the same store. The engine's cache (harness9.engine.views) keeps
    each session's view between calls and reads only the rows added since; ``forget``
    drops what it keeps of a session."""

    def load(
        self, session: CheckpointedSession, system: SystemPrompt, fixed: int = 0
    ) -> MeasuredView: ...

    def forget(self, session_id: str) -> None: ...


class FreshViews:
    """``Views`` read whole from the store on every call: nothing kept, nothing to forget."""

    def load(
        self, session: CheckpointedSession, system: SystemPrompt, fixed: int = 0
    ) -> MeasuredView:
        return measure_view(session, system, fixed)

    def forget(self, session_id: str) -> None:
        pass


def kept_stubs(view: ModelView, result: CompactionResult, cut: int) -> dict[int, Stub]:
    """Kept messages (``view.messages[cut:]``, matched to the end of ``result.messages``) the
    compactor changed, by stored id: their stubs, or their text (``STUB_VERBATIM``) when
    changed otherwise; none when a repair changed the shape."""
    kept = view.messages[cut:]
    out = result.messages[len(result.messages) - len(kept) :] if kept else []
    if len(out) != len(kept):
        return {}
    stubs: dict[int, Stub] = {}
    for mid, old, new in zip(view.ids[cut:], kept, out, strict=True):
        if old.role != new.role or old.tool_call_id != new.tool_call_id:
            return {}
        if mid is not None and (new.content != old.content or new.tool_calls != old.tool_calls):
            stub = stub_of(new)
            if stub is None or stub.kind == STUB_VERBATIM:  # an offload names its own handle
                text = new.content if stub and stub.offload_id else with_handle(new.content, mid)
                stub = Stub(STUB_VERBATIM, text=text)
            stubs[mid] = stub
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
    nothing. It covers up to the newest stored message folded (else ``previous``'s) and keeps
    ``previous``'s stubs still in view. The budgets (tokens) size the recall index and the
    kept instructions; ``state`` (the todos now) replaces the old unless empty."""
    plan = result.plan
    if not plan.would_compact:
        return None
    cut = max(1, plan.cut)
    folded = [(m, i) for m, i in zip(view.messages[1:cut], view.ids[1:cut], strict=True) if i]
    if cut > 1 and not folded and previous is None:
        return None  # only an earlier summary was folded, and nothing anchors it
    prev = previous or Checkpoint(0, "", "", 0, 0, 0, 0)  # no checkpoint: nothing carried
    last = max((i for _, i in folded), default=prev.last_message_id)
    stubs = {k: v for k, v in prev.stubs.items() if k > last} | kept_stubs(view, result, cut)
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
            prev.instructions, [m for m, _ in folded], instruction_budget
        ),
        # A new summary's facts as the compaction found them; none without a summary.
        facts=prev.facts if kept_summary else list(result.facts or []),
    )


def _newest_fitting(items: Sequence[T], cost: Callable[[T], int], room: int) -> list[T]:
    """The newest ``items`` up to the first whose cost does not fit ``room``, oldest first."""
    kept: list[T] = []
    for item in reversed(items):
        room -= cost(item)
        if room < 0:
            break
        kept.append(item)
    return kept[::-1]


def key_argument(arguments: str) -> str:
    """The argument that says what a call did (its command, path, query…), on one line."""
    try:
        args = json.loads(arguments) if arguments else {}
    except ValueError:
        args = arguments
    value: object = args
    if isinstance(args, dict):
        value = next((args[k] for k in _KEY_FIELDS if isinstance(args.get(k), str)), None)
        if value is None:
            value = json.dumps(args, ensure_ascii=False) if args else ""
    text = " ".join(str(value).split())
    return text if len(text) <= _KEY_CHARS else text[: _KEY_CHARS - 1] + "…"


def folded_entries(msgs: Sequence[Message], ids: Sequence[int | None]) -> list[RecallEntry]:
    """Index entries for the tool results among ``msgs`` (``ids``: their row ids)."""
    calls: dict[str, tuple[str, str]] = {}
    out: list[RecallEntry] = []
    for m, mid in zip(msgs, ids, strict=True):
        if m.role == ROLE_ASSISTANT:
            for tc in m.tool_calls:
                calls[tc.id] = (tc.name, tc.arguments)
        elif m.role == ROLE_TOOL:
            offload_id, tokens = offload_source(m)
            handle = offload_id or (message_handle(mid) if mid is not None else "")
            if handle:
                name, args = calls.get(m.tool_call_id, ("tool", ""))
                out.append(RecallEntry(handle, name, key_argument(args), tokens))
    return out


def budget_recall(
    listed: Sequence[RecallEntry], overflow: int, budget_tokens: int
) -> tuple[list[RecallEntry], int]:
    """The newest of ``listed`` whose lines fit ``budget_tokens``, and the new overflow
    count (``overflow`` plus those left out)."""
    room = max(0, budget_tokens * BYTES_PER_TOKEN - len(_RECALL_INTRO) - 120)
    kept = _newest_fitting(listed, lambda e: utf8_len(_entry_line(e)) + 1, room)
    return kept, overflow + len(listed) - len(kept)


def state_items(session: Session) -> list[TodoItem]:
    """The todo list now, for a checkpoint to keep: never in the system prompt (each change
    would break every cached prefix), so a compaction folding ``write_todos`` keeps it."""
    return list(session.get_todos() or [])


def instruction_budget(context_window: int) -> int:
    """Tokens the kept user messages may take in a window of ``context_window``."""
    return max(0, min(MAX_INSTRUCTION_TOKENS, int(context_window * INSTRUCTION_SHARE)))


def _capped(text: str, cap: int) -> str:
    """``text``, or its head with a note when it is over ``cap`` tokens."""
    if utf8_len(text) // BYTES_PER_TOKEN <= cap:
        return text
    head = text.encode("utf-8")[: max(0, cap * BYTES_PER_TOKEN - 120)].decode("utf-8", "ignore")
    rest = len(text) - len(head)
    return f"{head} [… {rest} more characters; history_search finds the whole message]"


def carry_instructions(
    previous: Sequence[str], folded: Sequence[Message], budget: int
) -> list[str]:
    """The user messages a new checkpoint keeps verbatim (docs/architecture.md, 'Instructions
    outlive compaction'): the newest of ``previous`` and of the user's among ``folded`` that
    fit ``budget``, each capped. ``previous`` was chosen the same way, so this equals choosing
    from every folded message of the session."""
    if budget <= 0:
        return []
    cap = max(1, int(budget * MESSAGE_SHARE))
    candidates = [*previous]
    candidates += [
        _capped(m.content, cap)
        for m in folded
        if m.role == ROLE_USER and not is_summary(m) and m.content.strip()
    ]
    return _newest_fitting(candidates, lambda text: utf8_len(text) // BYTES_PER_TOKEN, budget)
