"""The record of agent runs: one row a run, written at its start and at its end."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, exists, select, update

from bot.store.db import Database
from bot.store.models import CLAIMED, REPLIED, RUN_STATUSES, MessageClaimRow, RunRow

RUNNING = "running"
INTERRUPTED = "interrupted"
FINISHED_STATUSES = tuple(status for status in RUN_STATUSES if status != RUNNING)

_runs = RunRow.__table__
_claims = MessageClaimRow.__table__


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


def _record(row: Mapping[str, Any]) -> RunRecord:
    return RunRecord(**{name: row[name] for name in RunRecord.__slots__})


class RunStore:
    """Start, finish and list runs."""

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock

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
        async with self._db.write() as connection:
            result = await connection.execute(
                _runs.insert()
                .values(
                    id=run_id,
                    conversation_id=conversation_id,
                    message_id=message_id,
                    owner=owner,
                    status=RUNNING,
                    model=model,
                    iterations=0,
                    prompt_tokens=0,
                    completion_tokens=0,
                    total_tokens=0,
                    tool_calls=0,
                    feishu_calls=0,
                    started_at=self._clock(),
                )
                .returning(*_runs.c)
            )
            return _record(result.mappings().one())

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
        async with self._db.write() as connection:
            result = await connection.execute(
                update(_runs)
                .where(_runs.c.id == run_id)
                .values(
                    status=status,
                    iterations=iterations,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    total_tokens=total_tokens,
                    tool_calls=tool_calls,
                    feishu_calls=feishu_calls,
                    error=error,
                    finished_at=self._clock(),
                )
            )
            return result.rowcount == 1

    async def get(self, run_id: str) -> RunRecord | None:
        async with self._db.read() as connection:
            result = await connection.execute(select(_runs).where(_runs.c.id == run_id))
            row = result.mappings().first()
        return None if row is None else _record(row)

    async def recent(self, limit: int = 50) -> list[RunRecord]:
        """The latest runs, newest first."""
        async with self._db.read() as connection:
            result = await connection.execute(
                select(_runs).order_by(_runs.c.started_at.desc(), _runs.c.id.desc()).limit(limit)
            )
            return [_record(row) for row in result.mappings().all()]

    async def mark_interrupted_running(self) -> int:
        """Mark `interrupted` the runs left `running` by a process that is gone; returns how many.

        A run counts as alive while its owner still holds a live lease on the run's message in
        the ledger. So a run started without `owner` is always marked (the single-process
        start-up case), while with owners set, a start-up in a deployment of several processes
        leaves the others' live runs alone. A process that crashed and restarted within its old
        lease leaves runs that look alive until the lease runs out: call this again after
        `MessageLedger.take_over_expired` (a periodic sweep does both).
        """
        now = self._clock()
        alive = exists().where(
            and_(
                _claims.c.message_id == _runs.c.message_id,
                _claims.c.owner == _runs.c.owner,
                _claims.c.state.in_((CLAIMED, REPLIED)),
                _claims.c.lease_until > now,
            )
        )
        async with self._db.write() as connection:
            result = await connection.execute(
                update(_runs)
                .where(_runs.c.status == RUNNING, ~alive)
                .values(
                    status=INTERRUPTED,
                    error="the process running it stopped before the run finished",
                    finished_at=now,
                )
            )
            return result.rowcount
