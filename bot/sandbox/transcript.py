"""What the chat page shows: the emulator's messages of one chat, as plain JSON.

Cards are handed over as their JSON (a CardKit entity's current state, with its element
contents as the bot last streamed them); the page renders them. The files of image, file
and post messages, a person's or the bot's, are listed in ``attachments``: kind ("image" |
"file"), name, size and the page's URL for their bytes (None when nobody stored them).
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from bot.feishu.post import flatten_post_json

from .emulator import FakeFeishu, FakeMessage
from .files import message_files, stored_file
from .people import BOT_NAME, PEOPLE

# What stands for a message that has neither text nor a file the page shows.
_LABELS = {
    "audio": "[voice message]",
    "media": "[video]",
    "sticker": "[sticker]",
    "merge_forward": "[forwarded messages]",
}


def transcript(emulator: FakeFeishu, chat_id: str) -> list[dict[str, Any]]:
    return [
        _message(emulator, message)
        for message in list(emulator.message_by_id.values())
        if message.chat_id == chat_id and not message.deleted
    ]


def _message(emulator: FakeFeishu, message: FakeMessage) -> dict[str, Any]:
    from_bot = message.sender_type == "app"
    person = next((p for p in PEOPLE.values() if p.open_id == message.sender_id), None)
    entry: dict[str, Any] = {
        "id": message.message_id,
        "from_bot": from_bot,
        "sender": BOT_NAME if from_bot else (person.name if person else message.sender_id),
        "sender_key": None if from_bot or person is None else person.key,
        "time_ms": message.create_time_ms,
        "reply_to": message.reply_to or message.parent_id,
        "thread_id": message.thread_id,
        "kind": "text",
        "text": "",
        "card": None,
        "streaming": False,
        "attachments": _attachments(emulator, message),
    }
    content = message.content if isinstance(message.content, dict) else {}
    if message.msg_type == "interactive":
        card = emulator.cards.get(message.card_id) if message.card_id else None
        entry["kind"] = "card"
        entry["card"] = card.card if card is not None else content
        entry["streaming"] = bool(card and card.streaming_mode)
    elif message.msg_type == "post":
        # The post's images show as thumbnails, not as "[image]" in its text.
        entry["text"] = post_text(_without_images(content))
    elif message.msg_type in ("image", "file"):
        entry["kind"] = message.msg_type
    elif message.msg_type in _LABELS:
        entry["text"] = _LABELS[message.msg_type]
    else:
        entry["text"] = _mentions_named(str(content.get("text", "")), message.mentions)
    return entry


def post_text(content: dict[str, Any]) -> str:
    """The text of a ``post`` message, read as the bot reads it (``bot.feishu.post``)."""
    flat = flatten_post_json(content)
    return flat.text if flat is not None else ""


def _attachments(emulator: FakeFeishu, message: FakeMessage) -> list[dict[str, Any]]:
    shown = []
    for kind, key in message_files(message):
        stored = stored_file(emulator, message.message_id, key)
        path = "/".join(urllib.parse.quote(part, safe="") for part in (message.message_id, key))
        shown.append(
            {
                "kind": kind,
                "key": key,
                "name": stored.name if stored else "",
                "size": len(stored.data) if stored else None,
                "url": f"/api/resource/{path}" if stored else None,
            }
        )
    return shown


def _without_images(value: Any) -> Any:
    """A post's content without its ``img`` elements, whatever its wrapping."""
    if isinstance(value, dict):
        return {name: _without_images(item) for name, item in value.items()}
    if isinstance(value, list):
        return [
            _without_images(item)
            for item in value
            if not (isinstance(item, dict) and item.get("tag") == "img")
        ]
    return value


def _mentions_named(text: str, mentions: list[dict[str, Any]]) -> str:
    for mention in mentions:
        text = text.replace(str(mention.get("key", "")), f"@{mention.get('name', '')}")
    return text
