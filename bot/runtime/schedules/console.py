"""Scheduled tasks as the web console sees them: every task listed, and cancelled as an admin.

The console acts like its other actions do (``bot.governance.console``): as the first admin
of LARKGATE_ADMINS, so the audit log names a person, and refused when there is none. The
cancel and its audit row (``schedule.cancelled``, ``"via": "console"``) are one transaction in
the store: a cancel that lost a race to another leaves no row.

It imports neither the scheduler nor conversations (the console may not know them), so the
schedule is read back here from the task's stored fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from bot.schedules import Schedule, ScheduleError
from bot.store.audit import AuditEntry
from bot.store.schedules import ScheduledTask, ScheduleStore

VIA = "console"

CancelOutcome = Literal["cancelled", "unknown", "closed", "forbidden"]


@dataclass(frozen=True, slots=True)
class ConsoleCancel:
    """``cancelled``: this call cancelled it; ``closed``: it had already ended; ``unknown``: no
    such task; ``forbidden``: no admin to act as. ``task`` is the task as it is now."""

    outcome: CancelOutcome
    task: ScheduledTask | None = None


class ScheduleConsole:
    def __init__(self, store: ScheduleStore, *, admin: Callable[[], str | None]) -> None:
        self._store = store
        self._admin = admin

    async def tasks(self) -> list[dict[str, Any]]:
        """Everyone's active and paused tasks, and those done in the last day, oldest first."""
        return [task_json(task) for task in await self._store.list(creator=None)]

    async def cancel(self, task_id: str) -> ConsoleCancel:
        actor = self._admin()
        task = await self._store.get(task_id)
        if task is None:
            return ConsoleCancel("unknown")
        if actor is None:
            return ConsoleCancel("forbidden", task)
        entry = AuditEntry(
            "schedule.cancelled",
            actor=actor,
            target=task.id,
            chat_id=task.chat_id,
            detail={"via": VIA, "name": task.name, "creator": task.creator},
        )
        cancelled = await self._store.cancel(task.id, audit=entry)
        if cancelled is None:
            return ConsoleCancel("closed", await self._store.get(task.id))
        return ConsoleCancel("cancelled", cancelled)


def task_json(task: ScheduledTask) -> dict[str, Any]:
    return {
        "id": task.id,
        "name": task.name,
        "prompt": task.prompt,
        "creator": task.creator,
        "chat_id": task.chat_id,
        "chat_type": task.chat_type,
        "thread_id": task.thread_id,
        "kind": task.kind,
        "expression": task.expression,
        "timezone": task.timezone,
        "schedule": _in_words(task),
        "state": task.state,
        "next_run_at": task.next_run_at,
        "last_run_at": task.last_run_at,
        "last_outcome": task.last_outcome,
        "failures": task.failures,
        "created_at": task.created_at,
    }


def _in_words(task: ScheduledTask) -> str:
    try:
        return Schedule.stored(task.kind, task.expression, task.timezone).describe()
    # A row this code can no longer read (a zone gone from tzdata): show what is stored.
    except (ScheduleError, ValueError, KeyError):
        return f"{task.kind} {task.expression} ({task.timezone})"
