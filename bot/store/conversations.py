"""Conversations and their history.

A scope (a chat, a thread, a DM: the router's scope key) has generations of conversations; the
active one is the highest generation, and `/reset` starts the next one. A scope without any
conversation is at generation 1 with an empty history: `load()` reports it so without creating
anything, the first finished turn creates it (`TurnJournal.finish_turn`), and a `/reset` moves
the scope to generation 2, so that a turn still running on generation 1 cannot write into the
fresh conversation. Creation goes through `INSERT ... ON CONFLICT DO NOTHING` on
unique(scope_key, generation) followed by a select, so concurrent first messages (or resets) of
one scope end with a single conversation.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Integer, RowMapping, and_, bindparam, func, select
from sqlalchemy.engine import Connection

from bot.store.db import Database
from bot.store.models import ROLES, ConversationMessageRow, ConversationRow, HistoryRole, table_of
from bot.store.prepared import Prepared

_conversations = table_of(ConversationRow)
_messages = table_of(ConversationMessageRow)

# The active conversation of a scope and its last `limit` messages, in one statement: one row
# a message, oldest first, or one row with NULL message columns when it has none.
_active = _conversations.alias("active")
_loaded = _messages.alias("loaded")
_LOAD = Prepared(
    select(
        _active.c.id,
        _active.c.generation,
        _loaded.c.role,
        _loaded.c.content,
        _loaded.c.message_id,
    )
    .select_from(
        _active.outerjoin(
            _loaded,
            and_(
                _loaded.c.conversation_id == _active.c.id,
                _loaded.c.id.in_(
                    select(_messages.c.id)
                    .where(_messages.c.conversation_id == _active.c.id)
                    .order_by(_messages.c.id.desc())
                    .limit(bindparam("limit", type_=Integer))
                ),
            ),
        )
    )
    .where(
        _active.c.id
        == select(_conversations.c.id)
        .where(_conversations.c.scope_key == bindparam("scope_key"))
        .order_by(_conversations.c.generation.desc())
        .limit(1)
        .scalar_subquery()
    )
    .order_by(_loaded.c.id)
)
_LATEST = (
    select(_conversations)
    .where(_conversations.c.scope_key == bindparam("scope_key"))
    .order_by(_conversations.c.generation.desc())
    .limit(1)
)
_MAX_GENERATION = select(func.max(_conversations.c.generation)).where(
    _conversations.c.scope_key == bindparam("scope_key")
)
_BY_ID = select(_conversations).where(_conversations.c.id == bindparam("id"))
_HISTORY = (
    select(_messages.c.role, _messages.c.content, _messages.c.message_id)
    .where(_messages.c.conversation_id == bindparam("conversation_id"))
    .order_by(_messages.c.id.desc())
    .limit(bindparam("limit", type_=Integer))
)
_APPEND = _messages.insert().returning(_messages.c.id)


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    scope_key: str
    generation: int
    created_at: float


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    role: HistoryRole
    content: str
    message_id: str | None = None


@dataclass(frozen=True, slots=True)
class LoadedConversation:
    """What a turn starts from: the scope's active conversation and its latest history.

    `conversation_id` is None (and `generation` 1) while the scope has no conversation yet.
    """

    scope_key: str
    conversation_id: str | None
    generation: int
    history: list[HistoryEntry]


def _conversation(row: RowMapping) -> Conversation:
    return Conversation(
        id=row["id"],
        scope_key=row["scope_key"],
        generation=row["generation"],
        created_at=row["created_at"],
    )


def conversation_insert(db: Database) -> Prepared:
    """The insert of a conversation row that does nothing when its (scope_key, generation)
    exists; parameters id, scope_key, generation, created_at. Returns the new id."""
    return Prepared(
        db.insert(_conversations)
        .on_conflict_do_nothing(index_elements=["scope_key", "generation"])
        .returning(_conversations.c.id)
    )


class ConversationPrefetch:
    """Loads read ahead, in the transaction that took the conversation's lock: the turn
    that runs next under that lock finds its conversation here instead of reading it in a
    transaction of its own (one fewer per message).

    A loaded conversation stays true while its lock is held (no other process writes the
    conversation) until this process writes it; the lock forgets it when it is released,
    and `ConversationStore.reset` forgets it first.
    """

    def __init__(self, history_limit: int) -> None:
        self._limit = max(history_limit, 0)
        self._loaded: dict[str, LoadedConversation] = {}

    def read(self, connection: Connection, scope_key: str) -> LoadedConversation:
        """The load, inside the caller's transaction."""
        return _load(connection, scope_key, self._limit)

    def keep(self, scope_key: str, loaded: LoadedConversation) -> None:
        self._loaded[scope_key] = loaded

    def forget(self, scope_key: str) -> None:
        self._loaded.pop(scope_key, None)

    def take(self, scope_key: str, history_limit: int) -> LoadedConversation | None:
        if max(history_limit, 0) != self._limit:
            return None
        return self._loaded.pop(scope_key, None)


