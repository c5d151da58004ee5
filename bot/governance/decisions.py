"""The one path every approval decision takes: a card click and the web console alike.

In order: the decision is one we know; the approval exists and is pending; a click came
from the approval's own card in the approval's own chat; the actor may decide it; an
approval of a write in read-only mode is cancelled instead (the organisation does not
write, whoever clicks); a call the card could not show whole is not approved from the card
unless the console shows it; then one conditional update, the waiting call woken, and the
card in the chat rewritten. A rule added here holds for both ways in.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from bot.feishu.approval_card import approvable_from_card
from bot.store.approvals import (
    DECISIONS,
    PENDING,
    READ_ONLY_NOTE,
    ApprovalRecord,
    ApprovalStore,
    Decision,
)
from bot.store.org import OrgSettingsStore

from .cards import ApprovalCards
from .config import GovernanceConfig
from .person_wait import PersonWaits

logger = logging.getLogger(__name__)

Via = Literal["card", "console"]
DecisionOutcome = Literal[
    "decided",  # this call made the decision
    "unknown",  # no such approval, or not a decision we know
    "closed",  # it had already ended (decided, expired, cancelled): `record` says how
    "wrong_card",  # the click came from another card or chat than the approval's own
    "forbidden",  # the actor may not decide it
    "read_only",  # read-only mode: an approval of a write was cancelled instead
    "unreadable",  # the card could not show the whole call and no console can
    "no_session_grants",  # "approve for this person here" is switched off
]


@dataclass(frozen=True, slots=True)
class DecisionRequest:
    approval_id: str
    decision: str
    actor: str
    via: Via
    # For a click: where it came from (the callback's open_chat_id / open_message_id).
    chat_id: str = ""
    card_message_id: str = ""


@dataclass(frozen=True, slots=True)
class DecisionResult:
    outcome: DecisionOutcome
    record: ApprovalRecord | None = None


class ApprovalDecisions:
    def __init__(
        self,
        *,
        config: GovernanceConfig,
        approvals: ApprovalStore,
        org: OrgSettingsStore,
        waits: PersonWaits[ApprovalRecord],
        cards: ApprovalCards,
    ) -> None:
        self._config = config
        self._approvals = approvals
        self._org = org
        self._waits = waits
        self._cards = cards

    async def approval(self, approval_id: str) -> ApprovalRecord | None:
        return await self._approvals.get(approval_id) if approval_id else None

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        if request.decision not in DECISIONS or not request.approval_id:
            return DecisionResult("unknown")
        decision: Decision = request.decision
        record = await self._approvals.get(request.approval_id)
        if record is None:
            return DecisionResult("unknown")
        if record.state != PENDING:
            return DecisionResult("closed", record)
        if request.via == "card" and not _from_its_own_card(record, request):
            logger.warning(
                "approval %s: a click from message %s in %s, not from its card; refused",
                record.id,
                request.card_message_id or "?",
                request.chat_id or "?",
            )
            return DecisionResult("wrong_card", record)
        if request.actor not in record.approvers:
            logger.info("approval %s: %s may not decide it", record.id, request.actor)
            return DecisionResult("forbidden", record)
        approving = decision != "deny"
        if approving and record.side_effect != "read" and (await self._org.read_only()).on:
            return await self._cancel_for_read_only(record)
        if approving and request.via == "card" and not self._readable(record):
            return DecisionResult("unreadable", record)
        if decision == "approve_session" and not self._config.rules.session_grants:
            return DecisionResult("no_session_grants", record)
        outcome = await self._approvals.decide(
            record.id,
            decision,
            actor=request.actor,
            via=None if request.via == "card" else "console",
        )
        if outcome.record is None:
            return DecisionResult("unknown")
        if not outcome.changed:  # lost a race with the expiry, another click or read-only
            return DecisionResult("closed", outcome.record)
        logger.info("approval %s: %s by %s (%s)", record.id, decision, request.actor, request.via)
        self._waits.resolve(outcome.record)
        if request.via != "card":  # a click's answer carries the new card itself
            await self._cards.refresh(outcome.record)
        return DecisionResult("decided", outcome.record)

    async def _cancel_for_read_only(self, record: ApprovalRecord) -> DecisionResult:
        outcome = await self._approvals.cancel(record.id, READ_ONLY_NOTE)
        current = outcome.record or record
        if outcome.changed:
            logger.info("approval %s cancelled: read-only mode is on", record.id)
            self._waits.resolve(current)
            await self._cards.refresh(current)
        return DecisionResult("read_only", current)

    def _readable(self, record: ApprovalRecord) -> bool:
        return approvable_from_card(self._cards.view(record))


def _from_its_own_card(record: ApprovalRecord, request: DecisionRequest) -> bool:
    # The card's message id is recorded right after it was sent; a click in between (or on
    # any other card that copies the button's value) is refused.
    return bool(
        record.card_message_id
        and request.card_message_id == record.card_message_id
        and request.chat_id == record.chat_id
    )
