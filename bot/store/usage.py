"""Usage counters for budgets and rate limits, shared by every process.

Daily token budgets count per day and subject ("user:ou_x", "group:oc_y"); message rate limits
count per subject and fixed window. Each count is an atomic upsert increment
(`INSERT ... ON CONFLICT DO UPDATE SET n = n + ...`), so processes counting at the same time
never lose an increment, and `hit` hands each message its own position in the window.
The caller picks the day (its time zone) and the window; old rows go with `purge`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import bindparam, delete, select
from sqlalchemy.engine import Connection

from bot.store.db import Database
from bot.store.models import RateWindowRow, UsageDailyRow, table_of

_daily = table_of(UsageDailyRow)
_windows = table_of(RateWindowRow)

_TOKENS = select(_daily.c.subject, _daily.c.tokens).where(
    _daily.c.day == bindparam("day"),
    _daily.c.subject.in_(bindparam("subjects", expanding=True)),
)
_DAY = (
    select(_daily.c.subject, _daily.c.tokens, _daily.c.messages)
    .where(_daily.c.day == bindparam("day"))
    .order_by(_daily.c.tokens.desc(), _daily.c.subject)
)
_PURGE_DAYS = delete(_daily).where(_daily.c.day < bindparam("before_day"))
_PURGE_WINDOWS = delete(_windows).where(_windows.c.window_start < bindparam("before_window"))


class _Statements:
    """The upserts in the database's dialect, built once."""

    def __init__(self, db: Database) -> None:
        add = db.insert(_daily)
        self.add = add.on_conflict_do_update(
            index_elements=["day", "subject"],
            set_={
                "tokens": _daily.c.tokens + add.excluded.tokens,
                "messages": _daily.c.messages + add.excluded.messages,
            },
        )
        count = _windows.c["count"]
        self.hit = (
            db.insert(_windows)
            .on_conflict_do_update(
                index_elements=["subject", "window_start"], set_={"count": count + 1}
            )
            .returning(count)
        )


class UsageStore:
    """Token usage per day and message counts per rate-limit window."""

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock  # unused for now: the caller names the days and windows
        self._sql = _Statements(db)

    async def add(
        self, day: str, subjects: Sequence[str], *, tokens: int, messages: int = 0
    ) -> None:
        """Add `tokens` and `messages` to each subject's count of `day`, in one transaction.

        A subject named twice counts once. The rows are written in sorted order, so two
        transactions adding to the same subjects lock them in the same order (no deadlock).
        """
        names = sorted(set(subjects))
        if not names or (tokens == 0 and messages == 0):
            return
        rows = [
            {"day": day, "subject": name, "tokens": tokens, "messages": messages} for name in names
        ]
        await self._db.transact(_add, self._sql, rows)

    async def usage(self, day: str, subjects: Sequence[str]) -> dict[str, int]:
        """The tokens each subject used on `day` (0 for a subject without any)."""
        names = list(dict.fromkeys(subjects))
        if not names:
            return {}
        return await self._db.transact(_usage, day, names, write=False)

    async def day(self, day: str) -> list[tuple[str, int, int]]:
        """Every subject counted on `day`: (subject, tokens, messages), most tokens first."""
        return await self._db.transact(_day, day, write=False)

    async def hit(self, subject: str, window_start: int) -> int:
        """Count one message of `subject` in the window starting at `window_start` (epoch
        seconds); returns the window's count including it."""
        # Every message, when the rate limit is on: one upsert that counts and returns.
        return await self._db.transact(
            _hit,
            self._sql,
            {"subject": subject, "window_start": window_start, "count": 1},
            atomic=False,
            brief=True,
        )

    async def purge(self, *, before_day: str, before_window: int) -> int:
        """Delete the days before `before_day` and the windows starting before `before_window`;
        returns how many rows went."""
        return await self._db.transact(
            _purge, {"before_day": before_day, "before_window": before_window}
        )


# The transactions, run by `Database.transact` with a synchronous connection.


def _add(connection: Connection, sql: _Statements, rows: list[dict[str, Any]]) -> None:
    # One statement a row, in the sorted order (a driver may batch an executemany into one
    # multi-row statement).
    for row in rows:
        connection.execute(sql.add, row)


def _usage(connection: Connection, day: str, subjects: list[str]) -> dict[str, int]:
    used = dict(connection.execute(_TOKENS, {"day": day, "subjects": subjects}).all())
    return {subject: used.get(subject, 0) for subject in subjects}


def _day(connection: Connection, day: str) -> list[tuple[str, int, int]]:
    rows = connection.execute(_DAY, {"day": day}).all()
    return [(subject, tokens, messages) for subject, tokens, messages in rows]


def _hit(connection: Connection, sql: _Statements, values: dict[str, Any]) -> int:
    return int(connection.execute(sql.hit, values).scalar_one())


def _purge(connection: Connection, params: dict[str, Any]) -> int:
    days = connection.execute(_PURGE_DAYS, params).rowcount
    return days + connection.execute(_PURGE_WINDOWS, params).rowcount
