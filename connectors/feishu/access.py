"""Whether everyone who reads the answer may see something the app can read.

Feishu grants a thing to people and to group chats (a document's collaborators, an event's
attendees, a task's members). The app reads it for a run only when that grant covers the
run's whole audience (:mod:`.audience`):

- in a direct message, every asker is granted it themselves, or is a member of a chat it
  is granted to;
- in a group chat, it is granted to this chat, or every member of this chat is granted it
  themselves (the member list must be complete).

A chat's messages are the chat's own grant: the current chat's history may be read; in a
direct message, another chat's when every asker is a member of it; in a group, no other
chat's (its members are not all in that chat, or the bot would not need to read it out).
"""

from __future__ import annotations

from collections.abc import Collection

from .audience import Audience
from .brief_cache import BriefCache
from .members import ChatMembers, is_chat_id

# In a direct message, how many of the chats a thing is shared with are asked for their
# members (one call each) to find the asker in one of them.
MAX_SHARED_CHATS = 5


class ReadAccess:
    def __init__(
        self,
        members: BriefCache[str, ChatMembers],
        external: BriefCache[str, bool | None],
    ) -> None:
        self._members = members
        self._external = external

    async def may_read_chat(self, audience: Audience, chat_id: str) -> bool:
        """Whether the audience may read ``chat_id``'s messages."""
        if chat_id == audience.chat_id:
            return True
        if not audience.direct or not is_chat_id(chat_id):
            return False
        return await self.covers(audience, people=(), chats=(chat_id,))

    async def covers(
        self, audience: Audience, people: Collection[str], chats: Collection[str]
    ) -> bool:
        """Whether a grant to ``people`` (open_ids) and ``chats`` covers the audience."""
        if audience.direct:
            for asker in audience.askers:
                if not asker:
                    return False  # a sender Feishu did not name is granted nothing
                if asker not in people and not await self._in_one_of(asker, chats):
                    return False
            return True
        if audience.chat_id in chats:
            return True
        group = await self._members.get(audience.chat_id)
        readers = group.people | set(audience.askers)
        return group.complete and all(reader and reader in people for reader in readers)

    async def inside_tenant(self, audience: Audience) -> bool:
        """Whether everyone reading is of the app's own tenant. A direct message is: a
        bot is reachable only by the people of the tenants that installed its app. A
        group is when Feishu says it is not an external chat."""
        if audience.direct:
            return True
        return await self._external.get(audience.chat_id) is False

    async def _in_one_of(self, person: str, chats: Collection[str]) -> bool:
        for chat_id in sorted(c for c in chats if is_chat_id(c))[:MAX_SHARED_CHATS]:
            if person in (await self._members.get(chat_id)).people:
                return True
        return False


__all__ = ["MAX_SHARED_CHATS", "ReadAccess"]
