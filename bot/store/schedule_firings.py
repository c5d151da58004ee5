"""Scheduled tasks' records, and the claims of their due times: the transactions behind
`ScheduleStore.claim_due`, `renew` and `finish` (see `bot.store.schedules`).

A claim is a conditional update of the task, `WHERE next_run_at = <the due time read>`, that moves
its due time on, and the insert of a firing leased to the claimer (unique per task and due time),
in one transaction: of two processes racing for a due time exactly one changes the task, and
only it inserts the firing. A firing's holder renews its lease; an expired one is taken over
(`attempt + 1`) by one claimer, whose conditional update wins, or fails when its attempts are used
up. Statements are built once (SQLAlchemy caches their compiled form); parameters named like a
column they set are prefixed `p_`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Integer, and_, bindparam, case, func, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import BindParameter

from bot.store.db import Database
from bot.store.models import ScheduledFiringRow, ScheduledTaskRow, table_of

logger = logging.getLogger(__name__)

TASK_STATES = ("active", "paused", "cancelled", "done")
ACTIVE, PAUSED, CANCELLED, DONE = TASK_STATES
FIRING_STATES = ("running", "done", "failed")
RUNNING, FIRED, FIRING_FAILED = FIRING_STATES
KINDS = ("at", "cron")
OK = "ok"
MISSED = "missed"
NOT_RUN = "not run"
STOPPED_WHILE_RUNNING = "the bot stopped while running it"
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_PAUSE_AFTER = 3
DONE_LISTED_SECONDS = 86_400.0
_MAX_DETAIL = 500  # characters of a failure's reason kept in last_outcome

tasks = table_of(ScheduledTaskRow)
_firings = table_of(ScheduledFiringRow)
_t = tasks.c
_f = _firings.c


@dataclass(frozen=True, slots=True)
class ScheduledTask:
    """One task, as stored."""

    id: str
    name: str
    prompt: str
    creator: str  # open_id
    chat_id: str
    chat_type: str
    thread_id: str
    reply_to: str  # the message to post under; "" posts to the chat
    kind: str  # "at" or "cron"
    expression: str
    timezone: str
    state: str  # one of TASK_STATES
    next_run_at: float | None
    last_run_at: float | None  # when the last run finished
    last_outcome: str | None  # "ok", "failed: <why>" or "missed"
    failures: int  # consecutive failed runs
    created_at: float
    created_in_run: str  # the run that created it; "" for the console
    updated_at: float = 0.0  # the last change of state or outcome
    app: str = ""  # the Feishu app whose chat it posts to ("": the default one)


@dataclass(frozen=True, slots=True)
class Firing:
    """One due time of a task, claimed by a process that runs it (attempt 1, or more after a
    take-over). `task` is the task as the claim left it (its next due time already moved on)."""

    task: ScheduledTask
    due_at: float
    attempt: int


def task_of(row: Mapping[Any, Any]) -> ScheduledTask:
    """The record of a `scheduled_tasks` row."""
    return ScheduledTask(**{name: row[name] for name in ScheduledTask.__slots__})


def failed_outcome(detail: str, *, kind: str = "failed") -> str:
    """A failed run's last_outcome: "failed: <why>" (or ``kind``: "not run: <why>"), on one
    line and cut to a length."""
    reason = " ".join(detail.split())[:_MAX_DETAIL] or "no reason given"
    return f"{kind}: {reason}"


TASK = _t.id == bindparam("p_id")
NOW: BindParameter[Any] = bindparam("now")

# Each app's scheduler fires the tasks made in its chats (it posts as that app's bot).
_OF_APP = _t.app == bindparam("p_app")
_FIRING_OF_APP = _f.task_id.in_(select(_t.id).where(_OF_APP))
_DUE = (
    select(tasks)
    .where(_OF_APP, _t.state == ACTIVE, _t.next_run_at <= NOW)
    .order_by(_t.next_run_at, _t.id)
    .limit(bindparam("limit", type_=Integer))
)
_EXPIRED = (_f.state == RUNNING, _f.lease_until <= NOW)
_ANY_EXPIRED = select(_f.id).where(_FIRING_OF_APP, *_EXPIRED).limit(1)
# A claim moves the due time on only if nobody did since it was read: one claimer wins.
_UNMOVED = (TASK, _t.state == ACTIVE, _t.next_run_at == bindparam("p_due"))
_MOVE = {"next_run_at": bindparam("p_next"), "state": bindparam("p_state"), "updated_at": NOW}
_ADVANCE = update(tasks).where(*_UNMOVED).values(**_MOVE).returning(*tasks.c)
_ADVANCE_NOTED = (
    update(tasks)
    .where(*_UNMOVED)
    .values(**_MOVE, last_outcome=bindparam("p_outcome"))
    .returning(*tasks.c)
)
# A run's outcome on its task. Failures pause an active task once `p_pause_after` are in a row
# (SET expressions read the row as it was).
_RECORD_OK = (
    update(tasks)
    .where(TASK)
    .values(last_run_at=NOW, last_outcome=OK, failures=0, updated_at=NOW)
    .returning(*tasks.c)
)
_PAUSES = and_(_t.state == ACTIVE, _t.failures + 1 >= bindparam("p_pause_after", type_=Integer))
_RECORD_FAILED = (
    update(tasks)
    .where(TASK)
    .values(
        last_run_at=NOW,
        last_outcome=bindparam("p_outcome"),
        failures=_t.failures + 1,
        state=case((_PAUSES, PAUSED), else_=_t.state),
        updated_at=NOW,
    )
    .returning(*tasks.c)
)
# A firing refused before it ran, for a cause that holds until someone changes it (its chat
# is closed to its creator): an active task pauses at once; not a failure in a row. Of two
# refusals at once (a taken-over firing and the next due time), one pauses it.
_REFUSED = {"last_run_at": NOW, "last_outcome": bindparam("p_outcome"), "updated_at": NOW}
_PAUSE_REFUSED = (
    update(tasks)
    .where(TASK, _t.state == ACTIVE)
    .values(**_REFUSED, state=PAUSED)
    .returning(*tasks.c)
)
_NOTE_REFUSED = update(tasks).where(TASK).values(**_REFUSED).returning(*tasks.c)
_FIRING = (_f.task_id == bindparam("p_task"), _f.due_at == bindparam("p_due"))
_HELD = (*_FIRING, _f.owner == bindparam("p_owner"), _f.state == RUNNING)
RENEW = update(_firings).where(*_HELD).values(lease_until=bindparam("p_until"), updated_at=NOW)
_FINISH = (
    update(_firings)
    .where(*_HELD)
    .values(state=bindparam("p_state"), detail=bindparam("p_detail"), updated_at=NOW)
)
# Take-overs. PostgreSQL: lock the expired firings first, skipping those a concurrent claimer
# holds (they split the work, nobody waits). SQLite has one writer at a time: nothing to skip.
_EXPIRED_FIRINGS = (
    select(_f.id, _f.task_id, _f.attempt, _t.state.label("task_state"))
    .select_from(_firings.join(tasks, _f.task_id == _t.id))
    .where(_OF_APP, *_EXPIRED)
    .order_by(_f.lease_until, _f.id)
    .limit(bindparam("limit", type_=Integer))
    .with_for_update(skip_locked=True, of=_firings)
)
_SOME = _f.id.in_(bindparam("p_ids", expanding=True))
_TAKE = (
    update(_firings)
    .where(_SOME, *_EXPIRED)
    .values(
        owner=bindparam("p_owner"),
        lease_until=bindparam("p_until"),
        attempt=_f.attempt + 1,
        updated_at=NOW,
    )
    .returning(_f.task_id, _f.due_at, _f.attempt)
)
_GIVE_UP = (
    update(_firings)
    .where(_f.id == bindparam("p_id"), *_EXPIRED)
    .values(state=FIRING_FAILED, detail=bindparam("p_detail"), updated_at=NOW)
)
NEXT_LEASE_END = select(func.min(_f.lease_until)).where(_FIRING_OF_APP, _f.state == RUNNING)
_TASKS_BY_ID = select(tasks).where(_t.id.in_(bindparam("p_ids", expanding=True)))


def firing_insert(db: Database) -> Any:
    """The insert of a firing in the database's dialect: nothing when its due time has one."""
    return (
        db.insert(_firings)
        .on_conflict_do_nothing(index_elements=["task_id", "due_at"])
        .returning(_f.id)
    )