class ConversationStore:
    """Load, get, reset and extend the conversations of scopes."""

    def __init__(
        self,
        db: Database,
        *,
        clock: Callable[[], float] = time.time,
        prefetch: ConversationPrefetch | None = None,
    ) -> None:
        self._db = db
        self._clock = clock
        self._insert_conversation = conversation_insert(db)
        self._prefetch = prefetch

    async def load(self, scope_key: str, *, history_limit: int) -> LoadedConversation:
        """The scope's active conversation and its last `history_limit` turns, oldest first,
        in one read transaction (or read ahead with the conversation's lock); creates
        nothing."""
        if self._prefetch is not None:
            loaded = self._prefetch.take(scope_key, history_limit)
            if loaded is not None:
                return loaded
        return await self._db.transact(_load, scope_key, max(history_limit, 0), write=False)

    async def active(self, scope_key: str) -> Conversation:
        """The scope's current conversation, created (generation 1) on first use."""
        return await self._db.transact(
            _active_conversation, self._insert_conversation, scope_key, self._clock()
        )

    async def reset(self, scope_key: str) -> Conversation:
        """Start the scope's next conversation; earlier history stays with the old one.

        A scope without conversations counts as being at generation 1, so its reset starts
        generation 2. Two resets racing on one scope create one new generation, and both
        return it.
        """
        if self._prefetch is not None:
            self._prefetch.forget(scope_key)  # it showed the generation before the reset
        return await self._db.transact(_reset, self._insert_conversation, scope_key, self._clock())

    async def get(self, conversation_id: str) -> Conversation | None:
        return await self._db.transact(_get, conversation_id, write=False)

    async def append(
        self, conversation_id: str, role: str, content: str, *, message_id: str | None = None
    ) -> int:
        """Add one turn (`user` or `assistant`); returns its id, which orders the history."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, not {role!r}")
        return await self._db.transact(
            _append,
            {
                "conversation_id": conversation_id,
                "role": role,
                "content": content,
                "message_id": message_id,
                "created_at": self._clock(),
            },
        )

    async def history(self, conversation_id: str, *, limit: int) -> list[HistoryEntry]:
        """The last `limit` turns of the conversation, oldest first."""
        if limit <= 0:
            return []
        return await self._db.transact(_history, conversation_id, limit, write=False)


# The transactions, run by `Database.transact` with a synchronous connection.


def _load(connection: Connection, scope_key: str, limit: int) -> LoadedConversation:
    rows = _LOAD.all(connection, {"scope_key": scope_key, "limit": limit})
    if not rows:
        return LoadedConversation(scope_key, None, 1, [])
    history = [
        HistoryEntry(row["role"], row["content"], row["message_id"])
        for row in rows
        if row["role"] is not None
    ]
    return LoadedConversation(scope_key, rows[0]["id"], rows[0]["generation"], history)


def _active_conversation(
    connection: Connection, insert: Prepared, scope_key: str, now: float
) -> Conversation:
    latest = _latest(connection, scope_key)
    if latest is None:
        _insert(connection, insert, scope_key, 1, now)
        latest = _latest(connection, scope_key)
    assert latest is not None
    return _conversation(latest)


def _reset(connection: Connection, insert: Prepared, scope_key: str, now: float) -> Conversation:
    current = connection.execute(_MAX_GENERATION, {"scope_key": scope_key}).scalar()
    _insert(connection, insert, scope_key, (current or 1) + 1, now)
    latest = _latest(connection, scope_key)
    assert latest is not None
    return _conversation(latest)


def _get(connection: Connection, conversation_id: str) -> Conversation | None:
    row = connection.execute(_BY_ID, {"id": conversation_id}).mappings().first()
    return None if row is None else _conversation(row)


def _append(connection: Connection, values: dict[str, Any]) -> int:
    return int(connection.execute(_APPEND, values).scalar_one())


def _history(connection: Connection, conversation_id: str, limit: int) -> list[HistoryEntry]:
    result = connection.execute(_HISTORY, {"conversation_id": conversation_id, "limit": limit})
    return [HistoryEntry(role, content, message_id) for role, content, message_id in result][::-1]


def _latest(connection: Connection, scope_key: str) -> RowMapping | None:
    return connection.execute(_LATEST, {"scope_key": scope_key}).mappings().first()


def _insert(
    connection: Connection, insert: Prepared, scope_key: str, generation: int, now: float
) -> None:
    insert.scalar(
        connection,
        {
            "id": uuid.uuid4().hex,
            "scope_key": scope_key,
            "generation": generation,
            "created_at": now,
        },
    )
