"""The organisation's settings, shared by every process: for now, the read-only mode.

The settings live in a key/value table (JSON values) rather than in each process's memory, so an
admin's switch holds for every process at once and survives restarts. A switch is one
conditional statement: of two admins switching at the same moment exactly one changes the mode
(and writes the audit row); the other sees a no-op.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.engine import Connection

from bot.store.audit import AuditEntry, write_audit
from bot.store.db import Database
from bot.store.models import OrgSettingRow

READ_ONLY = "read_only"

_settings = OrgSettingRow.__table__
_c = _settings.c
_BY_KEY = select(_settings).where(_c.key == bindparam("p_key"))


@dataclass(frozen=True, slots=True)
class ReadOnlyMode:
    """Whether the organisation is read-only, and who switched it last (None: never switched)."""

    on: bool
    changed_by: str | None
    changed_at: float | None


class _Statements:
    """The switch statements in the database's dialect, built once."""

    def __init__(self, db: Database) -> None:
        insert = db.insert(_settings)
        # Inserts the setting, or changes it only when the value differs: no row comes back
        # from a no-op, including one that waited for a racer setting the same value.
        self.upsert_changed = insert.on_conflict_do_update(
            index_elements=["key"],
            set_={
                "value": insert.excluded.value,
                "updated_by": insert.excluded.updated_by,
                "updated_at": insert.excluded.updated_at,
            },
            where=_c.value != insert.excluded.value,
        ).returning(_c.key)
        # Setting the default value: a missing row already means it, so only an update.
        self.update_changed = (
            update(_settings)
            .where(_c.key == bindparam("p_key"), _c.value != bindparam("p_value"))
            .values(
                value=bindparam("p_value"),
                updated_by=bindparam("p_updated_by"),
                updated_at=bindparam("p_updated_at"),
            )
            .returning(_c.key)
        )


class OrgSettingsStore:
    """Reads and switches the organisation's read-only mode."""

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock
        self._sql = _Statements(db)

    async def read_only(self) -> ReadOnlyMode:
        """The current mode; off when it was never switched."""
        return await self._db.transact(_read_only, write=False)

    async def set_read_only(
        self, on: bool, *, actor: str, chat_id: str | None, via: str | None = None
    ) -> tuple[bool, ReadOnlyMode]:
        """Switch the mode; returns whether this call changed it, and the mode after.

        The audit row ("readonly.on" / "readonly.off") is written in the same transaction, and
        only on a change: switching to the current mode writes nothing. `via` names where the
        switch came from when not a chat (e.g. "console"); it goes into the audit row's detail.
        """
        return await self._db.transact(
            _set_read_only, self._sql, on, actor, chat_id, self._clock(), via
        )


# The transactions, run by `Database.transact` with a synchronous connection.


def _read_only(connection: Connection) -> ReadOnlyMode:
    row = connection.execute(_BY_KEY, {"p_key": READ_ONLY}).mappings().first()
    return _mode(row)


def _set_read_only(
    connection: Connection,
    sql: _Statements,
    on: bool,
    actor: str,
    chat_id: str | None,
    now: float,
    via: str | None = None,
) -> tuple[bool, ReadOnlyMode]:
    value = json.dumps(on)
    if on:
        values = {"key": READ_ONLY, "value": value, "updated_by": actor, "updated_at": now}
        changed = connection.execute(sql.upsert_changed, values).first() is not None
    else:
        values = {
            "p_key": READ_ONLY,
            "p_value": value,
            "p_updated_by": actor,
            "p_updated_at": now,
        }
        changed = connection.execute(sql.update_changed, values).first() is not None
    if changed:
        action = "readonly.on" if on else "readonly.off"
        detail = {"via": via} if via is not None else {}
        write_audit(
            connection, AuditEntry(action, actor=actor, chat_id=chat_id, detail=detail), now
        )
    return changed, _read_only(connection)


def _mode(row: Mapping[str, Any] | None) -> ReadOnlyMode:
    if row is None:
        return ReadOnlyMode(on=False, changed_by=None, changed_at=None)
    return ReadOnlyMode(
        on=bool(json.loads(row["value"])),
        changed_by=row["updated_by"],
        changed_at=row["updated_at"],
    )
