"""The group chats the bot is in that the people asking are in too."""

from __future__ import annotations

from typing import Annotated, Any

from lark_oapi.api.im.v1 import ListChatRequest
from pydantic import Field

from connectors.base import action

from .audience import Audience, current_audience, readers_text
from .common import WorkspaceTools, clip, items_of, more_hint


class ChatTools(WorkspaceTools):
    # A chat's name and description are its members' to see: the app lists every chat
    # the bot is in, so a listing keeps the ones the whole audience is in.

    @action(side_effect="read")
    async def feishu_list_chats(
        self,
        limit: Annotated[int | None, Field(ge=1, le=100)] = None,
        page_token: str | None = None,
    ) -> str:
        """List the group chats the bot and the asker are both in, most recently active
        first (in a group chat: only this chat).

        Args:
            limit: How many of the bot's chats to look through (default: the page size).
            page_token: From a previous result's "more" line, to continue the list.
        """
        audience = current_audience("Listing chats")
        if not audience.direct:
            return (
                f"In a group chat the bot names only this chat (chat_id {audience.chat_id}): "
                "everyone here reads its answer, so it lists no other chat. In a direct "
                "message with the bot it lists the chats you are in."
            )
        limit = limit or self.settings.page_size
        request = (
            ListChatRequest.builder()
            .user_id_type(self.settings.user_id_type)
            .sort_type("ByActiveTimeDesc")
            .page_size(limit)
        )
        if page_token:
            request.page_token(page_token)
        data = await self._data("im.chat.list", request.build(), "Listing chats")
        chats = [c for c in items_of(data) if await self._audience_in(audience, c)]
        who = readers_text(audience)
        if not chats:
            empty = f"None of the bot's chats on this page has {who} as a member."
            return "\n".join([empty, *more_hint(data)])
        lines = [f"Chats the bot is in with {who} ({len(chats)} shown):"]
        for chat in chats:
            bits = [str(chat.get("name") or "(no name)"), f"chat_id {chat.get('chat_id')}"]
            if chat.get("description"):
                bits.append(clip(str(chat["description"]), 120))
            if chat.get("external"):
                bits.append("external")
            lines.append("- " + " · ".join(bits))
        lines += more_hint(data)
        return "\n".join(lines)

    async def _audience_in(self, audience: Audience, chat: dict[str, Any]) -> bool:
        return await self._access.may_read_chat(audience, str(chat.get("chat_id") or ""))


__all__ = ["ChatTools"]
