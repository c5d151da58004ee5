"""Scheduled tasks and their firings, shared by every process: each due time fires exactly once.

A task (`scheduled_tasks`) is `active` with the due time still to fire in `next_run_at`; it is
`paused` after `pause_after` failed runs in a row, at once when a firing was refused for a
cause that lasts (`finish_refused`: its chat is closed to its creator), or when its schedule
can no longer be computed, until `resume`; `cancelled` by a person, and `done` once a one-off
fired (or missed its time). The store does not read schedules: whoever claims passes
`next_run(task, after)`, the first due time strictly after `after` (None: there is none).

Claiming a due time (`claim_due`) is a conditional update of the task, `WHERE next_run_at = <the
due time read>`, that moves `next_run_at` on, and the insert of a firing (`scheduled_firings`,
unique per task and due time) leased to the claimer, in one transaction: of two processes racing
for a due time exactly one gets it. The lease is renewed while the run goes on; a firing whose
lease ran out (its process died) is taken over by the next `claim_due`, up to 3 attempts, and
then fails. A due time more than `grace_seconds` in the past is not run but recorded as missed.
Due times that passed within the grace while nothing claimed them coalesce into one firing.

Each method is one short transaction (`Database.transact`); `claim_due` reads the due tasks in
one, computes their next due times outside any transaction (the caller's function), and writes
the claims in a second. Times are epoch seconds from the injected clock.

`list` shows the active and paused tasks, and the tasks that ended as `done` in the last day
(`DONE_LISTED_SECONDS`: "did my reminder fire?"); cancelled ones are not listed.
"""

from __future__ import annotations

import builtins
import hashlib
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sqlalchemy import BigInteger, and_, bindparam, func, or_, select, update
from sqlalchemy.engine import Connection

from bot.store.audit import AuditEntry, write_audit
from bot.store.db import Database
from bot.store.schedule_firings import (
    ACTIVE,
    CANCELLED,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PAUSE_AFTER,
    DONE,
    DONE_LISTED_SECONDS,
    FIRED,
    FIRING_FAILED,
    KINDS,
    NEXT_LEASE_END,
    NOT_RUN,
    NOW,
    OK,
    PAUSED,
    RENEW,
    TASK,
    TASK_STATES,
    Firing,
    Refused,
    ScheduledTask,
    claim,
    due_tasks,
    failed_outcome,
    finish,
    firing_insert,
    held,
    plan,
    refuse,
    select_tasks,
    take_over,
    task_of,
    tasks,
)

__all__ = [
    "DEFAULT_PAUSE_AFTER",
    "DONE_LISTED_SECONDS",
    "TASK_STATES",
    "Firing",
    "Refused",
    "ScheduleStore",
    "ScheduledTask",
    "TooManyTasks",
]

_t = tasks.c
_OPEN = or_(_t.state == ACTIVE, _t.state == PAUSED)


class TooManyTasks(Exception):
    """The creator already has the most active or paused tasks one person may have."""

    def __init__(self, creator: str, cap: int) -> None:
        super().__init__(
            f"a person may have at most {cap} scheduled tasks (active or paused), and this "
            "one has that many: cancel one first"
        )
        self.creator = creator
        self.cap = cap


_INSERT_TASK = tasks.insert().returning(*tasks.c)
_COUNT_OPEN = (
    select(func.count()).select_from(tasks).where(_t.creator == bindparam("p_creator"), _OPEN)
)
_BY_ID = select(tasks).where(TASK)
_LISTED = or_(_OPEN, and_(_t.state == DONE, _t.updated_at >= bindparam("since")))
_LIST_ALL = (
    select(tasks).where(_t.app == bindparam("p_app"), _LISTED).order_by(_t.created_at, _t.id)
)
_LIST_MINE = _LIST_ALL.where(_t.creator == bindparam("p_creator"))
_CANCEL = (
    update(tasks)
    .where(TASK, _OPEN)
    .values(state=CANCELLED, next_run_at=None, updated_at=NOW)
    .returning(*tasks.c)
)
# Resumed with a clean slate: the next failure should not pause it again at once.
_RESUME = (
    update(tasks)
    .where(TASK, _t.state == PAUSED)
    .values(state=ACTIVE, next_run_at=bindparam("p_next"), failures=0, updated_at=NOW)
    .returning(*tasks.c)
)
_NEXT_DUE = select(func.min(_t.next_run_at)).where(_t.app == bindparam("p_app"), _t.state == ACTIVE)
# One creator's creations queue behind each other (PostgreSQL), so two at once cannot both
# pass the cap. SQLite's writers queue anyway.
_LOCK_CREATOR = select(func.pg_advisory_xact_lock(bindparam("p_key", type_=BigInteger)))


