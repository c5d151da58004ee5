"""/schedules and its Cancel buttons: the card for a viewer, and the click on it.

Who pressed is checked on every click (only the creator or an admin cancels); the card is
then drawn again for the one who pressed, from the database, so it shows what is true now.
Replayed clicks never reach here: the card callback route checks the replay guard first.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from bot.feishu.events import CardAction
from bot.feishu.schedules_card import ScheduleRow, schedules_card
from bot.governance.actions import toast
from bot.store.audit import AuditEntry
from bot.store.schedules import ScheduledTask, ScheduleStore
from bot.timezones import time_zone

from .scheduler import schedule_of

NOT_YOURS = "Only the person who created this task, or an admin, may cancel it."


class ScheduleCards:
    def __init__(
        self, store: ScheduleStore, *, is_admin: Callable[[str], bool], timezone: str
    ) -> None:
        self._store = store
        self._is_admin = is_admin
        self._zone = time_zone(timezone)

    async def card(self, viewer: str, *, notice: str = "") -> dict[str, Any]:
        everyone = self._is_admin(viewer)
        tasks = await self._store.list(creator=None if everyone else viewer)
        rows = [self._row(task, viewer) for task in tasks]
        return schedules_card(rows, everyone=everyone, notice=notice)

    async def click(self, action: CardAction) -> dict[str, Any]:
        if action.value.get("op") != "cancel":
            return toast("info", "This button is no longer active.")
        actor = action.operator_open_id
        task = await self._store.get(str(action.value.get("task_id") or ""))
        if task is None:
            return toast("warning", "That task no longer exists.", await self.card(actor))
        if task.creator != actor and not self._is_admin(actor):
            return toast("error", NOT_YOURS)
        entry = AuditEntry(
            "schedule.cancelled",
            actor=actor,
            target=task.id,
            chat_id=action.open_chat_id or task.chat_id,
            detail={"via": "card", "name": task.name, "creator": task.creator},
        )
        if await self._store.cancel(task.id, audit=entry) is None:
            return toast("info", "That task had already ended.", await self.card(actor))
        notice = f"Cancelled “{task.name}”."
        return toast("success", notice, await self.card(actor, notice=notice))

    def _row(self, task: ScheduledTask, viewer: str) -> ScheduleRow:
        last = "never run"
        if task.last_run_at:
            last = f"last {self._time(task.last_run_at)}: {task.last_outcome or 'ok'}"
        return ScheduleRow(
            task_id=task.id,
            name=task.name,
            schedule=schedule_of(task).describe(),
            next_run=self._time(task.next_run_at) if task.next_run_at else "none",
            last_run=last,
            state=task.state,
            can_cancel=task.creator == viewer or self._is_admin(viewer),
            creator=task.creator,
        )

    def _time(self, moment: float) -> str:
        return datetime.fromtimestamp(moment, self._zone).strftime("%a %d %b %H:%M")
