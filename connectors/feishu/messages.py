"""Chat history and sending messages as the bot; message content read as one line of text."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from lark_oapi.api.im.v1 import CreateMessageRequest, CreateMessageRequestBody, ListMessageRequest
from pydantic import Field

from bot.feishu.post import flatten_card, flatten_post_json
from connectors.base import ToolError, action

from .audience import Audience, current_audience, readers_text
from .common import clip, items_of, stable_id
from .times import format_time, from_epoch
from .users import UserTools

_MESSAGE_CHARS = 500
_CARD_CHARS = 300
_MENTION = re.compile(r"@_user_\d+")


class MessageTools(UserTools):
    @action(side_effect="read")
    async def feishu_get_chat_history(
        self,
        chat_id: Annotated[str, Field(min_length=1)],
        limit: Annotated[int | None, Field(ge=1, le=200)] = None,
        start_time: str | None = None,
        end_time: str | None = None,
    ) -> str:
        """Read the latest messages of a chat, newest first: this chat, or (in a direct
        message) another chat the asker is a member of and the bot is in.

        Args:
            chat_id: The chat's id (oc_...), e.g. from feishu_list_chats.
            limit: The most messages to return (default: the configured page size).
            start_time: Only messages from this time: ISO 8601 (2025-05-01T09:00) or unix seconds.
            end_time: Only messages at or before this time: ISO 8601 or unix seconds.
        """
        audience = current_audience("Reading a chat's messages")
        chat_id = chat_id.strip()
        if not await self._access.may_read_chat(audience, chat_id):
            raise ToolError(_not_yours(audience, chat_id))
        limit = limit or self.settings.page_size
        messages = await self._latest_messages(chat_id, limit, start_time, end_time)
        if not messages:
            return f"No messages in chat {chat_id} for that time range."
        names = await self._sender_names(messages)
        lines = [f"Last {len(messages)} messages in chat {chat_id} (newest first, {self._tz}):"]
        for message in messages[:limit]:
            lines.append(self._render_message(message, names))
        return "\n".join(lines)

    @action(side_effect="write")
    async def feishu_send_message(
        self,
        receive_id: Annotated[str, Field(min_length=1)],
        text: Annotated[str, Field(min_length=1, max_length=30_000)],
        format: Literal["text", "markdown"] = "text",
        receive_id_type: Literal["chat_id", "open_id", "union_id", "user_id", "email"]
        | None = None,
        uuid: Annotated[str | None, Field(max_length=50)] = None,
    ) -> str:
        """Send a message as the bot to a group chat or a person.
        Sending is idempotent: the same uuid within an hour sends nothing new. Without a
        uuid, one is derived from the recipient and the text, so an identical message to
        the same recipient is sent once an hour.

        Args:
            receive_id: A chat_id (oc_...), open_id (ou_...), union_id (on_...), user_id or email.
            text: The message. With format "markdown" it is rendered (bold, links, lists, code).
            format: "text" for plain text, "markdown" for a rich-text (post) message.
            receive_id_type: The kind of receive_id; guessed from its prefix when left out.
            uuid: Idempotency key of at most 50 characters.
        """
        id_type = receive_id_type or _receive_id_type(receive_id)
        if format == "markdown":
            msg_type = "post"
            post = {"zh_cn": {"title": "", "content": [[{"tag": "md", "text": text}]]}}
            content = json.dumps(post, ensure_ascii=False)
        else:
            msg_type, content = "text", json.dumps({"text": text}, ensure_ascii=False)
        key = uuid or stable_id("message", id_type, receive_id, msg_type, content)
        body = (
            CreateMessageRequestBody.builder()
            .receive_id(receive_id)
            .msg_type(msg_type)
            .content(content)
            .uuid(key)
            .build()
        )
        request = CreateMessageRequest.builder().receive_id_type(id_type).request_body(body)
        data = await self._data("im.message.create", request.build(), "Sending the message")
        message_id = data.get("message_id") or "?"
        chat = data.get("chat_id") or receive_id
        return f"Sent message {message_id} to {id_type} {receive_id} (chat {chat}); uuid {key}."

    async def _latest_messages(
        self, chat_id: str, limit: int, start_time: str | None, end_time: str | None
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` messages of the chat, newest first, paging as needed."""
        messages: list[dict[str, Any]] = []
        page_token = ""
        while len(messages) < limit:
            request = (
                ListMessageRequest.builder()
                .container_id_type("chat")
                .container_id(chat_id)
                .sort_type("ByCreateTimeDesc")
                .page_size(min(50, limit - len(messages)))
            )
            if start_time:
                request.start_time(str(self._epoch(start_time, "start_time")))
            if end_time:
                request.end_time(str(self._epoch(end_time, "end_time")))
            if page_token:
                request.page_token(page_token)
            data = await self._data("im.message.list", request.build(), "Reading chat history")
            messages += items_of(data)
            page_token = str(data.get("page_token") or "")
            if not data.get("has_more") or not page_token:
                break
        return messages

    def _render_message(self, message: Mapping[str, Any], names: Mapping[str, str]) -> str:
        sender = message.get("sender") or {}
        sender_id = str(sender.get("id") or "?")
        if sender.get("sender_type") == "app":
            who = f"app {sender_id}"  # a bot: this one or another
        else:
            who = f"{names[sender_id]} ({sender_id})" if names.get(sender_id) else sender_id
        when = format_time(from_epoch(message.get("create_time")), self._tz)
        text = (
            "[recalled]"
            if message.get("deleted")
            else message_text(message.get("msg_type"), (message.get("body") or {}).get("content"))
        )
        text = _MENTION.sub(lambda m: _mention_name(m.group(0), message.get("mentions")), text)
        reply = " ↳" if message.get("parent_id") else ""
        return f"[{when}]{reply} {who}: {clip(text, _MESSAGE_CHARS)}"


