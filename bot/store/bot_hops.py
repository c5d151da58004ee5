"""Bots' messages in a row per conversation, shared by every process (the loop guard).

One statement a message: a bot's message adds one to its conversation's count and returns
it with whether the cutoff was already said; a person's message sets the count to 0. An
upsert, so replicas count together and no increment is lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import bindparam, update
from sqlalchemy.engine import Connection

from bot.store.db import Database
from bot.store.models import BotHopsRow, table_of

_hops = table_of(BotHopsRow)
_c = _hops.c
_RESET = (
    update(_hops)
    .where(_c.scope_key == bindparam("p_scope"), _c.hops > 0)
    .values(hops=0, told=False, updated_at=bindparam("p_now"))
)
_TELL = (
    update(_hops)
    .where(_c.scope_key == bindparam("p_scope"), _c.told.is_(False))
    .values(told=True)
    .returning(_c.scope_key)
)


class BotHopsStore:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock
        insert = db.insert(_hops)
        self._add = insert.on_conflict_do_update(
            index_elements=["scope_key"],
            set_={"hops": _c.hops + 1, "updated_at": insert.excluded.updated_at},
        ).returning(_c.hops)

    async def from_bot(self, scope_key: str) -> int:
        """Count a bot's message in ``scope_key``: bots' messages in a row, this one included."""
        values = {"scope_key": scope_key, "hops": 1, "told": False, "updated_at": self._clock()}
        return await self._db.transact(_scalar, self._add.values(values))

    async def from_person(self, scope_key: str) -> None:
        """A person spoke in ``scope_key``: bots may answer each other again."""
        await self._db.transact(_execute, _RESET, {"p_scope": scope_key, "p_now": self._clock()})

    async def claim_telling(self, scope_key: str) -> bool:
        """True for the one caller that is to say the cutoff in this run of bot messages."""
        return await self._db.transact(_claimed, _TELL, {"p_scope": scope_key})


def _scalar(connection: Connection, statement: Any) -> int:
    return int(connection.execute(statement).scalar_one())


def _execute(connection: Connection, statement: Any, params: dict[str, Any]) -> None:
    connection.execute(statement, params)


def _claimed(connection: Connection, statement: Any, params: dict[str, Any]) -> bool:
    return connection.execute(statement, params).first() is not None
