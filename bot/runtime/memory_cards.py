"""/memory and /memory clear: the card of what the bot remembers here, and its buttons.

In a direct message the card shows the person's own memories (and everyone's), in a group
the group's (and everyone's): never a person's memories in a group, where everyone reads
the card. A click counts only with a value this bot sealed for the very chat it is pressed
in, from someone who may forget that memory (``bot.memory.access``); the memory is read
again then (another click, the model or the console may have forgotten it first).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from bot.feishu.events import CardAction
from bot.feishu.memory_card import (
    MemoryRow,
    clear_card,
    clear_value,
    forget_value,
    memory_card,
)
from bot.governance.actions import toast
from bot.governance.seal import ButtonSeal
from bot.memory.access import may_forget, readable_in
from bot.store.memories import Memory, MemoryStore
from bot.timezones import time_zone

_WHOSE = {"person": "yours", "chat": "this group's", "org": "everyone's"}
NOT_HERE = "This button belongs to a card drawn in another chat."
NOT_YOURS = "Only the person who stored this memory, or an admin, may forget it."


class MemoryCards:
    def __init__(
        self,
        store: MemoryStore,
        *,
        is_admin: Callable[[str], bool],
        timezone: str,
        seal: ButtonSeal,
    ) -> None:
        self._store = store
        self._is_admin = is_admin
        self._zone = time_zone(timezone)
        self._seal = seal

    async def card(
        self, viewer: str, chat_id: str, chat_type: str, *, notice: str = ""
    ) -> dict[str, Any]:
        """The /memory card ``viewer`` is shown in this chat."""
        memories = await self._visible(viewer, chat_id, chat_type)
        private = chat_type == "p2p"
        rows = [self._row(m, viewer, chat_id, private) for m in memories]
        return memory_card(
            rows,
            title="What I remember for you" if private else "What I remember for this group",
            notice=notice,
            empty="Nothing remembered here yet. Ask me to remember something.",
        )

    async def clear_card(self, viewer: str, chat_id: str) -> dict[str, Any]:
        """/memory clear: how many of ``viewer``'s own memories would go, and the button."""
        count = len(await self._store.of_owner("person", viewer))
        return clear_card(count, self._seal.sealed(clear_value(viewer, drawn_in=chat_id)))

    async def click(self, action: CardAction) -> dict[str, Any]:
        value, actor, chat = action.value, action.operator_open_id, action.open_chat_id
        if not self._seal.valid(value):
            return toast("error", "This button is not one this bot made.")
        if not chat or value.get("chat") != chat:
            return toast("error", NOT_HERE)
        if value.get("op") == "clear":
            return await self._clear(actor, chat, str(value.get("owner") or ""))
        if value.get("op") != "forget":
            return toast("info", "This button is no longer active.")
        chat_type = "p2p" if value.get("private") is True else "group"
        memory = await self._store.get(str(value.get("memory_id") or ""))
        if memory is None:
            card = await self.card(actor, chat, chat_type)
            return toast("warning", "That memory was already forgotten.", card)
        if not readable_in(chat_type, chat, actor).may_read(memory):
            return toast("error", NOT_HERE)
        if not may_forget(memory, actor, self._is_admin):
            return toast("error", NOT_YOURS)
        if await self._store.forget(memory.id, actor=actor, via="card") is None:
            card = await self.card(actor, chat, chat_type)
            return toast("warning", "That memory was already forgotten.", card)
        notice = "Forgotten."
        return toast("success", notice, await self.card(actor, chat, chat_type, notice=notice))

    async def _clear(self, actor: str, chat: str, owner: str) -> dict[str, Any]:
        # Only the person the confirmation was drawn for: nobody clears another's memories.
        if owner != actor:
            return toast("error", "Only the person who asked may confirm this.")
        count = await self._store.forget_all("person", actor, actor=actor, via="command")
        notice = f"Forgot all {count} memories I kept for you."
        return toast("success", notice, clear_card(0, {}, notice=notice))

    async def _visible(self, viewer: str, chat_id: str, chat_type: str) -> list[Memory]:
        readable = readable_in(chat_type, chat_id, viewer)
        found: list[Memory] = []
        for scope, owner in readable.owners():
            found += await self._store.of_owner(scope, owner)
        return found

    def _row(self, memory: Memory, viewer: str, chat_id: str, private: bool) -> MemoryRow:
        value = forget_value(memory.id, drawn_in=chat_id)
        value["private"] = private  # drawn in a direct message
        return MemoryRow(
            memory_id=memory.id,
            text=memory.text,
            whose=_WHOSE[memory.scope],
            stored=datetime.fromtimestamp(memory.created_at, self._zone).strftime("%a %d %b %H:%M"),
            can_forget=may_forget(memory, viewer, self._is_admin),
            button=self._seal.sealed(value),
        )