class ScheduleStore:
    """Creates, lists and cancels tasks; claims their due times; records how runs went."""

    def __init__(
        self, db: Database, *, clock: Callable[[], float] = time.time, app: str = ""
    ) -> None:
        self._db = db
        self._clock = clock
        # The Feishu app whose chats the tasks post to: each app lists and fires its own.
        self._app = app
        self._postgres = db.dialect != "sqlite"
        self._insert_firing = firing_insert(db)

    async def create(
        self,
        *,
        name: str,
        prompt: str,
        creator: str,
        chat_id: str,
        chat_type: str,
        thread_id: str,
        reply_to: str,
        kind: str,
        expression: str,
        timezone: str,
        next_run_at: float,
        created_in_run: str,
        max_per_creator: int,
    ) -> ScheduledTask:
        """Store an active task due at `next_run_at`; `TooManyTasks` when the creator already
        has `max_per_creator` active or paused tasks (counted in the same transaction)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        now = self._clock()
        row = {
            "id": uuid.uuid4().hex,
            "app": self._app,
            "name": name,
            "prompt": prompt,
            "creator": creator,
            "chat_id": chat_id,
            "chat_type": chat_type,
            "thread_id": thread_id,
            "reply_to": reply_to,
            "kind": kind,
            "expression": expression,
            "timezone": timezone,
            "state": ACTIVE,
            "next_run_at": next_run_at,
            "failures": 0,
            "created_at": now,
            "created_in_run": created_in_run,
            "updated_at": now,
        }
        return await self._db.transact(_create, row, max_per_creator, self._postgres)

    async def get(self, task_id: str) -> ScheduledTask | None:
        return await self._db.transact(_get, task_id, write=False)

    async def list(self, *, creator: str | None) -> builtins.list[ScheduledTask]:
        """The active and paused tasks, and those done in the last day, oldest first: of
        `creator`, or everyone's when None."""
        params: dict[str, Any] = {"p_app": self._app, "since": self._clock() - DONE_LISTED_SECONDS}
        if creator is None:
            return await self._db.transact(select_tasks, _LIST_ALL, params, write=False)
        params["p_creator"] = creator
        return await self._db.transact(select_tasks, _LIST_MINE, params, write=False)

    async def cancel(
        self, task_id: str, *, audit: AuditEntry | None = None
    ) -> ScheduledTask | None:
        """Cancel an active or paused task; None when there is no such task or it had ended.
        Whether the caller may cancel it is the caller's check. A run under way goes on.
        `audit` is written in the same transaction, so the row exists exactly when this call
        cancelled the task (a cancel that lost a race leaves none)."""
        params = {"p_id": task_id, "now": self._clock()}
        return await self._db.transact(_cancel, params, audit)

    async def resume(self, task_id: str, *, next_run_at: float) -> ScheduledTask | None:
        """Make a paused task active again, due at `next_run_at`, its failure count reset;
        None when there is no such task or it is not paused."""
        params = {"p_id": task_id, "p_next": next_run_at, "now": self._clock()}
        return await self._db.transact(_returning_task, _RESUME, params)

    async def next_due_at(self) -> float | None:
        """The earliest due time of the active tasks (the claimer sleeps until then)."""
        return await self._db.transact(_scalar, _NEXT_DUE, {"p_app": self._app}, write=False)

    async def next_lease_end(self) -> float | None:
        """When the earliest lease of a running firing ends: a claimer that sleeps no longer
        than until then takes over a dead process's runs on time."""
        return await self._db.transact(_scalar, NEXT_LEASE_END, {"p_app": self._app}, write=False)

    async def claim_due(
        self,
        *,
        owner: str,
        lease_seconds: float,
        grace_seconds: float,
        next_run: Callable[[ScheduledTask, float], float | None],
        limit: int = 20,
    ) -> tuple[builtins.list[Firing], builtins.list[ScheduledTask]]:
        """Claim the due times of active tasks, and take over firings whose lease ran out.

        For each active task due now (at most `limit`, earliest first): when its due time is
        within `grace_seconds`, a firing leased to `owner` for `lease_seconds` (attempt 1);
        otherwise its last outcome becomes "missed" and nothing runs. Either way its due time
        moves on to `next_run(task, now)` (None: the task is done), so due times that passed
        while nothing claimed them coalesce. A racer that moved the task first wins: the
        task is left alone here. Firings whose owner's lease ran out are taken over (attempt
        + 1) up to 3 attempts; the next expiry fails them ("failed: the bot stopped while
        running it", counted as a failure of the task).

        Returns the firings `owner` must now run, and the tasks whose due time ended without a
        run: missed, paused because `next_run` raised, or failed after 3 attempts (see their
        `last_outcome`), e.g. to tell their creators.
        """
        now = self._clock()
        due, expired = await self._db.transact(
            due_tasks, {"p_app": self._app, "now": now, "limit": limit}, write=False
        )
        plans = sorted(
            (plan(task, now, grace_seconds, next_run) for task in due),
            key=lambda step: step.task.id,  # one lock order for every claimer (PostgreSQL)
        )
        claims = {"p_app": self._app, "p_owner": owner, "p_until": now + lease_seconds, "now": now}
        firings: builtins.list[Firing] = []
        ended: builtins.list[ScheduledTask] = []
        if plans:
            firings, ended = await self._db.transact(claim, self._insert_firing, plans, claims)
        if expired:
            taken, failed = await self._db.transact(
                take_over, {**claims, "limit": limit}, DEFAULT_MAX_ATTEMPTS
            )
            firings += taken
            ended += failed
        return firings, ended

    async def renew(self, firing: Firing, *, owner: str, lease_seconds: float) -> bool:
        """Extend the firing's lease; False when `owner` no longer holds it."""
        now = self._clock()
        params = {**held(firing, owner), "p_until": now + lease_seconds, "now": now}
        return await self._db.transact(_rowcount, RENEW, params) == 1

    async def finish(
        self,
        firing: Firing,
        *,
        owner: str,
        ok: bool,
        detail: str = "",
        pause_after: int = DEFAULT_PAUSE_AFTER,
    ) -> ScheduledTask | None:
        """Record how the run went: on the firing (done or failed, with `detail`) and on its
        task (last run, "ok" or "failed: <detail>", the failures in a row, reset by a success;
        an active task is paused once `pause_after` runs failed in a row). None, and nothing
        written, when `owner` no longer holds the firing (it was taken over)."""
        params = {
            **held(firing, owner),
            "p_state": FIRED if ok else FIRING_FAILED,
            "p_detail": detail or None,
            "p_outcome": OK if ok else failed_outcome(detail),
            "p_pause_after": pause_after,
            "now": self._clock(),
        }
        return await self._db.transact(finish, params, ok)

    async def finish_refused(self, firing: Firing, *, owner: str, reason: str) -> Refused | None:
        """Record a firing that was refused before it ran, for a cause that lasts until
        someone changes it (its chat is closed to its creator): the firing fails with
        `reason`, the task's last outcome is "not run: <reason>", and an active task is
        paused at once (the next due time would be refused the same; a one-off is done
        already); `Refused.paused` says whether this call paused it. Not a failure in a
        row: `failures` is left as it was. None, and nothing written, when `owner` no longer
        holds the firing."""
        params = {
            **held(firing, owner),
            "p_state": FIRING_FAILED,
            "p_detail": reason or None,
            "p_outcome": failed_outcome(reason, kind=NOT_RUN),
            "now": self._clock(),
        }
        return await self._db.transact(refuse, params)


