"""IM messages: send, reply, edit (patch) and read one, with ``uuid`` resends, content
limits and shapes, topics, merge_forward reads, and the sending of CardKit card entities."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .cardkit import CardOp, FakeCard
from .core import EmulatorCore
from .wire import TENANT_KEY, FakeError, now_ms, request_body

RECEIVE_ID_TYPES = ("open_id", "user_id", "union_id", "email", "chat_id")
MSG_TYPES = (
    "text",
    "post",
    "image",
    "file",
    "audio",
    "media",
    "sticker",
    "interactive",
    "share_chat",
    "share_user",
)
# Content limits in bytes, per msg_type (Feishu: text 150 KB, post and cards 30 KB).
CONTENT_LIMITS = {"text": 150 * 1024, "post": 30 * 1024, "interactive": 30 * 1024}
# The key a message of each file type must carry (image {"image_key"}, file {"file_key"}, ...).
MEDIA_KEYS = {
    "image": "image_key",
    "file": "file_key",
    "audio": "file_key",
    "media": "file_key",
    "sticker": "file_key",
}
# What Feishu answers as the body of a merge_forward message: a plain string, not JSON.
MERGE_FORWARD_BODY = "Merged and Forwarded Message"


@dataclass
class FakeMessage:
    message_id: str
    chat_id: str
    msg_type: str
    content: Any  # decoded JSON
    sender_id: str  # app id for the bot's messages, open_id for users'
    sender_type: str  # "app" or "user"
    create_time_ms: int
    chat_type: str = "p2p"
    reply_to: str | None = None  # the message_id in the reply URL
    root_id: str | None = None
    parent_id: str | None = None
    thread_id: str | None = None
    uuid: str | None = None
    reply_in_thread: bool = False
    deleted: bool = False
    updated: bool = False
    update_time_ms: int = 0
    history: list[Any] = field(default_factory=list)  # contents before each patch
    card_id: str | None = None  # set when the message carries a CardKit card entity
    mentions: list[dict[str, Any]] = field(default_factory=list)  # the wire's mentions
    upper_message_id: str | None = None  # the merge_forward it was forwarded in

    def to_wire(self) -> dict[str, Any]:
        """The message object of Feishu's IM API (empty ids left out, times as strings)."""
        wire: dict[str, Any] = {
            "message_id": self.message_id,
            "msg_type": self.msg_type,
            "create_time": str(self.create_time_ms),
            "update_time": str(self.update_time_ms or self.create_time_ms),
            "deleted": self.deleted,
            "updated": self.updated,
            "chat_id": self.chat_id,
            "sender": {
                "id": self.sender_id,
                "id_type": "app_id" if self.sender_type == "app" else "open_id",
                "sender_type": self.sender_type,
                "tenant_key": TENANT_KEY,
            },
            "body": {"content": self.wire_content()},
            "mentions": [dict(m) for m in self.mentions],
            "upper_message_id": self.upper_message_id or "",
        }
        for name in ("root_id", "parent_id", "thread_id"):
            if getattr(self, name):
                wire[name] = getattr(self, name)
        return wire

    def wire_content(self) -> str:
        """``content`` as the API and the receive event carry it: compact JSON (as Feishu,
        written in Go, sends it), or the text itself for a body that is not JSON (a
        merge_forward's)."""
        if isinstance(self.content, str):
            return self.content
        return json.dumps(self.content, ensure_ascii=False, separators=(",", ":"))


