"""The web console's governance actions: approve or deny, and switch read-only mode.

They take the same path as a card click (``CardActions``): one conditional update in the
store, the waiting tool call woken (``ApprovalWaits.resolve``), the approval card in the
chat rewritten to its final state. Feishu's side needs a person for each decision (cards
mention who decided; a denied tool tells the model who denied it), so the console acts
as an admin: the first admin (sorted by open_id) allowed to decide the approval, and for
read-only mode the first admin in LARKGATE_ADMINS. The audit rows carry
``"via": "console"`` in their detail. With no admin to act as, the console is refused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from bot.store.approvals import PENDING, ApprovalRecord, ApprovalStore, Decision

from .admin import AdminCommands, Toggle
from .cards import ApprovalCards
from .config import GovernanceConfig
from .waits import ApprovalWaits

logger = logging.getLogger(__name__)

VIA = "console"

ConsoleOutcome = Literal["decided", "unknown", "closed", "forbidden"]


@dataclass(frozen=True, slots=True)
class ConsoleDecision:
    """``decided``: this call made the decision; ``closed``: the approval had already ended
    (decided, expired, cancelled: ``record`` says how); ``forbidden``: no admin may decide it;
    ``unknown``: no such approval."""

    outcome: ConsoleOutcome
    record: ApprovalRecord | None = None


class ConsoleActions:
    def __init__(
        self,
        *,
        config: GovernanceConfig,
        approvals: ApprovalStore,
        waits: ApprovalWaits,
        cards: ApprovalCards,
        admin: AdminCommands,
    ) -> None:
        self._config = config
        self._approvals = approvals
        self._waits = waits
        self._cards = cards
        self._admin = admin

    @property
    def admin(self) -> str | None:
        """The open_id the console acts as for org settings (None: no admins configured)."""
        admins = sorted(self._config.admins)
        return admins[0] if admins else None

    def actor_for(self, record: ApprovalRecord) -> str | None:
        """The admin the console decides ``record`` as, if any admin may decide it."""
        allowed = sorted(a for a in record.approvers if self._config.is_admin(a))
        return allowed[0] if allowed else None

    async def decide(self, approval_id: str, decision: Decision) -> ConsoleDecision:
        record = await self._approvals.get(approval_id)
        if record is None:
            return ConsoleDecision("unknown")
        if record.state != PENDING:
            return ConsoleDecision("closed", record)
        actor = self.actor_for(record)
        if actor is None:
            return ConsoleDecision("forbidden", record)
        outcome = await self._approvals.decide(approval_id, decision, actor=actor, via=VIA)
        if outcome.record is None:
            return ConsoleDecision("unknown")
        if not outcome.changed:  # lost a race with a click or the expiry
            return ConsoleDecision("closed", outcome.record)
        logger.info("approval %s: %s from the console (as %s)", approval_id, decision, actor)
        self._waits.resolve(outcome.record)
        await self._cards.refresh(outcome.record)
        return ConsoleDecision("decided", outcome.record)

    async def set_read_only(self, on: bool) -> Toggle:
        actor = self.admin
        if actor is None:
            return Toggle(False, refusal="no admins are configured (LARKGATE_ADMINS)")
        return await self._admin.set_read_only(on, actor=actor, chat_id=None, via=VIA)
