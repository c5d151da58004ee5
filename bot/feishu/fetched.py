"""Messages as ``GET /open-apis/im/v1/messages/{message_id}`` returns them, parsed once.

The answer is ``data.items``: the message itself, and for a ``merge_forward`` also every
forwarded message after it, each with ``upper_message_id`` set to the forward it came in
(``../shared/fixtures/feishu-real/event__api-merge-forward-children-via-message-get...``).
The forward's own body is the plain string "Merged and Forwarded Message", not JSON; a
forwarded message keeps its original, older ``create_time`` and the ``chat_id`` of the
chat it came from.

A forwarded message's files are downloaded with the id of the forward that was fetched,
not with their own id (Feishu answers 234003 "File not in msg." to that; larksuite/cli
and other bots do the same), so each item says which id to use: ``resource_message_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .content import Attachment, decode_content, non_negative_int
from .events import Mention, message_content

__all__ = ["FetchedMessage", "fetched_messages"]


@dataclass(frozen=True, slots=True)
class FetchedMessage:
    message_id: str
    msg_type: str
    content: Mapping[str, Any] | str  # the decoded body, or the body as sent when not JSON
    text: str  # read as an event's text is: mentions rendered, posts flattened, files described
    attachments: tuple[Attachment, ...]
    sender_id: str
    sender_id_type: str  # "open_id" for people, "app_id" for bots
    sender_type: str  # "user" | "app"
    create_time_ms: int
    chat_id: str = ""
    upper_message_id: str = ""  # the merge_forward it was forwarded in ("" for the message)
    parent_id: str = ""
    root_id: str = ""
    thread_id: str = ""
    deleted: bool = False
    mentions: tuple[Mention, ...] = ()
    resource_message_id: str = ""  # the message id to download its attachments with


def fetched_messages(data: Any, requested_id: str) -> list[FetchedMessage]:
    """The items of a message-get answer's ``data``, in order; unusable items are left out."""
    items = data.get("items") if isinstance(data, Mapping) else None
    messages = []
    for item in items if isinstance(items, list) else ():
        message = _fetched(item, requested_id)
        if message is not None:
            messages.append(message)
    return messages


def _fetched(item: Any, requested_id: str) -> FetchedMessage | None:
    if not isinstance(item, Mapping) or not _s(item.get("message_id")):
        return None
    message_id = _s(item["message_id"])
    msg_type = _s(item.get("msg_type"))
    body = item.get("body")
    raw = body.get("content") if isinstance(body, Mapping) else None
    decoded, _ = decode_content(raw)
    text, attachments, mentions = message_content(msg_type, raw, item.get("mentions"))
    raw_sender = item.get("sender")
    sender: Mapping[str, Any] = raw_sender if isinstance(raw_sender, Mapping) else {}
    upper = _s(item.get("upper_message_id"))
    return FetchedMessage(
        message_id=message_id,
        msg_type=msg_type,
        content=dict(decoded) if decoded is not None else _s(raw),
        text=text,
        attachments=attachments,
        sender_id=_s(sender.get("id")),
        sender_id_type=_s(sender.get("id_type")),
        sender_type=_s(sender.get("sender_type")),
        create_time_ms=non_negative_int(item.get("create_time")),
        chat_id=_s(item.get("chat_id")),
        upper_message_id=upper,
        parent_id=_s(item.get("parent_id")),
        root_id=_s(item.get("root_id")),
        thread_id=_s(item.get("thread_id")),
        deleted=item.get("deleted") is True,
        mentions=mentions,
        # Forwarded messages (nested forwards included) hand their files out only
        # through the forward that was fetched.
        resource_message_id=requested_id if upper else message_id,
    )


def _s(value: Any) -> str:
    return value if isinstance(value, str) else ""
