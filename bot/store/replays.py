"""The replay guard: a request is acted on once, across every process.

Signed requests are accepted for a window (LARKGATE_MAX_EVENT_AGE_SECONDS) around their
timestamp, so the exact bytes of an earlier click could be posted again inside it. Each
acted-on request's key (a card callback's event id) is remembered here until the window has
passed: the first sighting inserts it, every later one finds it. The insert is one
conflict-free statement, so of two replicas receiving the same bytes at once exactly one acts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import bindparam, delete
from sqlalchemy.engine import Connection

from bot.store.db import Database
from bot.store.models import ReplayGuardRow, table_of

_guard = table_of(ReplayGuardRow)
_PURGE = delete(_guard).where(_guard.c.expires_at < bindparam("now"))


class ReplayGuard:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock
        self._remember = (
            db.insert(_guard)
            .on_conflict_do_nothing(index_elements=["key"])
            .values(key=bindparam("p_key"), expires_at=bindparam("p_expires_at"))
            .returning(_guard.c.key)
        )

    async def first_sighting(self, key: str, *, remember_seconds: float) -> bool:
        """True the first time ``key`` is seen within ``remember_seconds``; False after."""
        now = self._clock()
        return await self._db.transact(
            _first_sighting, self._remember, key, now, now + remember_seconds
        )

    async def purge(self) -> int:
        """Forget keys whose window has passed; returns how many."""
        return await self._db.transact(_purge, self._clock())


def _first_sighting(
    connection: Connection, remember: Any, key: str, now: float, expires_at: float
) -> bool:
    # A key whose window passed is free again (a purge may not have run yet).
    connection.execute(delete(_guard).where(_guard.c.key == key, _guard.c.expires_at < now))
    params = {"p_key": key, "p_expires_at": expires_at}
    return connection.execute(remember, params).first() is not None


def _purge(connection: Connection, now: float) -> int:
    return connection.execute(_PURGE, {"now": now}).rowcount or 0
