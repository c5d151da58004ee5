"""The typed transcript the engine works on: messages, tool calls and token usage.

These are the engine's own types; providers translate them to and from their wire
format at the edge (see ``openai_compat``), so nothing inside the loop handles raw dicts.
Messages are frozen: the loop appends, compaction replaces, nobody edits in place.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, get_args

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
    # A document the user sent, as text (a file's contents): kept whole for the loop and
    # for synthesis, unlike history, which synthesis cuts short.
    "attachment",
]

ImageDetail = Literal["auto", "low", "high"]


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image in a user message, as the model reads it: a ``data:`` URL (or https URL).

    ``label`` names it for text fallbacks (e.g. "screenshot.png" or "image 1").
    """

    url: str
    detail: ImageDetail = "auto"
    label: str = ""

    def __repr__(self) -> str:  # a data URL is megabytes of base64: keep logs readable
        head = self.url[:40] + ("..." if len(self.url) > 40 else "")
        return f"ImagePart({head!r}, detail={self.detail!r}, label={self.label!r})"


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
    # Images sent with a user message: OpenAI ``image_url`` parts beside the text.
    images: tuple[ImagePart, ...] = ()

    @classmethod
    def system(cls, content: str) -> Message:
        return cls("system", content, kind="system")

    @classmethod
    def user(
        cls,
        content: str,
        *,
        pinned: bool = False,
        kind: MessageKind | None = None,
        images: tuple[ImagePart, ...] = (),
    ) -> Message:
        return cls("user", content, pinned=pinned, kind=kind, images=images)

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


# What the engine's public functions take as messages: its own, or OpenAI-style dicts.
MessageLike: TypeAlias = "Message | Mapping[str, Any]"
ROLES: tuple[str, ...] = get_args(Role)


def as_message(item: object) -> Message:
    """``item`` as a :class:`Message`: a Message as it is, or an OpenAI-style mapping
    (``{"role", "content", "tool_calls", "tool_call_id", "name"}``); anything else is a
    clear ``TypeError`` or ``ValueError`` naming what was wrong."""
    if isinstance(item, Message):
        return item
    if not isinstance(item, Mapping):
        raise TypeError(
            "a message must be a Message or a mapping like {'role': 'user', 'content': '...'}, "
            f"not {type(item).__name__}"
        )
    role = item.get("role")
    if role not in ROLES:
        raise ValueError(f"a message's role must be one of {', '.join(ROLES)}; got {role!r}")
    calls = item.get("tool_calls") or ()
    if not isinstance(calls, list | tuple):
        raise TypeError(f"a message's tool_calls must be a list, not {type(calls).__name__}")
    content = item.get("content")
    return Message(
        role,
        _text_of(content),
        images=_images_of(content) if role == "user" else (),
        tool_calls=tuple(_tool_call_from_mapping(call) for call in calls),
        tool_call_id=_optional_text(item, "tool_call_id"),
        name=_optional_text(item, "name"),
        reasoning_content=_optional_text(item, "reasoning_content"),
    )


def as_messages(items: Iterable[object]) -> list[Message]:
    """Each of ``items`` through :func:`as_message`; a lone string or mapping is refused
    (a common slip: the messages are a list)."""
    if isinstance(items, str | bytes | Mapping):
        raise TypeError("messages must be a list of messages, not a single " + type(items).__name__)
    return [as_message(item) for item in items]


def decode_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """A tool call's argument text as a mapping, or ``{}`` and why it is not one."""
    if not raw.strip():
        return {}, None  # a call without parameters
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"arguments are not valid JSON ({exc.msg} at position {exc.pos})"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


def _text_of(content: object) -> str:
    if content is None:
        return ""  # an assistant message that only calls tools
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: the text ones
        parts = [part for part in content if isinstance(part, Mapping)]
        if len(parts) != len(content):
            raise TypeError("a message's content parts must be mappings like {'type': 'text'}")
        texts = [part.get("text", "") for part in parts if part.get("type", "text") == "text"]
        if all(isinstance(text, str) for text in texts):
            return "".join(texts)
    raise TypeError(f"a message's content must be text, not {type(content).__name__}")


def _images_of(content: object) -> tuple[ImagePart, ...]:
    """The ``image_url`` parts of OpenAI content parts (already checked by ``_text_of``)."""
    if not isinstance(content, list):
        return ()
    images = []
    for part in content:
        if part.get("type") != "image_url":
            continue
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        if not isinstance(url, str) or not url:
            raise TypeError("an image_url part must look like {'image_url': {'url': '...'}}")
        detail = image.get("detail", "auto") if isinstance(image, Mapping) else "auto"
        images.append(ImagePart(url, _detail(detail)))
    return tuple(images)


def _detail(value: object) -> ImageDetail:
    if value == "low":
        return "low"
    if value == "high":
        return "high"
    if value == "auto":
        return "auto"
    raise ValueError(f"an image's detail must be auto, low or high; got {value!r}")


def _optional_text(item: Mapping[str, Any], key: str) -> str | None:
    value = item.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"a message's {key} must be text, not {type(value).__name__}")
    return value


def _tool_call_from_mapping(call: object) -> ToolCall:
    if isinstance(call, ToolCall):
        return call
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        raise TypeError("a tool call must look like {'id', 'function': {'name', 'arguments'}}")
    function = call["function"]
    name, raw = function.get("name"), function.get("arguments", "")
    if not isinstance(name, str) or not name:
        raise ValueError("a tool call needs a function name")
    if isinstance(raw, Mapping):
        return ToolCall(str(call.get("id", "")), name, dict(raw), raw_arguments=json.dumps(raw))
    if not isinstance(raw, str):
        raise TypeError(f"a tool call's arguments must be JSON text, not {type(raw).__name__}")
    arguments, error = decode_arguments(raw)
    return ToolCall(str(call.get("id", "")), name, arguments, raw_arguments=raw, parse_error=error)