# The transactions, run by `Database.transact` with a synchronous connection.


def _create(connection: Connection, row: dict[str, Any], cap: int, postgres: bool) -> ScheduledTask:
    creator = row["creator"]
    if postgres:
        connection.execute(_LOCK_CREATOR, {"p_key": _lock_key(creator)})
    if connection.execute(_COUNT_OPEN, {"p_creator": creator}).scalar_one() >= cap:
        raise TooManyTasks(creator, cap)
    return task_of(connection.execute(_INSERT_TASK, row).mappings().one())


def _lock_key(creator: str) -> int:
    """A signed 64-bit advisory lock key of the creator, in a namespace of our own."""
    digest = hashlib.sha256(f"larkgate.scheduled_tasks:{creator}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _get(connection: Connection, task_id: str) -> ScheduledTask | None:
    row = connection.execute(_BY_ID, {"p_id": task_id}).mappings().first()
    return None if row is None else task_of(row)


def _cancel(
    connection: Connection, params: dict[str, Any], audit: AuditEntry | None
) -> ScheduledTask | None:
    task = _returning_task(connection, _CANCEL, params)
    if task is not None and audit is not None:
        write_audit(connection, replace(audit, app=audit.app or task.app), params["now"])
    return task


def _returning_task(
    connection: Connection, statement: Any, params: dict[str, Any]
) -> ScheduledTask | None:
    row = connection.execute(statement, params).mappings().first()
    return None if row is None else task_of(row)


def _scalar(connection: Connection, statement: Any, params: dict[str, Any]) -> Any:
    return connection.execute(statement, params).scalar()


def _rowcount(connection: Connection, statement: Any, params: dict[str, Any]) -> int:
    return connection.execute(statement, params).rowcount
