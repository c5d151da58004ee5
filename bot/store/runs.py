"""The record of agent runs: one row a run, written at its start and at its end."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Integer, and_, bindparam, exists, literal_column, select, update
from sqlalchemy.engine import Connection

from bot.store.db import Database
from bot.store.ledger import ACTIVE
from bot.store.models import RUN_STATUSES, MessageClaimRow, RunRow, table_of

RUNNING = "running"
INTERRUPTED = "interrupted"
FINISHED_STATUSES = tuple(status for status in RUN_STATUSES if status != RUNNING)

_runs = table_of(RunRow)
_claims = table_of(MessageClaimRow)


@dataclass(frozen=True, slots=True)
class RunRecord:
    id: str
    conversation_id: str
    message_id: str
    owner: str | None
    status: str
    model: str
    iterations: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    tool_calls: int
    feishu_calls: int
    error: str | None
    started_at: float
    finished_at: float | None
    profile: str | None = None  # the chat's agent profile (None: the default agent)
    app: str = ""  # the Feishu app ("": the default one)


def _record(row: Mapping[Any, Any]) -> RunRecord:
    return RunRecord(**{name: row[name] for name in RunRecord.__slots__})


_START = _runs.insert().returning(*_runs.c)
_FINISH = (
    update(_runs)
    .where(_runs.c.id == bindparam("run_id"))
    .values(
        {
            name: bindparam(f"p_{name}")
            for name in (
                "status",
                "iterations",
                "prompt_tokens",
                "completion_tokens",
                "total_tokens",
                "tool_calls",
                "feishu_calls",
                "error",
                "finished_at",
            )
        }
    )
)
_BY_ID = select(_runs).where(_runs.c.id == bindparam("run_id"))
_RECENT = (
    select(_runs)
    .order_by(_runs.c.started_at.desc(), _runs.c.id.desc())
    .limit(bindparam("limit", type_=Integer))
)
# A run is alive while its owner holds a live lease on the run's message.
_ALIVE = exists().where(
    and_(
        _claims.c.message_id == _runs.c.message_id,
        _claims.c.owner == _runs.c.owner,
        ACTIVE,  # claimed or replied
        _claims.c.lease_until > bindparam("now"),
    )
)
_MARK_INTERRUPTED = (
    update(_runs)
    # A literal, not a parameter: a plan made without the value (PostgreSQL's generic plan
    # of a prepared statement) could not use the partial index of running runs
    # (ix_runs_running), whose condition the query must be seen to imply.
    .where(_runs.c.status == literal_column(f"'{RUNNING}'"), ~_ALIVE)
    .values(
        status=INTERRUPTED,
        error="the process running it stopped before the run finished",
        finished_at=bindparam("now"),
    )
)


class RunStore:
    """Start, finish and list runs."""

    def __init__(
        self, db: Database, *, clock: Callable[[], float] = time.time, app: str = ""
    ) -> None:
        self._db = db
        self._clock = clock
        self._app = app  # the Feishu app whose runs these are

    async def start(
        self,
        run_id: str,
        *,
        conversation_id: str,
        message_id: str,
        model: str,
        owner: str | None = None,
    ) -> RunRecord:
        """Record a run as `running`. `owner` is the instance id that holds the message's claim
        (see `mark_interrupted_running`)."""
        return await self._db.transact(
            _start,
            {
                "id": run_id,
                "app": self._app,
                "conversation_id": conversation_id,
                "message_id": message_id,
                "owner": owner,
                "status": RUNNING,
                "model": model,
                "iterations": 0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "total_tokens": 0,
                "tool_calls": 0,
                "feishu_calls": 0,
                "started_at": self._clock(),
            },
        )

    async def finish(
        self,
        run_id: str,
        *,
        status: str,
        iterations: int,
        prompt_tokens: int,
        completion_tokens: int,
        total_tokens: int,
        tool_calls: int,
        feishu_calls: int,
        error: str | None = None,
    ) -> bool:
        """Record the outcome of a run; False when there is no such run.

        A run already marked `interrupted` is overwritten: it did finish after all.
        """
        if status not in FINISHED_STATUSES:
            raise ValueError(f"status must be one of {FINISHED_STATUSES}, not {status!r}")
        count = await self._db.transact(
            _rowcount,
            _FINISH,
            {
                "run_id": run_id,
                "p_status": status,
                "p_iterations": iterations,
                "p_prompt_tokens": prompt_tokens,
                "p_completion_tokens": completion_tokens,
                "p_total_tokens": total_tokens,
                "p_tool_calls": tool_calls,
                "p_feishu_calls": feishu_calls,
                "p_error": error,
                "p_finished_at": self._clock(),
            },
        )
        return count == 1

    async def get(self, run_id: str) -> RunRecord | None:
        return await self._db.transact(_get, run_id, write=False)

    async def recent(self, limit: int = 50) -> list[RunRecord]:
        """The latest runs, newest first."""
        return await self._db.transact(_recent, limit, write=False)

    async def mark_interrupted_running(self) -> int:
        """Mark `interrupted` the runs left `running` by a process that is gone; returns how many.

        A run counts as alive while its owner still holds a live lease on the run's message in
        the ledger. So a run started without `owner` is always marked (the single-process
        start-up case), while with owners set, a start-up in a deployment of several processes
        leaves the others' live runs alone. A process that crashed and restarted within its old
        lease leaves runs that look alive until the lease runs out: call this again after
        `MessageLedger.take_over_expired` (a periodic sweep does both).
        """
        return await self._db.transact(_rowcount, _MARK_INTERRUPTED, {"now": self._clock()})


# The transactions, run by `Database.transact` with a synchronous connection.


def _start(connection: Connection, values: dict[str, Any]) -> RunRecord:
    return _record(connection.execute(_START, values).mappings().one())


def _get(connection: Connection, run_id: str) -> RunRecord | None:
    row = connection.execute(_BY_ID, {"run_id": run_id}).mappings().first()
    return None if row is None else _record(row)


def _recent(connection: Connection, limit: int) -> list[RunRecord]:
    rows = connection.execute(_RECENT, {"limit": limit}).mappings().all()
    return [_record(row) for row in rows]


def _rowcount(connection: Connection, statement: Any, params: dict[str, Any]) -> int:
    return connection.execute(statement, params).rowcount
