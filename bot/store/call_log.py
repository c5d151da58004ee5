"""The connector call log: every tool call through a connector, for audit and usage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from bot.store.db import Database
from bot.store.models import ConnectorCallRow, table_of

_log = table_of(ConnectorCallRow)
_INSERT = _log.insert()


@dataclass(frozen=True, slots=True)
class CallEntry:
    run_id: str
    tool: str
    connector: str
    arguments_digest: str
    ok: bool
    error: str | None
    duration_ms: float
    created_at: float


class CallLogStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def record(self, entry: CallEntry | None = None, /, **fields: Any) -> None:
        """Store one call: a ``CallEntry``, or its fields as keywords (how the connectors'
        call-log hook hands them over, knowing nothing of the store)."""
        await self._db.transact(_record, entry if entry is not None else CallEntry(**fields))

    async def for_run(self, run_id: str) -> list[CallEntry]:
        return await self._db.transact(_for_run, run_id, write=False)


def _record(connection: Connection, entry: CallEntry) -> None:
    connection.execute(_INSERT, {name: getattr(entry, name) for name in CallEntry.__slots__})


def _for_run(connection: Connection, run_id: str) -> list[CallEntry]:
    rows = connection.execute(
        select(_log).where(_log.c.run_id == run_id).order_by(_log.c.id)
    ).mappings()
    return [_entry(row) for row in rows]


def _entry(row: Any) -> CallEntry:
    return CallEntry(**{name: row[name] for name in CallEntry.__slots__})
