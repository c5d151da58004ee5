"""Memory, built from ``LARKGATE_MEMORY*``: the store (the app's), the model's tools, the
recall a turn makes before its run, and the /memory card; nothing at all when it is off."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.config import Settings
from bot.engine import Tool
from bot.feishu.events import InboundMessage
from bot.governance.seal import ButtonSeal
from bot.memory.recall import Recall
from bot.memory.tools import MemoryTools
from bot.runtime.memory_cards import MemoryCards
from bot.runtime.turn.runner import MemoryRecall
from bot.store.memories import MemoryStore

if TYPE_CHECKING:  # parts names Memory: the foundation is only a type here
    from .parts import Foundation


@dataclass(frozen=True, kw_only=True)
class Memory:
    store: MemoryStore
    tools: list[Tool]
    recall: MemoryRecall
    cards: MemoryCards


def build_memory(settings: Settings, base: Foundation) -> Memory | None:
    config = settings.memory()
    if not config.enabled:
        return None
    governance = settings.governance()
    store = MemoryStore(base.database, clock=base.clock, app=base.app)
    recall = Recall(store, config)

    async def recall_for(message: InboundMessage, query: str) -> str:
        return await recall.block(
            chat_type=message.chat_type,
            chat_id=message.chat_id,
            asker=message.sender_open_id,
            question=query,
        )

    return Memory(
        store=store,
        tools=MemoryTools(store, config, is_admin=governance.is_admin).tools(),
        recall=recall_for,
        cards=MemoryCards(
            store,
            is_admin=governance.is_admin,
            timezone=settings.larkgate_timezone,
            seal=ButtonSeal(governance.button_key),
        ),
    )
