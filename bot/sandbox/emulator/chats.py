"""Chats: the chats the bot is in, a chat's message history, and whether a message may be
sent to a receiver at all."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .params import paged, query_int, user_id_type
from .wire import TENANT_KEY, FakeError
from .workspace_state import WorkspaceState


@dataclass
class FakeChat:
    chat_id: str
    name: str
    description: str = ""
    owner_open_id: str = ""
    bot_is_member: bool = True
    external: bool = False
    # The people in it (open_ids): what a person's user token may search and read.
    members: set[str] = field(default_factory=set)

    def to_wire(self) -> dict[str, Any]:
        return {
            "chat_id": self.chat_id,
            "avatar": "https://example.invalid/chat.png",
            "name": self.name,
            "description": self.description,
            "owner_id": self.owner_open_id,
            "owner_id_type": "open_id",
            "external": self.external,
            "tenant_key": TENANT_KEY,
            "chat_status": "normal",
        }


class ChatsApi(WorkspaceState):
    def add_chat(
        self, chat_id: str, name: str, description: str = "", owner: str = "", **fields: Any
    ) -> FakeChat:
        chat = FakeChat(chat_id, name, description, owner, **fields)
        self.chats[chat_id] = chat
        return chat

    def check_receiver(self, id_type: str, receive_id: str, *, strict: bool) -> None:
        """Message create: the bot must be in a chat it knows; strict: ids must be known."""
        if id_type == "chat_id":
            chat = self.chats.get(receive_id)
            if chat is not None and not chat.bot_is_member:
                raise FakeError(230002)
            if chat is None and strict and not self._chat_has_messages(receive_id):
                raise FakeError(230001, "invalid receive_id: no such chat")
        elif (
            strict
            and id_type in ("open_id", "user_id", "union_id")
            and self._user(receive_id, id_type) is None
        ):
            raise FakeError(230013)

    async def _list_chats(self, request: web.Request) -> web.Response:
        user_id_type(request)
        sort = request.query.get("sort_type", "ByCreateTimeAsc")
        if sort not in ("ByCreateTimeAsc", "ByActiveTimeDesc"):
            raise FakeError(99992402, "field validation failed: sort_type")
        chats = [c.to_wire() for c in self.chats.values() if c.bot_is_member]
        return self._fake._ok(paged(chats, request, default=20, maximum=100))

    async def _list_messages(self, request: web.Request) -> web.Response:
        query = request.query
        kind, container = query.get("container_id_type"), query.get("container_id")
        if kind not in ("chat", "thread"):
            raise FakeError(99992402, "field validation failed: container_id_type")
        if not container:
            raise FakeError(99992402, "field validation failed: container_id is required")
        messages = list(self._fake.message_by_id.values())
        if kind == "chat":
            chat = self.chats.get(container)
            if chat is None and not self._chat_has_messages(container):
                raise FakeError(230001, "invalid container_id: no such chat")
            if chat is not None and not chat.bot_is_member:
                raise FakeError(230002)
            messages = [m for m in messages if m.chat_id == container]
        else:
            messages = [m for m in messages if m.thread_id == container]
        start, end = query_int(request, "start_time", 0), query_int(request, "end_time", 2**62)
        messages = [m for m in messages if start <= m.create_time_ms // 1000 <= end]
        sort = query.get("sort_type", "ByCreateTimeAsc")
        if sort not in ("ByCreateTimeAsc", "ByCreateTimeDesc"):
            raise FakeError(99992402, "field validation failed: sort_type")
        messages.sort(key=lambda m: (m.create_time_ms, m.message_id))
        if sort == "ByCreateTimeDesc":
            messages.reverse()
        wire = [m.to_wire() for m in messages]
        return self._fake._ok(paged(wire, request, default=20, maximum=50))