@dataclass(frozen=True, slots=True)
class Plan:
    """What a claim does with one due task: run it (`fire`), or only move it on and note why."""

    task: ScheduledTask
    next_at: float | None
    state: str  # the task's state after the claim
    fire: bool
    outcome: str | None = None  # last_outcome when not fired


def held(firing: Firing, owner: str) -> dict[str, Any]:
    """The parameters that pick the firing `owner` holds."""
    return {"p_task": firing.task.id, "p_due": firing.due_at, "p_owner": owner}


def plan(
    task: ScheduledTask,
    now: float,
    grace_seconds: float,
    next_run: Callable[[ScheduledTask, float], float | None],
) -> Plan:
    """What to do with a due task. Runs the caller's `next_run`, outside any transaction."""
    due = task.next_run_at
    assert due is not None  # only tasks with a due time are due
    try:
        following = next_run(task, now)
        if following is not None and following <= now:
            raise ValueError(f"the next due time {following} is not after now ({now})")
    except Exception as error:
        # One task whose schedule cannot be computed (e.g. its zone left the zone database)
        # must not stop the others: pause it, with the reason for its creator.
        logger.warning("scheduled task %s: no next due time", task.id, exc_info=True)
        outcome = failed_outcome(f"its schedule cannot be computed: {error}")
        return Plan(task, due, PAUSED, fire=False, outcome=outcome)
    state = ACTIVE if following is not None else DONE
    if now - due > grace_seconds:
        return Plan(task, following, state, fire=False, outcome=MISSED)
    return Plan(task, following, state, fire=True)


# The transactions, run by `Database.transact` with a synchronous connection.


