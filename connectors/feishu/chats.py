"""The group chats the bot is a member of."""

from __future__ import annotations

from typing import Annotated

from lark_oapi.api.im.v1 import ListChatRequest
from pydantic import Field

from connectors.base import action

from .common import WorkspaceTools, clip, items_of, more_hint


class ChatTools(WorkspaceTools):
    @action(side_effect="read")
    async def feishu_list_chats(
        self,
        limit: Annotated[int | None, Field(ge=1, le=100)] = None,
        page_token: str | None = None,
    ) -> str:
        """List the group chats the bot is a member of, most recently active first.

        Args:
            limit: The most chats to return (default: the configured page size).
            page_token: From a previous result's "more" line, to continue the list.
        """
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
        chats = items_of(data)
        if not chats:
            return "The bot is not a member of any group chat."
        lines = [f"Chats the bot is in ({len(chats)} shown):"]
        for chat in chats:
            bits = [str(chat.get("name") or "(no name)"), f"chat_id {chat.get('chat_id')}"]
            if chat.get("description"):
                bits.append(clip(str(chat["description"]), 120))
            if chat.get("external"):
                bits.append("external")
            lines.append("- " + " · ".join(bits))
        lines += more_hint(data)
        return "\n".join(lines)


__all__ = ["ChatTools"]
