"""Conversation locks shared by every process on the database.

A process takes a conversation's lock before running its turns and holds it while
more of its messages are queued, renewing the lease as it goes. The lock is a row
with an owner and a lease: taken by an upsert that only succeeds when the row is free,
ours already, or its lease has lapsed (the holder crashed), so it works the same on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from sqlalchemy import bindparam, delete, or_, update
from sqlalchemy.engine import Connection

from bot.store.db import Database
from bot.store.models import ConversationLockRow, table_of
from bot.store.prepared import Prepared

_locks = table_of(ConversationLockRow)
T = TypeVar("T")

_RENEW = (
    update(_locks)
    .where(
        _locks.c.owner == bindparam("p_owner"),
        _locks.c.scope_key.in_(bindparam("keys", expanding=True)),
    )
    .values(lease_until=bindparam("until"))
    .returning(_locks.c.scope_key)
)
_RELEASE = delete(_locks).where(
    _locks.c.scope_key.in_(bindparam("keys", expanding=True)),
    _locks.c.owner == bindparam("p_owner"),
)


class ConversationLocks:
    def __init__(
        self,
        db: Database,
        *,
        owner: str,
        lease_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._owner = owner
        self._lease = lease_seconds
        self._clock = clock
        insert = db.insert(_locks)
        self._take = Prepared(
            insert.on_conflict_do_update(
                index_elements=["scope_key"],
                set_={"owner": insert.excluded.owner, "lease_until": insert.excluded.lease_until},
                where=or_(
                    _locks.c.owner == insert.excluded.owner,
                    _locks.c.lease_until < bindparam("now"),
                ),
            ).returning(_locks.c.owner)
        )

    async def try_acquire(self, key: str) -> bool:
        """Take the lock of ``key`` if nobody else holds it; True when it is ours."""
        won, _ = await self.try_acquire_reading(key, None)
        return won

    async def try_acquire_reading(
        self, key: str, read: Callable[[Connection, str], T] | None
    ) -> tuple[bool, T | None]:
        """``try_acquire``, and when the lock is ours, ``read(connection, key)`` in the same
        transaction (what the holder reads first anyway, without a round trip of its own)."""
        now = self._clock()
        values = {
            "scope_key": key,
            "owner": self._owner,
            "lease_until": now + self._lease,
            "now": now,
        }
        # One conditional upsert, then reads: no transaction needed (see Database.transact).
        return await self._db.transact(
            _take, self._take, values, key, read, atomic=False, brief=True
        )

    async def renew(self, keys: Collection[str]) -> set[str]:
        """Extend the leases of ``keys`` we hold; returns the ones still ours."""
        if not keys:
            return set()
        params = {
            "p_owner": self._owner,
            "keys": sorted(keys),
            "until": self._clock() + self._lease,
        }
        return await self._db.transact(_renew, params, atomic=False, brief=True)

    async def release(self, keys: Collection[str]) -> None:
        """Free the locks of ``keys`` that are ours (one transaction for them all)."""
        if keys:
            params = {"keys": sorted(keys), "p_owner": self._owner}
            await self._db.transact(_release, params, atomic=False, brief=True)


def _take(
    connection: Connection,
    statement: Prepared,
    values: dict[str, Any],
    key: str,
    read: Callable[[Connection, str], T] | None,
) -> tuple[bool, T | None]:
    row = statement.first(connection, values)
    if row is None:
        return False, None
    return True, (read(connection, key) if read is not None else None)


def _renew(connection: Connection, params: dict[str, Any]) -> set[str]:
    return {row[0] for row in connection.execute(_RENEW, params)}


def _release(connection: Connection, params: dict[str, Any]) -> None:
    connection.execute(_RELEASE, params)
