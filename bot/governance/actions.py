"""Card button clicks: approval decisions and the admin card's read-only toggle.

Feishu waits at most 3 s for the answer, so a click does one conditional update and
answers with a toast and the card as it now is. Every click is acted on once: its event
id is remembered (in the database, for every replica) for the replay window, so the exact
signed bytes posted again change nothing. A redelivered callback, a second click or a
stale card re-renders the recorded state. Approval clicks take the one decision path
(``ApprovalDecisions``); a toggle acts only when its value is sealed by this bot and was
rendered for the mode's current version.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from bot.feishu.admin_card import ADMIN_ACTION, READ_ONLY_SETTING
from bot.feishu.approval_card import APPROVAL_ACTION
from bot.feishu.client import FeishuClient
from bot.feishu.errors import FeishuError
from bot.feishu.events import CardAction
from bot.feishu.render import notice_card
from bot.store.approvals import ApprovalRecord
from bot.store.replays import ReplayGuard

from . import texts
from .admin import AdminCommands, announcement
from .cards import ApprovalCards
from .decisions import ApprovalDecisions, DecisionRequest, DecisionResult

logger = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, None]], object]
ClickHandler = Callable[[CardAction], Awaitable[dict[str, Any]]]

_DECIDED = {
    "approve": texts.APPROVED,
    "approve_session": texts.APPROVED_SESSION,
    "deny": texts.DENIED,
}


def toast(kind: str, content: str, card: dict[str, Any] | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = {"toast": {"type": kind, "content": content}}
    if card is not None:
        answer["card"] = {"type": "raw", "data": card}
    return answer


class CardActions:
    def __init__(
        self,
        *,
        decisions: ApprovalDecisions,
        cards: ApprovalCards,
        admin: AdminCommands,
        replays: ReplayGuard,
        replay_window_seconds: float,
        feishu: FeishuClient,
        spawn: Spawn,
    ) -> None:
        self._decisions = decisions
        self._cards = cards
        self._admin = admin
        self._replays = replays
        self._replay_window = replay_window_seconds
        self._feishu = feishu
        self._spawn = spawn
        # Other cards' buttons (e.g. /schedules), by their value's "action": they get the
        # same replay guard before they are handed the click.
        self._others: dict[str, ClickHandler] = {}

    def register(self, kind: str, handler: ClickHandler) -> None:
        if kind in (APPROVAL_ACTION, ADMIN_ACTION) or kind in self._others:
            raise ValueError(f"card action {kind!r} is taken")
        self._others[kind] = handler

    def swap(self, kind: str, handler: ClickHandler) -> ClickHandler:
        """Put ``handler`` in place of the one registered for ``kind`` (which it may wrap);
        returns that one. Approval and admin clicks cannot be swapped."""
        previous = self._others.get(kind)
        if previous is None:
            raise ValueError(f"no card action {kind!r} to swap")
        self._others[kind] = handler
        return previous

    async def __call__(self, action: CardAction) -> dict[str, Any]:
        if not await self._replays.first_sighting(
            _replay_key(action), remember_seconds=self._replay_window
        ):
            logger.warning("card callback %s seen before: not acted on again", action.event_id)
            return toast("info", texts.CLICK_ALREADY_HANDLED)
        kind = action.value.get("action")
        if kind == APPROVAL_ACTION:
            return await self._approval(action)
        if kind == ADMIN_ACTION:
            return await self._admin_toggle(action)
        other = self._others.get(kind) if isinstance(kind, str) else None
        if other is not None:
            return await other(action)
        return toast("info", texts.BUTTON_INACTIVE)

    async def _approval(self, action: CardAction) -> dict[str, Any]:
        result = await self._decisions.decide(
            DecisionRequest(
                approval_id=str(action.value.get("approval_id") or ""),
                decision=str(action.value.get("decision") or ""),
                actor=action.operator_open_id,
                via="card",
                chat_id=action.open_chat_id,
                card_message_id=action.open_message_id,
            )
        )
        return self._answer(result)

    def _answer(self, result: DecisionResult) -> dict[str, Any]:
        record = result.record
        if result.outcome == "decided" and record is not None:
            decision = "deny" if record.state == "denied" else "approve"
            if record.session:
                decision = "approve_session"
            return toast("success", _DECIDED[decision], self._cards.card(record))
        if result.outcome == "closed" and record is not None:
            return self._already(record)
        if result.outcome == "read_only" and record is not None:
            return toast("warning", texts.APPROVAL_READ_ONLY, self._cards.card(record))
        if result.outcome == "forbidden":
            return toast("error", texts.APPROVAL_NOT_YOURS)
        if result.outcome == "wrong_card":
            return toast("error", texts.APPROVAL_WRONG_CARD)
        if result.outcome == "unreadable":
            return toast("error", texts.APPROVAL_UNREADABLE)
        if result.outcome == "no_session_grants":
            return toast("error", texts.NO_SESSION_GRANTS)
        return toast("warning", texts.APPROVAL_GONE)

    def _already(self, record: ApprovalRecord) -> dict[str, Any]:
        message = texts.APPROVAL_ALREADY.get(record.state, texts.BUTTON_INACTIVE)
        return toast("info", message, self._cards.card(record))

    async def _admin_toggle(self, action: CardAction) -> dict[str, Any]:
        value = action.value.get("value")
        version = action.value.get("version")
        if (
            action.value.get("setting") != READ_ONLY_SETTING
            or value not in ("on", "off")
            or not isinstance(version, int)
            or isinstance(version, bool)
            or not self._admin.toggle_is_genuine(dict(action.value))
        ):
            logger.warning(
                "admin toggle %s by %s: a value this bot did not render; refused",
                action.event_id,
                action.operator_open_id,
            )
            return toast("error", texts.BUTTON_INACTIVE)
        actor = action.operator_open_id
        toggle = await self._admin.set_read_only(
            value == "on", actor=actor, chat_id=action.open_chat_id, expected_version=version
        )
        if not toggle.allowed or toggle.mode is None:
            return toast("error", toggle.refusal)
        if toggle.stale:
            return toast("warning", texts.ADMIN_CARD_STALE, self._admin.card(toggle.mode))
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


def _replay_key(action: CardAction) -> str:
    """A click's identity: its event id, or (a layout without one) a digest of all of it."""
    if action.event_id:
        return f"card:{action.event_id}"
    digest = hashlib.sha256(
        json.dumps(action.to_dict(), sort_keys=True, default=str).encode()
    ).hexdigest()
    return f"card-digest:{digest}"
