"""Chats: the chats the bot is in, one chat's facts and members, a chat's message history,
and whether a message may be sent to a receiver at all.

As Feishu answers them with the tenant token: the bot must be in a chat to read its facts,
members or history (232011 for facts and members, 230002 for history), an unknown chat id
is 232006 (230001 for history), and the member list leaves the chat's bots out."""

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
    # The people in it (open_ids): what a person's user token may search and read, and
    # what the member list answers.
    members: set[str] = field(default_factory=set)
    # Members from another tenant (open_id -> their tenant_key) in an external chat.
    outside_members: dict[str, str] = field(default_factory=dict)

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

    def facts_to_wire(self, user_count: int) -> dict[str, Any]:
        """What ``GET /im/v1/chats/:chat_id`` answers (a group's settings and counts)."""
        return {
            "avatar": "https://example.invalid/chat.png",
            "name": self.name,
            "description": self.description,
            "i18n_names": {},
            "add_member_permission": "all_members",
            "share_card_permission": "allowed",
            "at_all_permission": "all_members",
            "edit_permission": "all_members",
            "owner_id_type": "open_id",
            "owner_id": self.owner_open_id,
            "chat_mode": "group",
            "chat_type": "private",
            "chat_tag": "inner",
            "join_message_visibility": "all_members",
            "leave_message_visibility": "all_members",
            "membership_approval": "no_approval_required",
            "moderation_permission": "all_members",
            "external": self.external,
            "tenant_key": TENANT_KEY,
            "user_count": str(user_count),
            "bot_count": "1" if self.bot_is_member else "0",
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

    async def _get_chat(self, request: web.Request) -> web.Response:
        chat = self._readable_chat(request.match_info["chat_id"])
        user_id_type(request)
        people = len(chat.members) + len(chat.outside_members)
        return self._fake._ok(chat.facts_to_wire(people))

    async def _chat_members(self, request: web.Request) -> web.Response:
        chat = self._readable_chat(request.match_info["chat_id"])
        id_type = request.query.get("member_id_type", "open_id")
        if id_type not in ("open_id", "union_id", "user_id"):
            raise FakeError(232015)
        wire = []
        for open_id, tenant in sorted(
            [(m, TENANT_KEY) for m in chat.members] + list(chat.outside_members.items())
        ):
            user = self.users.get(open_id)
            wire.append(
                {
                    "member_id_type": id_type,
                    "member_id": user.id_of(id_type) if user is not None else open_id,
                    "name": user.name if user is not None else open_id,
                    "tenant_key": tenant,
                }
            )
        page = paged(wire, request, default=20, maximum=100)
        page["member_total"] = len(wire)
        return self._fake._ok(page)

    def _readable_chat(self, chat_id: str) -> FakeChat:
        """A chat the bot may read the facts and members of (232006 / 232011 else)."""
        chat = self.chats.get(chat_id)
        if chat is None:
            raise FakeError(232006)
        if not chat.bot_is_member:
            raise FakeError(232011)
        return chat

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
