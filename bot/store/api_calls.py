"""The Feishu API-call ledger: calls per app and month, shared by every process.

Processes count calls in memory and add them here every few seconds with one upsert
increment (`INSERT ... ON CONFLICT DO UPDATE SET calls = calls + ...`) that returns the
month's total, so replicas add up without losing an increment and each learns what the
others spent. Telling the admins about a budget step is claimed with a conditional update,
so exactly one process tells them, once a month per step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.engine import Connection

from bot.store.db import Database
from bot.store.models import FeishuApiCallsRow, table_of

_calls = table_of(FeishuApiCallsRow)
_c = _calls.c
_TOTAL = select(_c.calls).where(_c.app_id == bindparam("p_app"), _c.month == bindparam("p_month"))
_CLAIM_NOTICE = (
    update(_calls)
    .where(
        _c.app_id == bindparam("p_app"),
        _c.month == bindparam("p_month"),
        _c.notified_level < bindparam("p_level"),
    )
    .values(notified_level=bindparam("p_level"))
    .returning(_c.app_id)
)


class ApiCallLedger:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock
        insert = db.insert(_calls)
        self._add = insert.on_conflict_do_update(
            index_elements=["app_id", "month"],
            set_={
                "calls": _c.calls + insert.excluded.calls,
                "updated_at": insert.excluded.updated_at,
            },
        ).returning(_c.calls)

    async def add(self, app_id: str, month: str, calls: int) -> int:
        """Add ``calls`` to the month's count (0 just reads it); returns the month's total."""
        values = {
            "app_id": app_id,
            "month": month,
            "calls": calls,
            "notified_level": 0,
            "updated_at": self._clock(),
        }
        return await self._db.transact(_add, self._add, values)

    async def total(self, app_id: str, month: str) -> int:
        return await self._db.transact(_total, app_id, month, write=False)

    async def claim_notice(self, app_id: str, month: str, level: int) -> bool:
        """True for the one caller that is to tell the admins about ``level`` this month."""
        return await self._db.transact(_claim_notice, app_id, month, level)


def _add(connection: Connection, statement: Any, values: dict[str, Any]) -> int:
    return int(connection.execute(statement.values(values)).scalar_one())


def _total(connection: Connection, app_id: str, month: str) -> int:
    value = connection.execute(_TOTAL, {"p_app": app_id, "p_month": month}).scalar()
    return int(value or 0)


def _claim_notice(connection: Connection, app_id: str, month: str, level: int) -> bool:
    row = connection.execute(
        _CLAIM_NOTICE, {"p_app": app_id, "p_month": month, "p_level": level}
    ).first()
    return row is not None
