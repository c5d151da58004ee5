"""The web console's governance actions: approve or deny, and switch read-only mode.

They take the same path as a card click: ``ApprovalDecisions`` (pending, actor, read-only
mode, one conditional update, the waiting call woken, the card in the chat rewritten) and
``AdminCommands.set_read_only`` (which cancels pending writes when read-only goes on).
Feishu's side needs a person for each decision (cards mention who decided; a denied tool
tells the model who denied it), so the console acts as an admin: the first admin (sorted
by open_id) allowed to decide the approval, and for read-only mode the first admin in
LARKGATE_ADMINS. The audit rows carry ``"via": "console"`` in their detail. With no admin
to act as, the console is refused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final, Literal

from bot.store.approvals import ApprovalRecord, Decision

from .admin import AdminCommands, Toggle
from .config import GovernanceConfig
from .decisions import ApprovalDecisions, DecisionRequest

logger = logging.getLogger(__name__)

VIA: Final = "console"

ConsoleOutcome = Literal["decided", "unknown", "closed", "forbidden", "read_only"]


@dataclass(frozen=True, slots=True)
class ConsoleDecision:
    """``decided``: this call made the decision; ``closed``: the approval had already ended
    (decided, expired, cancelled: ``record`` says how); ``forbidden``: no admin may decide it;
    ``read_only``: read-only mode is on, so the write's approval was cancelled instead;
    ``unknown``: no such approval."""

    outcome: ConsoleOutcome
    record: ApprovalRecord | None = None


class ConsoleActions:
    def __init__(
        self,
        *,
        config: GovernanceConfig,
        decisions: ApprovalDecisions,
        admin: AdminCommands,
    ) -> None:
        self._config = config
        self._decisions = decisions
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
        record = await self._decisions.approval(approval_id)
        if record is None:
            return ConsoleDecision("unknown")
        actor = self.actor_for(record) or ""
        result = await self._decisions.decide(
            DecisionRequest(approval_id, decision, actor=actor, via=VIA)
        )
        outcome = result.outcome
        if outcome in ("decided", "closed", "forbidden", "read_only"):
            return ConsoleDecision(outcome, result.record)
        return ConsoleDecision("unknown", result.record)

    async def set_read_only(self, on: bool) -> Toggle:
        actor = self.admin
        if actor is None:
            return Toggle(False, refusal="no admins are configured (LARKGATE_ADMINS)")
        return await self._admin.set_read_only(on, actor=actor, chat_id=None, via=VIA)