class MessagesApi(EmulatorCore):
    # -- seeding --------------------------------------------------------------------

    def add_message(
        self,
        message_id: str,
        *,
        chat_id: str,
        chat_type: str = "p2p",
        msg_type: str = "text",
        content: Any = None,
        sender_open_id: str = "ou_user",
        root_id: str | None = None,
        parent_id: str | None = None,
        thread_id: str | None = None,
        create_time_ms: int | None = None,
    ) -> FakeMessage:
        """Seed a message a user sent, so replies to it land in the right chat and topic.

        ``create_time_ms`` (epoch ms, default now) makes an old message, e.g. for 230031.
        """
        message = FakeMessage(
            message_id=message_id,
            chat_id=chat_id,
            chat_type=chat_type,
            msg_type=msg_type,
            content={"text": ""} if content is None else content,
            sender_id=sender_open_id,
            sender_type="user",
            create_time_ms=now_ms() if create_time_ms is None else create_time_ms,
            root_id=root_id,
            parent_id=parent_id,
            thread_id=thread_id,
        )
        self.message_by_id[message_id] = message
        return message

    def add_event_message(self, envelope: Mapping[str, Any]) -> FakeMessage:
        """Seed the message of an ``im.message.receive_v1`` envelope."""
        event = envelope["event"]
        msg = event["message"]
        return self.add_message(
            msg["message_id"],
            chat_id=msg["chat_id"],
            chat_type=msg.get("chat_type", "p2p"),
            msg_type=msg.get("message_type", "text"),
            content=_decoded(msg.get("content") or "{}"),
            sender_open_id=event["sender"]["sender_id"]["open_id"],
            root_id=msg.get("root_id") or None,
            parent_id=msg.get("parent_id") or None,
            thread_id=msg.get("thread_id") or None,
        )

    # -- handlers -------------------------------------------------------------------

    async def _create_message(self, request: web.Request) -> web.Response:
        id_type = request.query.get("receive_id_type")
        if id_type not in RECEIVE_ID_TYPES:
            raise FakeError(99992402, "field validation failed: receive_id_type")
        body = request_body(request)
        receive_id = body.get("receive_id")
        if not isinstance(receive_id, str) or not receive_id:
            raise FakeError(99992402, "field validation failed: receive_id")
        self.workspace.check_receiver(id_type, receive_id, strict=self.strict)
        if (earlier := self._by_uuid.get(body.get("uuid") or "")) is not None:
            return self._ok(earlier.to_wire())
        msg_type, content = _message_content(body)
        self._check_media_key(msg_type, content)
        card = self._card_to_send(msg_type, content)
        chat_id = receive_id if id_type == "chat_id" else self._dm_chat(receive_id)
        message = self._new_message(chat_id, msg_type, content, uuid=body.get("uuid"))
        self._mark_sent(card, message)
        return self._ok(message.to_wire())

    def _dm_chat(self, receive_id: str) -> str:
        return self.dm_chats.get(receive_id) or f"oc_p2p_{receive_id}"

    async def _reply_message(self, request: web.Request) -> web.Response:
        parent = self._target(request.match_info["message_id"], create=not self.strict)
        body = request_body(request)
        if (earlier := self._by_uuid.get(body.get("uuid") or "")) is not None:
            return self._ok(earlier.to_wire())
        msg_type, content = _message_content(body)
        self._check_media_key(msg_type, content)
        card = self._card_to_send(msg_type, content)
        in_thread = bool(body.get("reply_in_thread"))
        root_id = parent.root_id or parent.message_id
        thread_id = parent.thread_id
        if thread_id is None and in_thread:
            thread_id = f"omt_fake_{next(self._ids):04d}"
            parent.thread_id = thread_id
        message = self._new_message(
            parent.chat_id,
            msg_type,
            content,
            uuid=body.get("uuid"),
            reply_to=parent.message_id,
            root_id=root_id,
            # Inside a topic the parent is always the topic's root.
            parent_id=root_id if thread_id else parent.message_id,
            thread_id=thread_id,
            reply_in_thread=in_thread,
            chat_type=parent.chat_type,
        )
        self._mark_sent(card, message)
        return self._ok(message.to_wire())

    async def _patch_message(self, request: web.Request) -> web.Response:
        message = self._target(request.match_info["message_id"], create=False)
        if message.msg_type != "interactive":
            raise FakeError(230054)
        if now_ms() - message.create_time_ms > self.edit_window_s * 1000:
            raise FakeError(230031)
        body = request_body(request)
        _, content = _message_content({"msg_type": "interactive", "content": body.get("content")})
        message.history.append(message.content)
        message.content = content
        message.updated = True
        message.update_time_ms = now_ms()
        return self._ok({})

    async def _get_message(self, request: web.Request) -> web.Response:
        message = self._target(request.match_info["message_id"], create=False)
        # A merge_forward comes with what it forwards (nested forwards' messages too),
        # each carrying upper_message_id, as Feishu answers.
        items = [message, *self.forwarded(message)]
        return self._ok({"items": [m.to_wire() for m in items]})

    def forwarded(self, message: FakeMessage) -> list[FakeMessage]:
        """The messages a merge_forward forwards, depth first; [] for any other."""
        found: list[FakeMessage] = []
        seen = {message.message_id}
        pending = [message.message_id]
        while pending:
            upper = pending.pop(0)
            for child in self.message_by_id.values():
                if child.upper_message_id == upper and child.message_id not in seen:
                    seen.add(child.message_id)
                    found.append(child)
                    if child.msg_type == "merge_forward":
                        pending.append(child.message_id)
        return found

    def _check_media_key(self, msg_type: str, content: Any) -> None:
        """An image/file message must name a key Feishu knows: one the app uploaded, or
        one of a message the emulator holds."""
        name = MEDIA_KEYS.get(msg_type)
        if name is None:
            return
        key = content.get(name)
        known = {*self.uploaded_images, *self.uploaded_files, *(k for _, k in self.resources)}
        if key not in known:
            raise FakeError(230001, f"fake: unknown {name} {key!r}")

    # -- sending a card entity ------------------------------------------------------

    def _card_to_send(self, msg_type: str, content: Any) -> FakeCard | None:
        """The card entity an interactive message carries (230099 if unknown or sent)."""
        if msg_type != "interactive" or content.get("type") != "card":
            return None
        data = content.get("data")
        card_id = data.get("card_id") if isinstance(data, dict) else None
        card = self.cards.get(card_id) if isinstance(card_id, str) else None
        if card is None:
            raise FakeError(230099, f"fake: unknown card_id {card_id!r}")
        if card.message_id is not None:
            raise FakeError(230099, f"fake: card {card_id} was already sent")
        return card

    def _mark_sent(self, card: FakeCard | None, message: FakeMessage) -> None:
        if card is not None:
            card.message_id = message.message_id
            message.card_id = card.card_id
            card.timeline.append(CardOp(self.clock(), "send", text=message.message_id))

    # -- state helpers --------------------------------------------------------------

    def _target(self, message_id: str, *, create: bool) -> FakeMessage:
        message = self.message_by_id.get(message_id)
        if message is None:
            if not create:
                raise FakeError(230001, f"fake: unknown message_id {message_id}")
            message = self.add_message(message_id, chat_id=self.default_chat_id)
        if message.deleted:
            raise FakeError(230011)
        return message

    def _new_message(self, chat_id: str, msg_type: str, content: Any, **fields: Any) -> FakeMessage:
        message = FakeMessage(
            message_id=f"om_fake_{next(self._ids):04d}",
            chat_id=chat_id,
            msg_type=msg_type,
            content=content,
            sender_id=self.calling_app_id,
            sender_type="app",
            create_time_ms=now_ms(),
            **fields,
        )
        self.message_by_id[message.message_id] = message
        self.sent.append(message)
        if message.uuid:
            self._by_uuid[message.uuid] = message
        return message


def _message_content(body: Mapping[str, Any]) -> tuple[str, Any]:
    """(msg_type, decoded content) of a create/reply/patch body, as Feishu validates them."""
    msg_type, raw = body.get("msg_type"), body.get("content")
    if msg_type not in MSG_TYPES:
        raise FakeError(230001, f"invalid msg_type {msg_type!r}")
    if not isinstance(raw, str):
        raise FakeError(230001, "content must be a JSON string")
    try:
        content = json.loads(raw)
    except ValueError:
        raise FakeError(230001, "content is not valid JSON") from None
    if not isinstance(content, dict):
        raise FakeError(230001, "content must be a JSON object")
    key_name = MEDIA_KEYS.get(msg_type)
    if key_name is not None and not (isinstance(content.get(key_name), str) and content[key_name]):
        raise FakeError(230001, f"invalid message content: {msg_type} needs a {key_name}")
    if len(raw.encode()) > CONTENT_LIMITS.get(msg_type, 150 * 1024):
        raise FakeError(230025)
    return msg_type, content


def _decoded(raw: str) -> Any:
    # A merge_forward's content is not JSON; it is kept as the text it is.
    try:
        return json.loads(raw)
    except ValueError:
        return raw
