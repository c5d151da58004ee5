"""What happens once a person has consented: their grant stored, the request ended, the
card rewritten, and whoever waits woken. The same for both flows and on any replica.

The request is marked authorised and the tokens saved in one transaction, and only when
that transition wins (``UserTokenStore.save_consent``): a waiter that sees the request end
(here, or through another replica's watcher) finds the grant already there, and a callback
still in flight when ``/logout`` or an admin's revoke cancelled the request stores nothing.
The callers check first that the tokens are the asker's own, and the store checks again:
nothing here stores a grant for anyone but the person the request names.
"""

from __future__ import annotations

import logging

from bot.oauth_tokens import UserTokens
from bot.store.user_authorizations import (
    AuthorizationRecord,
    AuthorizationState,
    Transition,
    UserAuthorizationStore,
)
from bot.store.user_tokens import UserTokenStore

from ..person_wait import PersonWaits
from .cards import AuthorizationCards

logger = logging.getLogger(__name__)


class Consents:
    def __init__(
        self,
        *,
        tokens: UserTokenStore,
        requests: UserAuthorizationStore,
        cards: AuthorizationCards,
        waits: PersonWaits[AuthorizationRecord],
    ) -> None:
        self._tokens = tokens
        self._requests = requests
        self._cards = cards
        self._waits = waits

    async def record(self, request: AuthorizationRecord, tokens: UserTokens) -> Transition:
        """Store the asker's consent and end their request as authorised."""
        if tokens.open_id != request.open_id:
            raise ValueError("a consent is only ever recorded for the person who was asked")
        transition = await self._tokens.save_consent(request.id, tokens)
        if transition.changed and transition.record is not None:
            logger.info("%s authorised request %s", request.open_id, request.id)
            await self.ended(transition.record)
        return transition

    async def close(
        self, request_id: str, state: AuthorizationState, note: str | None = None
    ) -> Transition:
        """End a pending request without a consent; the card says why."""
        transition = await self._requests.close(request_id, state, note)
        if transition.changed and transition.record is not None:
            await self.ended(transition.record)
        return transition

    async def ended(self, record: AuthorizationRecord) -> None:
        self._waits.resolve(record)
        await self._cards.refresh(record)
