"""/schedules and its Cancel buttons: the card for a viewer in a chat, and the click on it.

Who pressed is checked on every click (only the creator or an admin cancels); the card is
then drawn again for the one who pressed, from the database, so it shows what is true now.
What a card shows depends on where it is (``schedule_views``: in a group, only that chat's
tasks). A click says where by Feishu's ``open_chat_id``; that this chat is a direct message
comes from the button's value, which counts only when this bot sealed it there: a value
copied onto another card, or clicked in another chat, is drawn as a group's view.
Replayed clicks never reach here: the card callback route checks the replay guard first.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from bot.askers import Askers
from bot.feishu.events import CardAction
from bot.feishu.schedules_card import ScheduleRow, cancel_value, schedules_card
from bot.governance.actions import toast
from bot.governance.seal import ButtonSeal
from bot.runtime.schedules.scheduler import schedule_of
from bot.runtime.schedules.views import Place, may_act_on, shows, visible_tasks
from bot.store.audit import AuditEntry
from bot.store.schedules import ScheduledTask, ScheduleStore
from bot.timezones import time_zone

NOT_YOURS = "Only the person who created this task, or an admin, may cancel it."


class ScheduleCards:
    def __init__(
        self,
        store: ScheduleStore,
        *,
        is_admin: Callable[[str], bool],
        timezone: str,
        seal: ButtonSeal,
    ) -> None:
        self._store = store
        self._is_admin = is_admin
        self._zone = time_zone(timezone)
        # Seals each button's value with where the card was drawn.
        self._seal = seal

    async def card(self, viewer: str, place: Place, *, notice: str = "") -> dict[str, Any]:
        """The card ``viewer`` is shown in ``place``."""
        view = await visible_tasks(self._store, Askers.of(viewer), place, self._is_admin)
        rows = [self._row(task, viewer, place) for task in view.shown]
        return schedules_card(
            rows,
            everyone=self._is_admin(viewer),
            notice=notice,
            in_group=not place.private,
            elsewhere=view.note(),
        )

    async def click(self, action: CardAction) -> dict[str, Any]:
        if action.value.get("op") != "cancel":
            return toast("info", "This button is no longer active.")
        actor = action.operator_open_id
        place = self._place_of(action)
        task = await self._store.get(str(action.value.get("task_id") or ""))
        if task is None:
            return toast("warning", "That task no longer exists.", await self.card(actor, place))
        if not may_act_on(task, Askers.of(actor), self._is_admin):
            return toast("error", NOT_YOURS)
        entry = AuditEntry(
            "schedule.cancelled",
            actor=actor,
            target=task.id,
            chat_id=action.open_chat_id or task.chat_id,
            detail={"via": "card", "name": task.name, "creator": task.creator},
        )
        if await self._store.cancel(task.id, audit=entry) is None:
            return toast("info", "That task had already ended.", await self.card(actor, place))
        # The notice is on the card, which everyone in the chat sees: a task of another
        # chat is not named there.
        notice = f"Cancelled “{task.name}”." if shows(task, place) else "Cancelled that task."
        return toast("success", notice, await self.card(actor, place, notice=notice))

    def _place_of(self, action: CardAction) -> Place:
        """Where the clicked card is: a direct message only when this bot's sealed value
        says the card was drawn in this very chat as one; otherwise a group."""
        chat = action.open_chat_id
        value = action.value
        private = (
            bool(chat)
            and value.get("private") is True
            and value.get("chat") == chat
            and self._seal.valid(value)
        )
        return Place(chat, "p2p" if private else "group")

    def _row(self, task: ScheduledTask, viewer: str, place: Place) -> ScheduleRow:
        last = "never run"
        if task.last_run_at:
            last = f"last {self._time(task.last_run_at)}: {task.last_outcome or 'ok'}"
        button = cancel_value(task.id, drawn_in=place.chat_id, private=place.private)
        return ScheduleRow(
            task_id=task.id,
            name=task.name,
            schedule=schedule_of(task).describe(),
            next_run=self._time(task.next_run_at) if task.next_run_at else "none",
            last_run=last,
            state=task.state,
            can_cancel=may_act_on(task, Askers.of(viewer), self._is_admin),
            creator=task.creator,
            button=self._seal.sealed(button),
        )

    def _time(self, moment: float) -> str:
        return datetime.fromtimestamp(moment, self._zone).strftime("%a %d %b %H:%M")
