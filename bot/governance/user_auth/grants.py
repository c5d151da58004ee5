"""A person's stored grant, made usable: decrypted, refreshed before it expires, or gone.

Every path that acts as someone asks here first. A grant that cannot be used (the key
changed, Feishu refuses the refresh token) is deleted on the spot, so the next step asks the
person again instead of failing the same way each time; a refused one only if no new
consent replaced it while Feishu answered. The refresh itself is the token
store's single flight: one process at a time, across replicas, under a row lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection

from bot.feishu.errors import FeishuAuthorizationGone
from bot.feishu.oauth import FeishuOAuth
from bot.oauth_tokens import UserTokens
from bot.store.user_tokens import TokenDecryptError, UserTokensMissing, UserTokenStore

logger = logging.getLogger(__name__)


class UserGrants:
    def __init__(
        self,
        tokens: UserTokenStore,
        oauth: FeishuOAuth,
        *,
        margin_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._tokens = tokens
        self._oauth = oauth
        self._margin = margin_seconds
        self._clock = clock

    @property
    def store(self) -> UserTokenStore:
        return self._tokens

    async def stored(self, open_id: str) -> UserTokens | None:
        """The person's grant as stored (a grant that does not open is deleted: None)."""
        try:
            return await self._tokens.get(open_id)
        except TokenDecryptError as exc:
            logger.warning("%s; deleting it, so that they are asked again", exc)
            await self._tokens.delete(open_id)
            return None

    async def usable(self, open_id: str, scopes: Collection[str]) -> UserTokens | None:
        """Tokens of ``open_id`` covering ``scopes``, fresh for at least the margin; None
        when the person must (again) consent. FeishuError when Feishu did not answer."""
        tokens = await self.stored(open_id)
        if tokens is None or not set(scopes) <= tokens.scopes:
            return None
        return await self._refreshed(open_id, self._margin)

    async def after_refusal(self, open_id: str, refused_access_token: str) -> UserTokens | None:
        """Feishu refused this access token: the grant refreshed once (unless another call
        did already), or None when it is gone."""
        tokens = await self.stored(open_id)
        if tokens is None:
            return None
        if tokens.access_token != refused_access_token:
            return tokens  # someone refreshed it meanwhile
        # Refresh whatever the expiry says: Feishu has refused this token.
        return await self._refreshed(open_id, tokens.expires_at - self._clock() + 1.0)

    async def _refreshed(self, open_id: str, within_seconds: float) -> UserTokens | None:
        async def refresh(refresh_token: str) -> UserTokens:
            return await self._oauth.refresh(refresh_token, open_id=open_id)

        try:
            return await self._tokens.refresh_if_needed(
                open_id,
                within_seconds=within_seconds,
                refresh=refresh,
                # Deleted by the store, and only if no new consent replaced it meanwhile.
                gone=(FeishuAuthorizationGone,),
            )
        except UserTokensMissing:
            return None
        except TokenDecryptError as exc:
            logger.warning("%s; deleting it, so that they are asked again", exc)
            await self._tokens.delete(open_id)
            return None
        except FeishuAuthorizationGone as exc:
            logger.info(
                "the Feishu grant of %s is gone (%s); they will be asked again", open_id, exc
            )
            return None
