"""Conversations and their history.

A scope (a chat, a thread, a DM: the router's scope key) has generations of conversations; the
active one is the highest generation, and `/reset` starts the next one. Creation goes through
`INSERT ... ON CONFLICT DO NOTHING` on unique(scope_key, generation) followed by a select, so
concurrent first messages (or resets) of one scope end with a single conversation.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from bot.store.db import Database
from bot.store.models import ROLES, ConversationMessageRow, ConversationRow

_conversations = ConversationRow.__table__
_messages = ConversationMessageRow.__table__


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    scope_key: str
    generation: int
    created_at: float


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    role: str
    content: str
    message_id: str | None = None


def _conversation(row: Mapping[str, Any]) -> Conversation:
    return Conversation(
        id=row["id"],
        scope_key=row["scope_key"],
        generation=row["generation"],
        created_at=row["created_at"],
    )


class ConversationStore:
    """Get, reset and extend the conversations of scopes."""

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock

    async def active(self, scope_key: str) -> Conversation:
        """The scope's current conversation, created (generation 1) on first use."""
        async with self._db.session() as session:
            latest = await self._latest(session, scope_key)
            if latest is not None:
                return _conversation(latest)
            await self._insert(session, scope_key, 1)
            latest = await self._latest(session, scope_key)
        assert latest is not None
        return _conversation(latest)

    async def reset(self, scope_key: str) -> Conversation:
        """Start the scope's next conversation; earlier history stays with the old one.

        Two resets racing on one scope create one new generation, and both return it.
        """
        async with self._db.session() as session:
            current = await session.exec(
                select(func.max(_conversations.c.generation)).where(
                    _conversations.c.scope_key == scope_key
                )
            )
            await self._insert(session, scope_key, (current.scalar() or 0) + 1)
            latest = await self._latest(session, scope_key)
        assert latest is not None
        return _conversation(latest)

    async def get(self, conversation_id: str) -> Conversation | None:
        async with self._db.session(read_only=True) as session:
            result = await session.exec(
                select(_conversations).where(_conversations.c.id == conversation_id)
            )
            row = result.mappings().first()
        return None if row is None else _conversation(row)

    async def append(
        self, conversation_id: str, role: str, content: str, *, message_id: str | None = None
    ) -> int:
        """Add one turn (`user` or `assistant`); returns its id, which orders the history."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, not {role!r}")
        async with self._db.session() as session:
            result = await session.exec(
                _messages.insert()
                .values(
                    conversation_id=conversation_id,
                    role=role,
                    content=content,
                    message_id=message_id,
                    created_at=self._clock(),
                )
                .returning(_messages.c.id)
            )
            return result.scalar_one()

    async def history(self, conversation_id: str, *, limit: int) -> list[HistoryEntry]:
        """The last `limit` turns of the conversation, oldest first."""
        if limit <= 0:
            return []
        async with self._db.session(read_only=True) as session:
            result = await session.exec(
                select(_messages.c.role, _messages.c.content, _messages.c.message_id)
                .where(_messages.c.conversation_id == conversation_id)
                .order_by(_messages.c.id.desc())
                .limit(limit)
            )
            rows = result.all()
        return [HistoryEntry(role, content, message_id) for role, content, message_id in rows][::-1]

    async def _latest(self, session: Any, scope_key: str) -> Mapping[str, Any] | None:
        result = await session.exec(
            select(_conversations)
            .where(_conversations.c.scope_key == scope_key)
            .order_by(_conversations.c.generation.desc())
            .limit(1)
        )
        return result.mappings().first()

    async def _insert(self, session: Any, scope_key: str, generation: int) -> None:
        await session.exec(
            self._db.insert(_conversations)
            .values(
                id=uuid.uuid4().hex,
                scope_key=scope_key,
                generation=generation,
                created_at=self._clock(),
            )
            .on_conflict_do_nothing(index_elements=["scope_key", "generation"])
        )
