"""Plain records shared by every layer, and their OpenAI/litellm dict forms.

Tool results use role ``tool`` (what litellm and the OpenAI API expect); the
seed's "user message with a ToolCallID" maps onto this.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ROLE_SYSTEM = "system"
ROLE_USER = "user"
ROLE_ASSISTANT = "assistant"
ROLE_TOOL = "tool"
ROLES = (ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL)

# The first line of the message that stands for everything a compaction folded.
SUMMARY_PREFIX = "[Conversation Summary]\n"
# Content of the stub result inserted for a tool call whose real result was cut.
TRUNCATED_STUB = "[context truncated]"
# ... and for a call of the stored log that never got a result at all: harness9 was killed
# (or its terminal closed) while the tool ran. Not "truncated": nothing was there to cut.
UNFINISHED_STUB = "[interrupted: harness9 stopped before this tool finished; no result came]"

TODO_STATUSES = ("pending", "in_progress", "completed")
# How a todo's status is written in text: the todo tools' results, the view's kept state,
# `sessions show`, and the old state notes read back by harness9.store.legacy_checkpoint.
TODO_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}

# The facts of a tool's run that the log keeps with its result, and the types each may
# hold: harness9's own readers use them later (eviction's rule summary says "exit code 1"
# from them, never from the output's text). A model is never sent them.
RESULT_METADATA_TYPES: dict[str, tuple[type, ...]] = {
    "exit_code": (int, type(None)),  # None: the command did not exit by itself (timed_out)
    "timed_out": (bool,),
}


def result_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """What the log keeps of a tool result's ``metadata``: the keys of RESULT_METADATA_TYPES
    whose values have their types (True is no exit code); anything else is left out."""
    kept: dict[str, Any] = {}
    for key, types in RESULT_METADATA_TYPES.items():
        value = metadata.get(key, ...)
        if isinstance(value, types) and (bool in types or not isinstance(value, bool)):
            kept[key] = value
    return kept


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str = "{}"  # the JSON text exactly as the model produced it

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        """Accepts both the OpenAI wire shape and the flat ``{id, name, arguments}`` one."""
        fn = data.get("function")
        if isinstance(fn, dict):
            name, arguments = fn.get("name") or "", fn.get("arguments")
        else:
            name, arguments = data.get("name") or "", data.get("arguments")
        if arguments is None:
            arguments = "{}"
        elif not isinstance(arguments, str):
            import json

            arguments = json.dumps(arguments, ensure_ascii=False)
        return cls(id=str(data.get("id") or ""), name=str(name), arguments=arguments)

    def to_flat(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(slots=True)
class Message:
    role: str
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str = ""
    # A tool result's run facts as data (``result_metadata``: the shell's exit_code and
    # timed_out), {} when its tool reported none; None for any other message and for a
    # result stored before they were kept. Never sent to a model (``to_dict``), and not
    # compared: two messages are equal when a model would be sent the same.
    metadata: dict[str, Any] | None = field(default=None, compare=False, kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        """The OpenAI chat-completions form litellm accepts."""
        out: dict[str, Any] = {"role": self.role}
        if self.role == ROLE_ASSISTANT and self.tool_calls:
            out["content"] = self.content or None
            out["tool_calls"] = [tc.to_dict() for tc in self.tool_calls]
        else:
            out["content"] = self.content
        if self.role == ROLE_TOOL:
            out["tool_call_id"] = self.tool_call_id
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        content = data.get("content")
        if content is None:
            content = ""
        elif isinstance(content, list):
            # Content parts (text blocks): keep the text, which is all we store.
            content = "".join(
                part.get("text", "") if isinstance(part, dict) else str(part) for part in content
            )
        calls = [ToolCall.from_dict(tc) for tc in (data.get("tool_calls") or [])]
        return cls(
            role=str(data.get("role") or ROLE_USER),
            content=str(content),
            tool_calls=calls,
            tool_call_id=str(data.get("tool_call_id") or ""),
        )


@dataclass(slots=True)
class Usage:
    input_tokens: int = 0  # all prompt tokens, the cached ones included
    output_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the provider read from its prompt cache
    cache_write_tokens: int = 0  # prompt tokens written to the cache (priced above input)
    # Of cache_write_tokens, those written with a 1-hour lifetime (priced higher again).
    # Only the call's price uses it; stores keep the writes' total.
    cache_write_1h_tokens: int = 0
    # The server left its prompt count out and input_tokens is an estimate in its place
    # (Ollama omits prompt_eval_count for a prompt it did not evaluate): shown with "~",
    # never taken for the server's count.
    input_estimated: bool = False


@dataclass(slots=True)
class TodoItem:
    content: str
    status: str = "pending"  # pending | in_progress | completed

    def to_dict(self) -> dict[str, str]:
        return {"content": self.content, "status": self.status}


@dataclass(slots=True)
class ToolDefinition:
    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    # What its calls do, for the smart trigger (never sent): ``reads``, they read content
    # into the context and change nothing (read_file, offload_recall, an MCP tool its server
    # marks ``readOnlyHint``); ``sub_agent``, they run a sub-agent (task).
    reads: bool = False
    sub_agent: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }
