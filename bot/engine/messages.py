"""The typed transcript the engine works on: messages, tool calls and token usage.

These are the engine's own types; providers translate them to and from their wire
format at the edge (see ``openai_compat``), so nothing inside the loop handles raw dicts.
Messages are frozen: the loop appends, compaction replaces, nobody edits in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]

# What a message is for, beyond its role. The loop, the context guard and synthesis
# read it; it never goes over the wire.
MessageKind = Literal[
    "system",
    "history",
    "query",
    "assistant",
    "observation",
    "reformat",
    "reflection",
    "cycle_warning",
    "checklist",
    "interrupt",
    "summary",
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool invocation requested by the model.

    ``arguments`` is always a mapping; when the model's argument text was not a JSON
    object, it is empty and ``parse_error`` says why, so the loop can answer with an
    error observation instead of guessing.
    """

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    raw_arguments: str = ""
    parse_error: str | None = None


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message, in the OpenAI chat-completions sense."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning_content: str | None = None
    # Pinned messages survive compaction verbatim (the question, user interrupts).
    pinned: bool = False
    kind: MessageKind | None = None

    @classmethod
    def system(cls, content: str) -> Message:
        return cls("system", content, kind="system")

    @classmethod
    def user(
        cls, content: str, *, pinned: bool = False, kind: MessageKind | None = None
    ) -> Message:
        return cls("user", content, pinned=pinned, kind=kind)

    @classmethod
    def assistant(
        cls,
        content: str = "",
        tool_calls: tuple[ToolCall, ...] = (),
        *,
        reasoning_content: str | None = None,
        kind: MessageKind | None = "assistant",
    ) -> Message:
        return cls(
            "assistant",
            content,
            tool_calls=tool_calls,
            reasoning_content=reasoning_content,
            kind=kind,
        )

    @classmethod
    def tool(cls, call: ToolCall, content: str) -> Message:
        return cls("tool", content, tool_call_id=call.id, name=call.name, kind="observation")


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage as the provider reported it (zeros when it reported nothing)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


ZERO_USAGE = Usage()
