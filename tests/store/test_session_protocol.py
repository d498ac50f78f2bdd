"""The session protocols are no wider than what their callers use.

``CheckpointedSession`` is what the context (view, policy) and the tools are typed
against; a method only the store itself, or a single other caller, needs belongs to a
narrower protocol (``PinBoard``, ``RememberedSettings``) or to ``StoredSession``.
"""

from __future__ import annotations

import re
from pathlib import Path

import harness9
from harness9.store.backend import StoredSession
from harness9.store.holding import HoldingSession
from harness9.store.memory import MemorySession
from harness9.store.session import (
    ChatSession,
    CheckpointedSession,
    PinBoard,
    RememberedSettings,
    Session,
    SessionSettings,
)

PACKAGE = Path(harness9.__file__).resolve().parent


def members(protocol: type) -> set[str]:
    """The methods ``protocol`` itself declares (not those of the protocols it extends)."""
    return {
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }


def callers(method: str) -> set[str]:
    """The modules of harness9 outside the store that call ``.method(``."""
    pattern = re.compile(rf"\.{method}\(")
    return {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "store" not in path.relative_to(PACKAGE).parts[:1]
        and pattern.search(path.read_text(encoding="utf-8"))
    }


def test_every_method_the_checkpointed_protocol_adds_has_a_caller_outside_the_store():
    added = members(CheckpointedSession)
    assert added == {
        "get_records",
        "get_record",
        "add_checkpoint",
        "latest_checkpoint",
        "latest_checkpoint_key",
        "pins",
        "search",
    }
    assert {m for m in added if not callers(m)} == set()


def test_pinning_is_only_the_chat_commands_business():
    assert members(PinBoard) == {"add_pin", "remove_pin"}
    assert callers("add_pin") == callers("remove_pin") == {"ui/goback.py"}


def test_the_remembered_settings_are_written_by_the_engine_and_read_by_the_cli():
    assert members(RememberedSettings) == {"remember_model", "model_settings"}
    assert callers("remember_model") == {"engine/engine.py"}
    assert {c.split("/")[0] for c in callers("model_settings")} == {"cli"}


def test_what_a_chat_runs_on_and_what_a_store_hands_out_extend_the_narrow_protocol():
    assert {CheckpointedSession, PinBoard, RememberedSettings} <= set(ChatSession.__mro__)
    assert ChatSession in StoredSession.__mro__
    assert members(StoredSession) == {"list_checkpoints"}
    assert members(Session) == {
        "session_id",
        "get_messages",
        "add_messages",
        "pop_message",
        "clear",
        "get_todos",
        "save_todos",
    }


def test_a_session_held_for_a_locked_database_is_still_what_a_chat_runs_on():
    held = HoldingSession(MemorySession(), retry_s=0)
    assert isinstance(held, ChatSession)
    held.remember_model(SessionSettings("openai/gpt-4o", 128_000))
    assert held.model_settings() == SessionSettings("openai/gpt-4o", 128_000)
