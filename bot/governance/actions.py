"""Card button clicks: approval decisions and the admin card's read-only toggle.

Feishu waits at most 3 s for the answer, so a click does one conditional update and
answers with a toast and the card as it now is. Every path is idempotent: a second
click, a redelivered callback or a stale card re-renders the recorded state and
changes nothing. Only the people allowed to decide can decide.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from bot.feishu.admin_card import ADMIN_ACTION
from bot.feishu.approval_card import APPROVAL_ACTION
from bot.feishu.client import FeishuClient
from bot.feishu.errors import FeishuError
from bot.feishu.events import CardAction
from bot.feishu.render import notice_card
from bot.store.approvals import PENDING, ApprovalRecord, ApprovalStore

from . import texts
from .admin import AdminCommands, announcement
from .cards import ApprovalCards
from .config import GovernanceConfig
from .waits import ApprovalWaits

logger = logging.getLogger(__name__)

DECISIONS = ("approve", "deny", "approve_session")
Spawn = Callable[[Coroutine[Any, Any, None]], object]


def toast(kind: str, content: str, card: dict[str, Any] | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = {"toast": {"type": kind, "content": content}}
    if card is not None:
        answer["card"] = {"type": "raw", "data": card}
    return answer


class CardActions:
    def __init__(
        self,
        *,
        config: GovernanceConfig,
        approvals: ApprovalStore,
        waits: ApprovalWaits,
        cards: ApprovalCards,
        admin: AdminCommands,
        feishu: FeishuClient,
        spawn: Spawn,
    ) -> None:
        self._config = config
        self._approvals = approvals
        self._waits = waits
        self._cards = cards
        self._admin = admin
        self._feishu = feishu
        self._spawn = spawn

    async def __call__(self, action: CardAction) -> dict[str, Any]:
        kind = action.value.get("action")
        if kind == APPROVAL_ACTION:
            return await self._approval(action)
        if kind == ADMIN_ACTION:
            return await self._admin_toggle(action)
        return toast("info", texts.BUTTON_INACTIVE)

    async def _approval(self, action: CardAction) -> dict[str, Any]:
        approval_id = str(action.value.get("approval_id") or "")
        decision = action.value.get("decision")
        record = await self._approvals.get(approval_id) if approval_id else None
        if record is None or decision not in DECISIONS:
            return toast("warning", texts.APPROVAL_GONE)
        if record.state != PENDING:
            return self._already(record)
        actor = action.operator_open_id
        if actor not in record.approvers:
            logger.info("approval %s: %s may not decide it", approval_id, actor)
            return toast("error", texts.APPROVAL_NOT_YOURS)
        outcome = await self._approvals.decide(approval_id, decision, actor=actor)
        if outcome.record is None:
            return toast("warning", texts.APPROVAL_GONE)
        if not outcome.changed:  # lost a race with the expiry or another click
            return self._already(outcome.record)
        self._waits.resolve(outcome.record)
        message = {
            "approve": texts.APPROVED,
            "approve_session": texts.APPROVED_SESSION,
            "deny": texts.DENIED,
        }[decision]
        return toast("success", message, self._cards.card(outcome.record))

    def _already(self, record: ApprovalRecord) -> dict[str, Any]:
        message = texts.APPROVAL_ALREADY.get(record.state, texts.BUTTON_INACTIVE)
        return toast("info", message, self._cards.card(record))

    async def _admin_toggle(self, action: CardAction) -> dict[str, Any]:
        value = action.value.get("value")
        if action.value.get("setting") != "read_only" or value not in ("on", "off"):
            return toast("info", texts.BUTTON_INACTIVE)
        actor = action.operator_open_id
        toggle = await self._admin.set_read_only(
            value == "on", actor=actor, chat_id=action.open_chat_id
        )
        if not toggle.allowed or toggle.mode is None:
            return toast("error", toggle.refusal)
        notice = None
        if toggle.changed:
            notice = announcement(toggle.mode, actor)
            if action.open_chat_id:
                # Announced in the chat where it was toggled, after the callback answers.
                self._spawn(self._announce(action.open_chat_id, notice))
        state = "on" if toggle.mode.on else "off"
        message = f"Read-only mode is {state}." if toggle.changed else f"Already {state}."
        return toast(
            "success" if toggle.changed else "info", message, self._admin.card(toggle.mode, notice)
        )

    async def _announce(self, chat_id: str, text: str) -> None:
        try:
            await self._feishu.send_message(
                "chat_id",
                chat_id,
                msg_type="interactive",
                content=json.dumps(notice_card(text), ensure_ascii=False),
            )
        except FeishuError as exc:
            logger.warning("could not announce the mode change in %s: %s", chat_id, exc)
