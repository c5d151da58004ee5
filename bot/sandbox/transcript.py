"""What the chat page shows: the emulator's messages of one chat, as plain JSON.

Cards are handed over as their JSON (a CardKit entity's current state, with its element
contents as the bot last streamed them); the page renders them.
"""

from __future__ import annotations

from typing import Any

from bot.feishu.post import flatten_post_json

from .emulator import FakeFeishu, FakeMessage
from .people import BOT_NAME, PEOPLE


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
    }
    content = message.content if isinstance(message.content, dict) else {}
    if message.msg_type == "interactive":
        card = emulator.cards.get(message.card_id) if message.card_id else None
        entry["kind"] = "card"
        entry["card"] = card.card if card is not None else content
        entry["streaming"] = bool(card and card.streaming_mode)
    elif message.msg_type == "post":
        entry["text"] = post_text(content)
    else:
        entry["text"] = _mentions_named(str(content.get("text", "")), message.mentions)
    return entry


def post_text(content: dict[str, Any]) -> str:
    """The text of a ``post`` message, read as the bot reads it (``bot.feishu.post``)."""
    flat = flatten_post_json(content)
    return flat.text if flat is not None else ""


def _mentions_named(text: str, mentions: list[dict[str, Any]]) -> str:
    for mention in mentions:
        text = text.replace(str(mention.get("key", "")), f"@{mention.get('name', '')}")
    return text
