"""What the model is sent: the ``Request`` record, and the log after the latest checkpoint
rendered as its messages.

The log is never rewritten and a compaction is stored as a checkpoint (see
docs/architecture.md, 'Compaction checkpoints'), so a request is
``[system parts] + [summary message] + messages after it`` with the tool definitions and
the reply's budget beside them; ``ContextPolicy.prepare`` (harness9.context.policy) is
the one place that builds it. ``checkpoint_for`` makes a compaction's result the
checkpoint's data; ``build_view`` renders it from stored values only, so every request
between two compactions (and ``--resume``) carries the same bytes (see
docs/architecture.md, 'Cache-stable requests').
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from harness9.context.pipeline import CompactionResult
from harness9.context.prompts import prompt
from harness9.context.stubs import (
    offload_source,
    offloaded_message,
    stub_message,
    stub_of,
    summary_message,
    with_handle,
)
from harness9.schema import (
    ROLE_ASSISTANT,
    ROLE_SYSTEM,
    ROLE_TOOL,
    ROLE_USER,
    TODO_MARKS,
    Message,
    TodoItem,
    ToolDefinition,
)
from harness9.store.holding import HoldingSession
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
    estimate_tool_tokens,
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
# One message may take at most this share of the budget; a longer one (a pasted log,
# most likely) is kept by its head, and history_search finds the rest.
MESSAGE_SHARE = 0.25
INSTRUCTIONS_HEADER = prompt("earlier_instructions")
PINS_HEADER = prompt("pinned_notes")

T = TypeVar("T")

# The system message's parts, in the order sent: the most stable first, so that the cached
# prefix reaches as far as it can. The prompt (instructions, working directory, AGENTS.md)
# changes only when AGENTS.md does; the state (the date) from day to day; the pins by a
# /pin; the kept instructions by a compaction.
PART_PROMPT, PART_STATE, PART_PINS, PART_INSTRUCTIONS = "prompt", "state", "pins", "instructions"
PART_SEPARATOR = "\n\n"


@dataclass(slots=True, frozen=True)
class SystemPart:
    """One part of the system message: its kind (``PART_*``) and its text."""

    kind: str
    text: str


# What the engine gives the policy as the system prompt: its parts, or one message (a test's,
# a program's own), which is one prompt part.
SystemPrompt = Message | Sequence[SystemPart]


def prompt_parts(system: SystemPrompt) -> tuple[SystemPart, ...]:
    if isinstance(system, Message):
        return (SystemPart(PART_PROMPT, system.content),)
    return tuple(system)


def system_message(parts: Sequence[SystemPart]) -> Message:
    """The system message the parts make: their texts joined, empty ones left out."""
    return Message(ROLE_SYSTEM, PART_SEPARATOR.join(p.text for p in parts if p.text))


@dataclass(slots=True)
class Request:
    """What one model call sends, whole: the system message in its parts, the messages as
    sent (``messages[0]`` the system message its parts make, when it has parts), the tool
    definitions and the reply's budget (``max_tokens``; None: the provider's default).
    Built by ``ContextPolicy.prepare``; the provider renders it to its wire form and sends
    it unchanged, nothing beside it. A request of bare messages (a summary's) has no
    parts: its messages carry their own system message."""

    system: tuple[SystemPart, ...]
    messages: list[Message]  # repaired: a valid tool sequence
    tools: list[ToolDefinition]
    max_tokens: int | None = None
    shown_tokens: int = 0  # what the token line shows before the call (the server's count)
    # Bytes / 4 of the messages, plus the tool definitions' estimate: the decisions' unit.
    estimated: int = 0
    # The window it was made for (one learnt since leaves the reply other room).
    window: int = 0

    @property
    def history(self) -> list[Message]:
        """The messages after the system message."""
        return self.messages[1:] if self.system else list(self.messages)

    def estimate(self) -> int:
        """Bytes / 4 of every message sent, plus the tool definitions' estimate."""
        return estimate_tokens(self.messages) + estimate_tool_tokens(self.tools)


@dataclass(slots=True)
class ModelView:
    messages: list[Message]  # [system] + [summary message] + messages after the checkpoint
    ids: list[int | None]  # stored id of each message; None for the system and summary messages


def build_view(
    system: SystemPrompt,
    records: list[StoredMessage],
    checkpoint: Checkpoint | None,
    pins: Sequence[str] = (),
) -> ModelView:
    """The view from the session's records (all, or those after the checkpoint); the system
    message carries the session's ``pins`` and the checkpoint's kept instructions."""
    view = ModelView([with_notes(system, pins, _instructions(checkpoint))], [None])
    last = 0
    stubs: dict[int, Stub] = {}
    if checkpoint is not None:
        last, stubs, text = checkpoint.last_message_id, checkpoint.stubs, summary_text(checkpoint)
        if text:
            view.messages.append(summary_message(checkpoint.summary, text))
            view.ids.append(None)
    for rec in records:
        if rec.id > last:
            view.messages.append(shown_message(rec, stubs.get(rec.id)))
            view.ids.append(rec.id)
    return view


def shown_message(rec: StoredMessage, stub: Stub | None = None) -> Message:
    """A record as the view shows it: as its checkpoint's ``stub``, else as stored (an
    offload's summary carrying its link to the offload)."""
    if stub is not None:
        return stub_message(stub, rec.message, rec.id)
    if rec.offload is not None:
        return offloaded_message(rec.message, rec.offload)
    return rec.message


def load_view(session: CheckpointedSession, system: SystemPrompt) -> ModelView:
    checkpoint = session.latest_checkpoint()
    after = checkpoint.last_message_id if checkpoint is not None else 0
    return build_view(system, session.get_records(after_id=after), checkpoint, session.pins())


def summary_text(checkpoint: Checkpoint) -> str:
    """The summary message's text: the summary, then the recall index, then the state."""
    recall = render_recall(checkpoint.recall, checkpoint.recall_overflow)
    parts = [p for p in (checkpoint.summary, recall, render_state(checkpoint.state)) if p]
    return "\n\n".join(parts)


def _entry_line(entry: RecallEntry) -> str:
    key = f" `{entry.key_argument}`" if entry.key_argument else ""
    return f"- {entry.handle} {entry.tool}{key} ({format_token_count(entry.tokens)} tokens)"


def render_recall(entries: Sequence[RecallEntry], overflow: int) -> str:
    """The recall index: where every folded tool result is (see docs/architecture.md,
    'Nothing the agent saw becomes unreachable'), by
    its handle (``msg_<id>`` in the log, ``ofl_<12 hex>`` offloaded); "" for none."""
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


def render_state(items: Sequence[TodoItem]) -> str:
    """The state section of the summary message; "" without items."""
    if not items:
        return ""
    lines = ["## State at the last compaction", "Todo list:"]
    return "\n".join(lines + [f"{TODO_MARKS.get(t.status, '[ ]')} {t.content}" for t in items])


def render_instructions(messages: Sequence[str]) -> str:
    """The earlier-instructions note ("" for none)."""
    if not messages:
        return ""
    body = "\n\n".join(f"[user message {i}]\n{m}" for i, m in enumerate(messages, 1))
    return f"{INSTRUCTIONS_HEADER}\n\n{body}"


def system_parts(
    system: SystemPrompt, pins: Sequence[str], instructions: Sequence[str]
) -> tuple[SystemPart, ...]:
    """The system prompt's parts (never folded: no strategy can drop what they carry), then
    the pins, then the kept instructions."""
    parts = prompt_parts(system)
    if pins:
        text = PINS_HEADER + "".join(f"\n{i}. {p}" for i, p in enumerate(pins, 1))
        parts += (SystemPart(PART_PINS, text),)
    if instructions:
        parts += (SystemPart(PART_INSTRUCTIONS, render_instructions(instructions)),)
    return parts


def with_notes(system: SystemPrompt, pins: Sequence[str], instructions: Sequence[str]) -> Message:
    """The system message with the pins and the kept instructions."""
    return system_message(system_parts(system, pins, instructions))


def _instructions(checkpoint: Checkpoint | None) -> list[str]:
    return checkpoint.instructions if checkpoint is not None else []


@dataclass(slots=True)
class MeasuredView:
    """A view, its estimate, and the system parts its first message was made of.

    ``tokens`` counts what a request of it carries: the messages' bytes / 4 plus ``fixed``,
    the tool definitions' estimate."""

    view: ModelView
    nbytes: int
    checkpoint: Checkpoint | None
    parts: tuple[SystemPart, ...] = ()
    fixed: int = 0

    @property
    def tokens(self) -> int:
        return self.nbytes // BYTES_PER_TOKEN + self.fixed


class LiveViews:
    """Each session's view between model calls, so a call reads only the rows added since
    (issue 23); ``load`` equals ``load_view`` on the same store.

    The log only grows, but for ``/undo`` popping the newest rows, and a compaction's
    checkpoint replaces the view. So a load reads the latest checkpoint's key (the
    checkpoint, which grows with the session, only when that changed), whether the newest
    row held is still stored, and the rows after it. Messages a locked database holds in
    memory (``HoldingSession``) carry provisional ids: while any are held, nothing is kept.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Each session's view; its system message, a placeholder, is not counted in nbytes.
        self._kept: dict[str, MeasuredView] = {}
        self.rebuilds = 0  # views built from the whole log after the checkpoint
        self.rows_read = 0  # rows read from the store, in all

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._kept.pop(session_id, None)

    def load(
        self, session: CheckpointedSession, system: SystemPrompt, fixed: int = 0
    ) -> MeasuredView:
        """The view the next request starts from (``system`` first), and its size with
        ``fixed`` tokens (the tool definitions) beside it."""
        with self._lock:
            kept = self._kept.pop(session.session_id, None)
        held = isinstance(session, HoldingSession) and bool(session.held)
        if held or kept is None or not self._extend(session, kept):
            kept = self._build(session)
        if not held:
            with self._lock:
                self._kept[session.session_id] = kept
        parts = system_parts(system, session.pins(), _instructions(kept.checkpoint))
        head = system_message(parts)
        view = ModelView([head, *kept.view.messages[1:]], [None, *kept.view.ids[1:]])
        nbytes = message_bytes(head) + kept.nbytes
        return MeasuredView(view, nbytes, kept.checkpoint, parts, fixed)

    def _build(self, session: CheckpointedSession) -> MeasuredView:
        checkpoint = session.latest_checkpoint()
        after = checkpoint.last_message_id if checkpoint is not None else 0
        records = session.get_records(after_id=after)
        self.rebuilds += 1
        self.rows_read += len(records)
        view = build_view(Message("system"), records, checkpoint)
        nbytes = sum(message_bytes(m) for m in view.messages[1:])
        return MeasuredView(view, nbytes, checkpoint)

    def _extend(self, session: CheckpointedSession, kept: MeasuredView) -> bool:
        """Adds the rows stored since ``kept`` was (they carry no stubs of its checkpoint);
        False when it is stale: another checkpoint, or ``/undo`` removed its newest row."""
        cp, newest = kept.checkpoint, kept.view.ids[-1]
        key = (cp.id, cp.last_message_id, cp.created_at) if cp is not None else None
        if key != session.latest_checkpoint_key():
            return False
        if newest is not None and session.get_record(newest) is None:
            return False
        after = newest or (cp.last_message_id if cp is not None else 0)
        records = session.get_records(after_id=after)
        self.rows_read += len(records)
        for rec in records:
            msg = shown_message(rec)
            kept.view.messages.append(msg)
            kept.view.ids.append(rec.id)
            kept.nbytes += message_bytes(msg)
        return True


def kept_stubs(view: ModelView, result: CompactionResult, cut: int) -> dict[int, Stub]:
    """Kept messages the compactor replaced by stubs (a tool result, or a call's long
    arguments), by stored id: ``view.messages[cut:]`` matched to the end of
    ``result.messages`` (a repair that changed its shape: none). A kept message changed
    other than by a stub is kept as its text (``STUB_VERBATIM``)."""
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
            if stub is None or stub.kind == STUB_VERBATIM:
                stub = Stub(STUB_VERBATIM, text=with_handle(new.content, mid))
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
    nothing. It covers up to the largest stored id folded (the previous checkpoint's when
    only its summary was re-summarised, or results were only stubbed), and keeps the stubs
    of ``previous`` still in view, so every request and ``--resume`` rebuild the same view.
    The budgets (tokens) add the folded tool results to the recall index and the folded user
    messages to the kept instructions; ``state`` (the todos now) replaces the old unless empty."""
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


def _newest_fitting(items: Sequence[T], cost: Callable[[T], int], room: int) -> list[T]:
    """The newest ``items`` whose costs sum to at most ``room``, up to the first that does
    not fit, oldest first: what is kept is always the most recent run."""
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
    """The todo list now, for a checkpoint to keep. It never goes into the system prompt
    (each change would break every cached prefix; see docs/architecture.md, 'Cache-stable
    requests'): ``write_todos`` results
    carry it in the conversation, and a compaction that folds them keeps the list."""
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
    """The user messages a new checkpoint keeps verbatim (a summary may be weak, what the
    user asked may not be lost; see docs/architecture.md, 'Instructions outlive
    compaction'): the newest of ``previous`` (the
    last checkpoint's) and of the user's own among ``folded`` that fit ``budget``, each
    capped. ``previous`` was chosen the same way, so carrying it forward equals choosing
    from every folded message of the session."""
    if budget <= 0:
        return []
    cap = max(1, int(budget * MESSAGE_SHARE))
    candidates = [*previous]
    candidates += [
        _capped(m.content, cap)
        for m in folded
        if m.role == ROLE_USER and not m.is_summary and m.content.strip()
    ]
    return _newest_fitting(candidates, lambda text: utf8_len(text) // BYTES_PER_TOKEN, budget)
