"""What a message of a non-text type carries: its attachments, and a line describing it.

Shared by the event parser (:mod:`bot.feishu.events`) and the messages the API returns
(:mod:`bot.feishu.fetched`), so a message reads the same whichever way it arrived.

Content shapes (after ``content`` is decoded; Feishu's documentation and real payloads,
``../shared/fixtures/feishu-real``):

- image ``{"image_key"}``; file ``{"file_key", "file_name", "file_size"?}``;
- audio ``{"file_key", "duration"}`` (milliseconds), sometimes with ``file_name``;
- media (video) ``{"file_key", "image_key" (the cover), "file_name", "duration"}``;
- sticker ``{"file_key"}``: Feishu serves no download for it;
- merge_forward: no content worth reading (``"Merged and Forwarded Message"``, as a plain
  string or wrapped in ``{"content": ...}``); the forwarded messages come from
  ``GET /im/v1/messages/{id}`` (``FeishuClient.get_message``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .untrusted_json import JSON_OBJECT

__all__ = ["Attachment", "decode_content", "describe", "non_negative_int"]

_DIGITS = re.compile(r"[0-9]{1,20}")
_FILE_TYPES = ("image", "file", "audio", "media", "sticker")


@dataclass(frozen=True, slots=True)
class Attachment:
    kind: str  # "image" | "file" | "audio" | "media" | "sticker"
    key: str  # image_key or file_key
    name: str = ""  # the file name, when the message gives one
    duration_ms: int = 0  # audio and video, when given
    size: int = 0  # bytes, when the message gives it (file messages may)

    @property
    def download_type(self) -> str | None:
        """The ``type`` of the message-resources API for it; None: it cannot be downloaded."""
        if self.kind == "image":
            return "image"
        return "file" if self.kind in ("file", "audio", "media") else None


def decode_content(raw: Any) -> tuple[Mapping[str, Any] | None, str]:
    """The decoded ``content`` object, or None and what is wrong with it."""
    if isinstance(raw, JSON_OBJECT):  # already decoded by whoever handed it to us
        return raw, ""
    if not isinstance(raw, str) or not raw.strip():
        return None, "is missing"
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None, "is not valid JSON"
    if not isinstance(value, JSON_OBJECT):
        return None, "is not a JSON object"
    return value, ""


def describe(message_type: str, content: Mapping[str, Any]) -> tuple[str, tuple[Attachment, ...]]:
    """The text standing for a message that is not text or post, and its attachments."""

    def get(name: str) -> str:
        value = content.get(name)
        return value.strip() if isinstance(value, str) else ""

    if message_type in _FILE_TYPES:
        key = get("image_key") if message_type == "image" else get("file_key")
        name = get("file_name")
        duration = non_negative_int(content.get("duration"))
        size = non_negative_int(content.get("file_size"))
        attachment = Attachment(message_type, key, name, duration_ms=duration, size=size)
        return _attachment_text(message_type, name, duration), ((attachment,) if key else ())
    label, detail = {
        "share_chat": ("shared group", get("chat_name") or get("chat_id")),
        "share_user": ("shared contact", get("user_id")),
        "merge_forward": ("forwarded messages", ""),
        "location": ("location", get("name")),
        "system": ("system message", ""),
    }.get(message_type, (f"{message_type[:40]} message" if message_type else "message", ""))
    return (f"[{label}: {detail}]" if detail else f"[{label}]"), ()


def _attachment_text(message_type: str, name: str, duration_ms: int) -> str:
    label = "video" if message_type == "media" else message_type
    if message_type == "audio":
        return f"[audio: {max(1, round(duration_ms / 1000))}s]" if duration_ms else "[audio]"
    if message_type in ("file", "media") and name:
        return f"[{label}: {name}]"
    return f"[{label}]"


def non_negative_int(value: Any) -> int:
    """Feishu sends times and sizes as strings of digits; numbers are accepted too."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float):
        return int(value) if 0 <= value < 1e20 else 0
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value.strip())
    return 0
