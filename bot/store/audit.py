"""The audit log: who decided, switched or changed what, kept in the database all processes share.

A store whose operation must leave an audit row calls `write_audit` inside its own transaction,
so the row exists exactly when the change does: a transition that lost a race, or a no-op,
leaves none. `AuditLog` records standalone entries (e.g. an admin command) and reads the log.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Integer, String, bindparam, func, select
from sqlalchemy.engine import Connection

from bot.store.db import Database
from bot.store.models import AuditLogRow, table_of

_log = table_of(AuditLogRow)
_INSERT = _log.insert()
_RECENT = (
    select(_log)
    .order_by(_log.c.at.desc(), _log.c.id.desc())
    .limit(bindparam("limit", type_=Integer))
)
# A prefix match written with substr, not LIKE: LIKE ignores case on SQLite and treats `_` and
# `%` in the prefix as wildcards.
_RECENT_ACTION = _RECENT.where(
    func.substr(_log.c.action, 1, bindparam("prefix_length", type_=Integer))
    == bindparam("prefix", type_=String)
)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """An event to record. `action` is dotted, its family first ("approval.denied");
    `detail` must be JSON-serialisable."""

    action: str
    actor: str | None = None
    target: str | None = None
    chat_id: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    # The Feishu app it happened in ("": the default app); its actor is an open_id there.
    app: str = ""


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One row of the log, as stored."""

    id: int
    at: float
    action: str
    actor: str | None
    target: str | None
    chat_id: str | None
    detail: dict[str, Any]
    app: str = ""


def write_audit(connection: Connection, entry: AuditEntry, at: float) -> None:
    """Add `entry` to the log inside the caller's transaction (it commits or rolls back with it)."""
    connection.execute(
        _INSERT,
        {
            "at": at,
            "actor": entry.actor,
            "action": entry.action,
            "target": entry.target,
            "chat_id": entry.chat_id,
            "app": entry.app,
            "detail": json.dumps(dict(entry.detail), ensure_ascii=False, separators=(",", ":")),
        },
    )


class AuditLog:
    """Records standalone audit entries and lists the latest ones."""

    def __init__(
        self, db: Database, *, clock: Callable[[], float] = time.time, app: str = ""
    ) -> None:
        self._db = db
        self._clock = clock
        self._app = app  # what entries recorded here are stamped with

    async def record(self, entry: AuditEntry) -> None:
        stamped = entry if entry.app else replace(entry, app=self._app)
        await self._db.transact(write_audit, stamped, self._clock())

    async def recent(self, *, limit: int = 50, action: str | None = None) -> list[AuditRecord]:
        """The latest entries, newest first; `action` keeps those whose action starts with it
        ("approval." matches every approval event)."""
        return await self._db.transact(_recent, limit, action, write=False)


def _recent(connection: Connection, limit: int, action: str | None) -> list[AuditRecord]:
    if action is None:
        rows = connection.execute(_RECENT, {"limit": limit})
    else:
        rows = connection.execute(
            _RECENT_ACTION, {"limit": limit, "prefix": action, "prefix_length": len(action)}
        )
    return [_record(row) for row in rows.mappings()]


def _record(row: Mapping[Any, Any]) -> AuditRecord:
    return AuditRecord(
        id=row["id"],
        at=row["at"],
        action=row["action"],
        actor=row["actor"],
        target=row["target"],
        app=row["app"],
        chat_id=row["chat_id"],
        detail=json.loads(row["detail"]),
    )
