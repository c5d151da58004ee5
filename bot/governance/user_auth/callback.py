"""``GET /feishu/oauth/callback?code=&state=``: a person's browser back from Feishu's consent.

The URL is public and its state is on a card a whole group may see, so nothing in it is
taken on trust. In order: the state must be ours (HMAC), unexpired, and name a request that
exists for that person in that chat and is still pending; the exact callback is acted on
once (the replay guard, keyed by the state's nonce and the code); the code is exchanged
with the state's PKCE verifier; and the Feishu user who consented (user_info of the new
token) must be the person the state names. Only then is the grant stored, the request ended
as authorised, the card rewritten, and the waiting turn woken (on this replica at once, on
another through its watcher). Any refusal stores nothing and leaves the request as it was,
so the right person can still press the button: someone else's consent cannot use up
theirs.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable

from bot.feishu.errors import FeishuError
from bot.feishu.oauth import FeishuOAuth
from bot.feishu.oauth_callback import CallbackPage, CallbackQuery
from bot.feishu.oauth_state import StateError, StateSigner
from bot.store.replays import ReplayGuard
from bot.store.user_authorizations import (
    AUTHORISED,
    CANCELLED,
    EXPIRED,
    PENDING,
    AuthorizationRecord,
    UserAuthorizationStore,
)

from .consents import Consents

logger = logging.getLogger(__name__)

DONE = CallbackPage(
    200, "Authorised", "Thank you. You can close this page: I carry on in Feishu by myself."
)
INVALID = CallbackPage(
    400, "This link is not valid", "It was not made by this bot, or it was changed on the way."
)
EXPIRED_PAGE = CallbackPage(
    410, "This link has expired", "Ask again in Feishu (or send /login) for a new one."
)
USED = CallbackPage(409, "This link was already used", "Nothing more was done.")
CANCELLED_PAGE = CallbackPage(
    410, "This request was cancelled", "Ask again in Feishu (or send /login) for a new one."
)
SOMEONE_ELSE = CallbackPage(
    403,
    "This authorisation is for someone else",
    "You signed in to Feishu as another person than the one who asked. Nothing was stored; "
    "only the person named on the card can authorise it.",
)
DECLINED = CallbackPage(
    200, "Not authorised", "You declined, so nothing was done as you. You can close this page."
)


def feishu_failed(exc: FeishuError) -> CallbackPage:
    return CallbackPage(
        502,
        "Feishu did not accept the authorisation",
        f"Press the button on the card again to retry. ({exc.msg or exc.code})",
    )


class OAuthCallback:
    def __init__(
        self,
        *,
        signer: StateSigner,
        replays: ReplayGuard,
        requests: UserAuthorizationStore,
        consents: Consents,
        oauth: FeishuOAuth,
        redirect_uri: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._signer = signer
        self._replays = replays
        self._requests = requests
        self._consents = consents
        self._oauth = oauth
        self._redirect_uri = redirect_uri
        self._clock = clock

    async def __call__(self, query: CallbackQuery) -> CallbackPage:
        if query.error:
            # Anyone who saw the card could write this URL: it changes nothing.
            return DECLINED
        now = self._clock()
        try:
            claims = self._signer.verify(query.state, now=now)
        except StateError as exc:
            logger.warning("OAuth callback refused: %s", exc.reason)
            return EXPIRED_PAGE if exc.reason == "expired" else INVALID
        request = await self._requests.get(claims.nonce)
        if (
            not query.code
            or request is None
            or request.open_id != claims.open_id
            or request.chat_id != claims.chat_id
        ):
            logger.warning("OAuth callback for request %s refused: no such request", claims.nonce)
            return INVALID
        if request.state != PENDING:
            return _closed(request)
        code_digest = hashlib.sha256(query.code.encode()).hexdigest()[:32]
        remember = max(claims.expires_at - now, 0.0) + 60.0
        if not await self._replays.first_sighting(
            f"oauth-callback:{claims.nonce}:{code_digest}", remember_seconds=remember
        ):
            logger.warning("OAuth callback for request %s replayed: refused", request.id)
            return USED
        return await self._exchange(request, query.code, self._signer.code_verifier(claims))

    async def _exchange(
        self, request: AuthorizationRecord, code: str, verifier: str
    ) -> CallbackPage:
        try:
            tokens = await self._oauth.exchange_code(
                code, redirect_uri=self._redirect_uri, code_verifier=verifier
            )
        except FeishuError as exc:
            logger.warning("OAuth code exchange for request %s failed: %s", request.id, exc)
            return feishu_failed(exc)
        if tokens.open_id != request.open_id:
            logger.warning(
                "request %s of %s was consented to by %s: refused, nothing stored",
                request.id,
                request.open_id,
                tokens.open_id,
            )
            return SOMEONE_ELSE
        transition = await self._consents.record(request, tokens)
        if transition.changed:
            return DONE
        return _closed(transition.record or request)


def _closed(request: AuthorizationRecord) -> CallbackPage:
    if request.state == AUTHORISED:
        return USED
    if request.state == EXPIRED:
        return EXPIRED_PAGE
    if request.state == CANCELLED:
        return CANCELLED_PAGE
    return CallbackPage(410, "This request has ended", request.note or "Ask again in Feishu.")
