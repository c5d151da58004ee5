"""A ``UserTokenSource`` for tests: one person's real user tokens from the emulator's fake
OAuth, got through the real HTTP flow (the authorize redirect, then the v2 code exchange
with PKCE by :class:`~bot.feishu.oauth.FeishuOAuth`), so the tools under test send real
user tokens to the real fake endpoints through lark-oapi.

It stands in for the bot's own source (the authorisation card and the token store) and
keeps only what a test needs of it: consent on first use, a refresh and one retry when
Feishu refuses the token, and a record of what was asked.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import aiohttp

from bot.feishu import FeishuClient, FeishuTokenInvalid
from bot.feishu.oauth import FeishuOAuth, authorize_url
from bot.feishu.oauth_state import StateSigner
from bot.oauth_tokens import UserTokens

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config

T = TypeVar("T")
REDIRECT = "https://bot.example.com/feishu/oauth/callback"
_SIGNER = StateSigner("test-user-token-source")


class EmulatorUserTokens:
    """Acts as ``open_id``. ``grant``: the scopes they consent to (None: whatever each
    call asks for), so a test can leave one out."""

    def __init__(
        self,
        fake: FakeFeishu,
        client: FeishuClient,
        open_id: str,
        *,
        grant: Sequence[str] | None = None,
    ) -> None:
        self.fake = fake
        self.open_id = open_id
        self.grant = tuple(grant) if grant is not None else None
        self.oauth = FeishuOAuth(client, feishu_config(fake))
        self.tokens: UserTokens | None = None
        self.asked: list[tuple[tuple[str, ...], str]] = []  # (scopes, purpose) per call
        self.consents = 0
        self.refreshes = 0

    async def as_user(
        self, scopes: Sequence[str], purpose: str, call: Callable[[str], Awaitable[T]]
    ) -> T:
        self.asked.append((tuple(scopes), purpose))
        if self.tokens is None or not self._covers(scopes):
            self.tokens = await self.consent(self.grant if self.grant is not None else scopes)
        try:
            return await call(self.tokens.access_token)
        except FeishuTokenInvalid:
            self.refreshes += 1
            self.tokens = await self.oauth.refresh(self.tokens.refresh_token, open_id=self.open_id)
            return await call(self.tokens.access_token)

    def _covers(self, scopes: Sequence[str]) -> bool:
        assert self.tokens is not None
        return self.grant is not None or set(scopes) <= self.tokens.scopes

    async def consent(self, scopes: Sequence[str]) -> UserTokens:
        """Open the consent page as the person's browser would, then exchange the code."""
        self.consents += 1
        issued = _SIGNER.issue(
            open_id=self.open_id, chat_id="oc_test", now=time.time(), ttl_seconds=600
        )
        url = authorize_url(
            self.fake.app_id,
            REDIRECT,
            issued.state,
            issued.code_challenge,
            scopes,
            domain=self.fake.domain,
        )
        url += "&" + urllib.parse.urlencode({"as_user": self.open_id})
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, allow_redirects=False) as answer,
        ):
            location = urllib.parse.urlsplit(answer.headers["Location"])
        back = dict(urllib.parse.parse_qsl(location.query))
        verifier = _SIGNER.code_verifier(_SIGNER.verify(back["state"], now=time.time()))
        tokens = await self.oauth.exchange_code(
            back["code"], redirect_uri=REDIRECT, code_verifier=verifier
        )
        assert tokens.open_id == self.open_id
        return tokens


class FixedToken:
    """A source that hands over one token as it is (e.g. the app's tenant token, which
    the user-token endpoints must refuse)."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def as_user(
        self, scopes: Sequence[str], purpose: str, call: Callable[[str], Awaitable[T]]
    ) -> T:
        return await call(self.token)
