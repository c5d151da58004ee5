"""Authorisation cards in the chat: posted as a reply to the person's message, kept true.

The pending card is posted once (its uuid makes a retried post show one card); when the
request ends, whoever ended it (the callback's replica, the poller, the expiry, a stop)
rewrites the card from the stored request, so no card offers a link that no longer works.
"""

from __future__ import annotations

import json
import logging

from bot.feishu.authorization_card import AuthorizationCardView, authorization_card
from bot.feishu.client import FeishuClient
from bot.feishu.errors import FeishuError
from bot.store.user_authorizations import AuthorizationRecord, UserAuthorizationStore

logger = logging.getLogger(__name__)


class AuthorizationCards:
    def __init__(
        self, feishu: FeishuClient, store: UserAuthorizationStore, *, timezone: str
    ) -> None:
        self._feishu = feishu
        self._store = store
        self._timezone = timezone

    def view(
        self, record: AuthorizationRecord, *, url: str = "", user_code: str = ""
    ) -> AuthorizationCardView:
        return AuthorizationCardView(
            request_id=record.id,
            open_id=record.open_id,
            purpose=record.purpose,
            scopes=record.scopes,
            expires_at=record.expires_at,
            flow="device" if record.flow == "device" else "code",
            state=record.state,
            url=url,
            user_code=user_code,
            decided_at=record.decided_at,
            note=record.note,
            timezone=self._timezone,
        )

    async def post(self, record: AuthorizationRecord, *, url: str, user_code: str = "") -> str:
        """Reply to the person's message with the pending card; returns its message id."""
        card = authorization_card(self.view(record, url=url, user_code=user_code))
        sent = await self._feishu.reply_message(
            record.message_id,
            msg_type="interactive",
            content=json.dumps(card, ensure_ascii=False),
            uuid=f"authorization-{record.id}",
            reply_in_thread=bool(record.thread_id),
        )
        await self._store.set_card(record.id, sent.message_id)
        return sent.message_id

    async def refresh(self, record: AuthorizationRecord) -> None:
        """Rewrite the card to how the request ended (best effort, logged)."""
        message_id = record.card_message_id
        if not message_id:
            return
        try:
            card = authorization_card(self.view(record))
            await self._feishu.patch_message(message_id, json.dumps(card, ensure_ascii=False))
        except FeishuError as exc:
            logger.warning("could not update authorisation card %s: %s", record.id, exc)