def select_tasks(
    connection: Connection, statement: Any, params: dict[str, Any]
) -> list[ScheduledTask]:
    """The tasks `statement` selects."""
    return [task_of(row) for row in connection.execute(statement, params).mappings()]


def due_tasks(connection: Connection, params: dict[str, Any]) -> tuple[list[ScheduledTask], bool]:
    """The due active tasks, and whether some firing's lease ran out."""
    due = select_tasks(connection, _DUE, params)
    return due, connection.execute(_ANY_EXPIRED, params).first() is not None


def claim(
    connection: Connection, insert_firing: Any, plans: list[Plan], params: dict[str, Any]
) -> tuple[list[Firing], list[ScheduledTask]]:
    """Carry out the plans; returns the firings inserted, and the tasks moved on without one."""
    firings: list[Firing] = []
    ended: list[ScheduledTask] = []
    for step in plans:
        due = step.task.next_run_at
        move: dict[str, Any] = {
            **params,
            "p_id": step.task.id,
            "p_due": due,
            "p_next": step.next_at,
            "p_state": step.state,
        }
        if step.fire:
            row = connection.execute(_ADVANCE, move).mappings().first()
        else:
            move["p_outcome"] = step.outcome
            row = connection.execute(_ADVANCE_NOTED, move).mappings().first()
        if row is None:
            continue  # another process claimed it (or it was cancelled) since it was read
        task = task_of(row)
        if not step.fire:
            ended.append(task)
            continue
        firing: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "task_id": task.id,
            "due_at": due,
            "state": RUNNING,
            "owner": params["p_owner"],
            "lease_until": params["p_until"],
            "attempt": 1,
            "created_at": params["now"],
            "updated_at": params["now"],
        }
        # Nothing inserted: this due time fired already (a resume set it again): not twice.
        if connection.execute(insert_firing, firing).first() is not None:
            firings.append(Firing(task, firing["due_at"], 1))
    return firings, ended


def take_over(
    connection: Connection, params: dict[str, Any], max_attempts: int
) -> tuple[list[Firing], list[ScheduledTask]]:
    """Take over the expired firings that have attempts left; fail the others. Returns the
    firings taken, and the tasks whose firing failed."""
    expired = connection.execute(_EXPIRED_FIRINGS, params).mappings().all()
    take = [row["id"] for row in expired if _retried(row, max_attempts)]
    ended: list[ScheduledTask] = []
    for row in sorted(expired, key=lambda row: row["task_id"]):
        if _retried(row, max_attempts):
            continue
        # A cancelled task's run is not run again; an exhausted one fails.
        cancelled = row["task_state"] == CANCELLED
        detail = "the task was cancelled" if cancelled else STOPPED_WHILE_RUNNING
        gave_up = connection.execute(_GIVE_UP, {**params, "p_id": row["id"], "p_detail": detail})
        if cancelled or gave_up.rowcount != 1:
            continue
        failed: dict[str, Any] = {
            **params,
            "p_id": row["task_id"],
            "p_outcome": failed_outcome(STOPPED_WHILE_RUNNING),
            "p_pause_after": DEFAULT_PAUSE_AFTER,
        }
        ended.append(task_of(connection.execute(_RECORD_FAILED, failed).mappings().one()))
    if not take:
        return [], ended
    taken = connection.execute(_TAKE, {**params, "p_ids": take}).mappings().all()
    ids = sorted({row["task_id"] for row in taken})
    by_id = {task.id: task for task in select_tasks(connection, _TASKS_BY_ID, {"p_ids": ids})}
    firings = [Firing(by_id[row["task_id"]], row["due_at"], row["attempt"]) for row in taken]
    return sorted(firings, key=lambda firing: firing.due_at), ended


def _retried(row: Mapping[Any, Any], max_attempts: int) -> bool:
    """Whether an expired firing is run again (not cancelled, attempts left)."""
    return bool(row["task_state"] != CANCELLED and row["attempt"] < max_attempts)


def finish(connection: Connection, params: dict[str, Any], ok: bool) -> ScheduledTask | None:
    """Mark the firing done or failed, and record the outcome on its task."""
    if connection.execute(_FINISH, params).rowcount != 1:
        return None  # taken over: the new holder records the outcome
    record = _RECORD_OK if ok else _RECORD_FAILED
    row = connection.execute(record, {**params, "p_id": params["p_task"]}).mappings().first()
    return None if row is None else task_of(row)


@dataclass(frozen=True, slots=True)
class Refused:
    """A firing refused before it ran: its task as now recorded, and whether this refusal
    paused it (its creator is then told, once)."""

    task: ScheduledTask
    paused: bool


def refuse(connection: Connection, params: dict[str, Any]) -> Refused | None:
    """Mark the firing failed, note the refusal on its task and pause an active task."""
    if connection.execute(_FINISH, params).rowcount != 1:
        return None  # taken over: the new holder records the outcome
    task = {**params, "p_id": params["p_task"]}
    row = connection.execute(_PAUSE_REFUSED, task).mappings().first()
    if row is not None:
        return Refused(task_of(row), paused=True)
    row = connection.execute(_NOTE_REFUSED, task).mappings().first()
    return None if row is None else Refused(task_of(row), paused=False)