def _not_yours(audience: Audience, chat_id: str) -> str:
    """Why another chat's messages are not read for this audience, and what to do."""
    if not audience.direct:
        return (
            f"In a group chat the bot reads only this chat's messages ({audience.chat_id}): "
            "everyone here reads its answer, and not everyone here is a member of "
            f"{chat_id!r}. Nothing was read. To read another chat you are in, ask the bot "
            "in a direct message."
        )
    who = readers_text(audience)
    return (
        f"The bot reads a chat's messages only for its members, and Feishu does not list "
        f"{who} as a member of {chat_id!r} (or the bot is not in that chat). Nothing was "
        "read. A member of that chat can ask, or ask to be added to it."
    )


def message_text(msg_type: Any, raw: Any) -> str:
    """A message's content as one line of text (Feishu sends it as a JSON string)."""
    if msg_type == "post":
        flat = flatten_post_json(raw)
        # One line per message keeps a history readable; " / " marks where lines were.
        return " / ".join(filter(None, map(str.strip, flat.text.splitlines()))) if flat else ""
    try:
        content = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return str(raw)
    if not isinstance(content, dict):
        return str(content)
    if msg_type == "text":
        return str(content.get("text") or "")
    if msg_type == "interactive":
        card = flatten_card(content)
        return "[card] " + clip(card, _CARD_CHARS) if card else "[card]"
    if msg_type in ("file", "media", "audio"):
        name = content.get("file_name")
        return f"[{msg_type}{' ' + str(name) if name else ''}]"
    labels = {"image": "[image]", "sticker": "[sticker]", "share_chat": "[shared a chat]"}
    return labels.get(str(msg_type), f"[{msg_type}]")


def _mention_name(key: str, mentions: Any) -> str:
    for mention in mentions if isinstance(mentions, list) else []:
        if isinstance(mention, dict) and mention.get("key") == key and mention.get("name"):
            return f"@{mention['name']}"
    return key


def _receive_id_type(receive_id: str) -> str:
    for prefix, kind in (("oc_", "chat_id"), ("ou_", "open_id"), ("on_", "union_id")):
        if receive_id.startswith(prefix):
            return kind
    if "@" in receive_id:
        return "email"
    raise ToolError(
        f"cannot tell what kind of id {receive_id!r} is; pass receive_id_type "
        "(chat_id, open_id, union_id, user_id or email)"
    )


__all__ = ["MessageTools", "message_text"]
