"""Approval cards in the chat: posted as a reply to the user's message, and kept true.

Decisions taken by a click get their resolved card in the callback's answer; expiries
and cancellations (nobody clicked) are written to the card here, so no card stays
clickable after its approval is closed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from bot.feishu.approval_card import ApprovalCardView, approval_card
from bot.feishu.client import FeishuClient
from bot.feishu.errors import FeishuError
from bot.store.approvals import ApprovalRecord, ApprovalStore

from .config import GovernanceConfig
from .posting import reply_with_card

logger = logging.getLogger(__name__)


class ApprovalCards:
    def __init__(
        self,
        feishu: FeishuClient,
        store: ApprovalStore,
        *,
        config: GovernanceConfig,
        acts_as_user: Callable[[str], bool] | None = None,
    ) -> None:
        self._feishu = feishu
        self._store = store
        self._config = config
        # Whether a tool acts as the requester (their user token): the card says "as <them>".
        self._acts_as_user = acts_as_user or (lambda tool: False)

    def card(self, record: ApprovalRecord) -> dict[str, Any]:
        return approval_card(self.view(record))

    def view(self, record: ApprovalRecord) -> ApprovalCardView:
        return ApprovalCardView(
            approval_id=record.id,
            tool=record.tool,
            arguments=record.arguments,
            requester=record.requester,
            requesters=record.requesters,
            reason=record.reason,
            approvers=record.approvers,
            expires_at=record.expires_at,
            state=record.state,
            decided_by=record.decided_by,
            decided_at=record.decided_at,
            session=record.session,
            note=record.note,
            timezone=self._config.timezone,
            console_url=self._config.console_url,
            session_grants=self._config.rules.session_grants,
            acts_as_user=self._acts_as_user(record.tool),
            profile=record.profile,
        )

    async def post(self, record: ApprovalRecord) -> str:
        """Reply to the user's message with the pending card; returns its message id.

        The uuid makes a retried post (or a re-run after a takeover) show one card.
        """
        card_message_id = await reply_with_card(
            self._feishu,
            message_id=record.message_id,
            thread_id=record.thread_id,
            card=self.card(record),
            uuid=f"approval-{record.id}",
        )
        await self._store.set_card(record.id, card_message_id)
        return card_message_id

    async def refresh(self, record: ApprovalRecord, card_message_id: str | None = None) -> None:
        """Rewrite the card to the approval's current state (best effort, logged)."""
        message_id = card_message_id or record.card_message_id
        if not message_id:
            return
        try:
            await self._feishu.patch_message(
                message_id, json.dumps(self.card(record), ensure_ascii=False)
            )
        except FeishuError as exc:
            logger.warning("could not update approval card %s: %s", record.id, exc)
