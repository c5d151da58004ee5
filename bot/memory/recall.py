"""The recall before a run starts: the memories its chat may read (``access``) that the
question's terms find, as the instructions' memory section (``render``)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.memory.access import readable_in
from bot.memory.render import memory_block
from bot.memory.terms import query_terms
from bot.store.memories import MemoryStore


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    """``LARKGATE_MEMORY*``: on or off, the caps, and what a recall may add to a prompt."""

    enabled: bool = True
    per_person: int = 200
    per_chat: int = 500  # a group's, and the organisation's
    recall_tokens: int = 400
    recall_limit: int = 8


class Recall:
    def __init__(self, store: MemoryStore, config: MemoryConfig) -> None:
        self._store = store
        self._config = config

    async def block(self, *, chat_type: str, chat_id: str, asker: str, question: str) -> str:
        """The memory section of the run's instructions ("" when none is relevant)."""
        words = query_terms(question)
        if not words:
            return ""
        found = await self._store.recall(
            readable_in(chat_type, chat_id, asker), words, limit=self._config.recall_limit
        )
        return memory_block(found, budget_tokens=self._config.recall_tokens)
