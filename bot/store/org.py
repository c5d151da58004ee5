"""The organisation's settings, shared by every process: for now, the read-only mode.

The settings live in a key/value table (JSON values) rather than in each process's memory, so an
admin's switch holds for every process at once and survives restarts. A switch is one
conditional statement: of two admins switching at the same moment exactly one changes the mode
(and writes the audit row); the other sees a no-op.

Each change bumps the setting's `version`. A switch may name the version it was asked for (the
admin card's button carries the version it was rendered for): when the mode has changed since,
nothing is switched, so a stale or replayed card cannot flip a newer state.
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
from bot.store.models import OrgSettingRow, table_of

READ_ONLY = "read_only"

_settings = table_of(OrgSettingRow)
_c = _settings.c
_BY_KEY = select(_settings).where(_c.key == bindparam("p_key"))


@dataclass(frozen=True, slots=True)
class ReadOnlyMode:
    """Whether the organisation is read-only, and who switched it last (None: never switched)."""

    on: bool
    changed_by: str | None
    changed_at: float | None
    version: int = 0  # 0: never switched; +1 with every change


@dataclass(frozen=True, slots=True)
class Switch:
    """The outcome of a switch: whether it changed the mode, whether it was refused as stale
    (it named a version that is no longer current), and the mode after."""

    changed: bool
    stale: bool
    mode: ReadOnlyMode


class _Statements:
    """The switch statements in the database's dialect, built once."""

    def __init__(self, db: Database) -> None:
        # A missing row means "off, never switched" (version 0): create it so that the
        # conditional update below has a row to compare with.
        self.ensure = (
            db.insert(_settings)
            .on_conflict_do_nothing(index_elements=["key"])
            .values(
                key=bindparam("p_key"),
                value=json.dumps(False),
                updated_by=None,
                updated_at=bindparam("p_updated_at"),
                version=0,
            )
        )
        # Changes the value only when it differs (and, when asked, only at the expected
        # version): no row comes back from a no-op, including one that waited for a racer.
        self.change = (
            update(_settings)
            .where(_c.key == bindparam("p_key"), _c.value != bindparam("p_value"))
            .values(
                value=bindparam("p_value"),
                updated_by=bindparam("p_updated_by"),
                updated_at=bindparam("p_updated_at"),
                version=_c.version + 1,
            )
            .returning(_c.key)
        )
        self.change_at_version = self.change.where(_c.version == bindparam("p_version"))


class OrgSettingsStore:
    """Reads and switches the organisation's read-only mode."""

    def __init__(
        self, db: Database, *, clock: Callable[[], float] = time.time, app: str = ""
    ) -> None:
        self._db = db
        self._clock = clock
        self._app = app  # the Feishu app its switches are made in (for the audit)
        self._sql = _Statements(db)
        self._last: tuple[float, ReadOnlyMode] | None = None  # (read at, monotonic; mode)

    async def read_only(self) -> ReadOnlyMode:
        """The current mode; off when it was never switched."""
        mode = await self._db.transact(_read_only, write=False, atomic=False, brief=True)
        self._remember(mode)
        return mode

    async def recent_read_only(self, max_age_seconds: float) -> ReadOnlyMode:
        """The mode as read at most ``max_age_seconds`` ago (by this process), else afresh.

        For what may lag a switch by that long without harm, such as which tools a new run
        is offered; never for a decision that lets a write run (``read_only`` is for those).
        """
        last = self._last
        if last is not None and time.monotonic() - last[0] <= max_age_seconds:
            return last[1]
        return await self.read_only()

    def _remember(self, mode: ReadOnlyMode) -> None:
        last = self._last
        # Reads that overlap may finish out of order: keep the newer version.
        if last is None or mode.version >= last[1].version:
            self._last = (time.monotonic(), mode)

    async def set_read_only(
        self,
        on: bool,
        *,
        actor: str,
        chat_id: str | None,
        via: str | None = None,
        expected_version: int | None = None,
    ) -> Switch:
        """Switch the mode; says whether this call changed it, and the mode after.

        The audit row ("readonly.on" / "readonly.off") is written in the same transaction, and
        only on a change: switching to the current mode writes nothing. `via` names where the
        switch came from when not a chat (e.g. "console"); it goes into the audit row's detail.
        With `expected_version`, the switch happens only while the mode is at that version;
        otherwise nothing changes and the outcome is `stale`.
        """
        switch = await self._db.transact(
            _set_read_only,
            self._sql,
            on,
            actor,
            chat_id,
            self._clock(),
            via,
            expected_version,
            self._app,
        )
        self._remember(switch.mode)
        return switch


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
    via: str | None,
    expected_version: int | None,
    app: str,
) -> Switch:
    connection.execute(sql.ensure, {"p_key": READ_ONLY, "p_updated_at": now})
    values: dict[str, Any] = {
        "p_key": READ_ONLY,
        "p_value": json.dumps(on),
        "p_updated_by": actor,
        "p_updated_at": now,
    }
    statement = sql.change
    if expected_version is not None:
        statement, values["p_version"] = sql.change_at_version, expected_version
    changed = connection.execute(statement, values).first() is not None
    mode = _read_only(connection)
    if changed:
        action = "readonly.on" if on else "readonly.off"
        detail: dict[str, Any] = {"version": mode.version}
        if via is not None:
            detail["via"] = via
        entry = AuditEntry(action, actor=actor, chat_id=chat_id, detail=detail, app=app)
        write_audit(connection, entry, now)
    stale = not changed and expected_version is not None and mode.version != expected_version
    return Switch(changed, stale, mode)


def _mode(row: Mapping[Any, Any] | None) -> ReadOnlyMode:
    if row is None:
        return ReadOnlyMode(on=False, changed_by=None, changed_at=None)
    version = int(row["version"] or 0)
    return ReadOnlyMode(
        on=bool(json.loads(row["value"])),
        # The row created only to be compared with was never switched by anyone.
        changed_by=row["updated_by"] if version else None,
        changed_at=row["updated_at"] if version else None,
        version=version,
    )
