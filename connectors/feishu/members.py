"""What Feishu says about a chat, asked with the app's token: who its members are
(``GET /im/v1/chats/:chat_id/members``, 100 a page, bots left out) and whether it is an
external chat (``GET /im/v1/chats/:chat_id``). The bot must be in the chat for either."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from lark_oapi.api.im.v1 import GetChatRequest

from bot.feishu.client import FeishuClient
from bot.feishu.errors import FeishuError

from .errors import tool_error

# 2,000 people (pages of 100): a bigger chat is not listed whole, so nobody is confirmed
# absent from it (and a group that big is not "everyone may read this" for a per-person
# grant).
MAX_MEMBER_PAGES = 20
# A chat id as Feishu writes them (oc_ and letters, digits, _ or -): anything else is
# never put into a request path.
_CHAT_ID = re.compile(r"oc_[A-Za-z0-9_-]{1,120}")


def is_chat_id(value: str) -> bool:
    return _CHAT_ID.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class ChatMembers:
    """The people of a chat (open_ids); ``complete`` when they are all of them."""

    people: frozenset[str]
    complete: bool


# A chat whose members the bot may not list (it is not in it, or there is no such chat).
UNLISTED = ChatMembers(frozenset(), complete=False)


async def chat_members(client: FeishuClient, chat_id: str) -> ChatMembers:
    """The members of ``chat_id``; :data:`UNLISTED` when Feishu will not list them.
    A failure that says nothing about the chat (scope, rate limit, network) is raised as a
    ToolError, so that it is neither taken for "not a member" nor remembered."""
    if not is_chat_id(chat_id):
        return UNLISTED
    people: set[str] = set()
    page_token = ""
    for _ in range(MAX_MEMBER_PAGES):
        try:
            page = await client.chat_members(chat_id, page_token=page_token)
        except FeishuError as exc:
            if _about_the_chat(exc):
                return UNLISTED
            raise tool_error(exc, "Checking the chat's members") from exc
        people.update(page.open_ids)
        page_token = page.next_page
        if not page_token:
            return ChatMembers(frozenset(people), complete=True)
    return ChatMembers(frozenset(people), complete=False)


async def chat_is_external(client: FeishuClient, chat_id: str) -> bool | None:
    """Whether ``chat_id`` is an external chat (people of other tenants in it); None when
    Feishu will not say."""
    if not is_chat_id(chat_id):
        return None
    request = GetChatRequest.builder().chat_id(chat_id).user_id_type("open_id").build()
    data = await _data(client, "im.chat.get", request)
    external = data.get("external") if data is not None else None
    return external if isinstance(external, bool) else None


async def _data(client: FeishuClient, endpoint: str, request: Any) -> dict[str, Any] | None:
    """The call's ``data``; None when Feishu refused it for this chat."""
    try:
        body = await client.call(endpoint, request)
    except FeishuError as exc:
        if _about_the_chat(exc):
            return None
        raise tool_error(exc, "Checking the chat") from exc
    data = body.get("data")
    return data if isinstance(data, dict) else {}


def _about_the_chat(exc: FeishuError) -> bool:
    """A refusal about this chat (the bot is not in it, there is no such chat), rather
    than one about the call (scope, rate limit, network, a server error)."""
    return type(exc) is FeishuError and (exc.http_status or 0) < 500


__all__ = [
    "MAX_MEMBER_PAGES",
    "UNLISTED",
    "ChatMembers",
    "chat_is_external",
    "chat_members",
    "is_chat_id",
]
