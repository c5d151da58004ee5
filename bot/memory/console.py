"""Memories as the web console sees them: every one of the app listed, and forgotten as an
admin (the console acts as the first admin of LARKGATE_ADMINS, so the audit log names a
person; refused when there is none)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from bot.store.memories import Memory, MemoryStore

ForgetOutcome = Literal["forgotten", "unknown", "forbidden"]


@dataclass(frozen=True, slots=True)
class ConsoleForget:
    outcome: ForgetOutcome
    memory: Memory | None = None


def memory_json(memory: Memory) -> dict[str, Any]:
    return {
        "id": memory.id,
        "scope": memory.scope,
        "owner": memory.owner,
        "text": memory.text,
        "created_by": memory.created_by,
        "chat_id": memory.chat_id,
        "created_at": memory.created_at,
        "last_used_at": memory.last_used_at,
        "uses": memory.uses,
    }


class MemoryConsole:
    def __init__(self, store: MemoryStore, *, admin: Callable[[], str | None]) -> None:
        self._store = store
        self._admin = admin

    async def memories(self, limit: int = 500) -> list[dict[str, Any]]:
        return [memory_json(m) for m in await self._store.newest(limit=limit)]

    async def forget(self, memory_id: str) -> ConsoleForget:
        actor = self._admin()
        if actor is None:
            return ConsoleForget("forbidden", await self._store.get(memory_id))
        forgotten = await self._store.forget(memory_id, actor=actor, via="console")
        return (
            ConsoleForget("unknown") if forgotten is None else ConsoleForget("forgotten", forgotten)
        )
