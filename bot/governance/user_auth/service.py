"""Per-user authorisation, assembled: what the composition root wires in, and the person's
own commands (``/login``, ``/logout``) and the admin's revoke.

Feishu has no endpoint that revokes a user token (larksuite's own plugin only deletes its
copy too): ``/logout`` and a revoke delete the stored grant, so it is never used again, and
the last access token lapses by itself within two hours. Pending requests of the person are
cancelled in the same transaction (``UserTokenStore.withdraw``), so no card stays open and a
consent still in flight cannot store the grant again afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Literal

from bot.feishu.client import FeishuClient
from bot.feishu.config import FeishuConfig
from bot.feishu.errors import FeishuError
from bot.feishu.oauth import FeishuOAuth
from bot.feishu.oauth_device import FeishuDeviceFlow
from bot.feishu.oauth_state import StateSigner
from bot.store.audit import AuditEntry
from bot.store.db import Database
from bot.store.replays import ReplayGuard
from bot.store.user_authorizations import AuthorizationRecord, UserAuthorizationStore
from bot.store.user_tokens import TokenCipher, UserGrant, UserTokenStore

from ..person_wait import PersonWaits
from .ask import AskerParts, Asking, ConsentAsker, ConsentUnavailable
from .callback import OAuthCallback
from .cards import AuthorizationCards
from .config import UserAuthConfig
from .consents import Consents
from .gate import ScopesOf, UserAuthorizationGate
from .grants import UserGrants
from .reconsent import Reconsent
from .source import UserTokenSource

logger = logging.getLogger(__name__)

LOGIN_PURPOSE = "use the tools that act as you"
LOGOUT_NOTE = "withdrawn with /logout"
REVOKED_NOTE = "revoked by an admin"
SWEEP_SECONDS = 30.0
PURGE_EVERY = 120  # sweeps: about an hour

LoginKind = Literal["no_tools", "already", "card", "no_card", "unavailable"]


@dataclass(frozen=True, slots=True)
class LoginOutcome:
    kind: LoginKind
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class UserAuth:
    config: UserAuthConfig
    tokens: UserTokenStore
    requests: UserAuthorizationStore
    grants: UserGrants
    asker: ConsentAsker
    consents: Consents
    waits: PersonWaits[AuthorizationRecord]
    source: UserTokenSource
    callback: OAuthCallback
    reconsent: Reconsent
    name_of: Callable[[str], Awaitable[str]]

    def gate(self, scopes_of: ScopesOf) -> UserAuthorizationGate:
        """The PreToolUse hook for the tools ``scopes_of`` names (built once the hub is)."""
        return UserAuthorizationGate(
            scopes_of=scopes_of,
            grants=self.grants,
            asker=self.asker,
            reconsent=self.reconsent,
            name_of=self.name_of,
            ttl_seconds=self.config.ttl_seconds,
        )

    async def login(self, asking: Asking, scopes: Collection[str]) -> LoginOutcome:
        """``/login``: the card for ``scopes`` (the user tools'), unless already granted."""
        if not scopes:
            return LoginOutcome("no_tools")
        try:
            if await self.grants.usable(asking.open_id, scopes) is not None:
                return LoginOutcome("already")
        except FeishuError as exc:  # the refresh of a grant it has: Feishu did not answer
            return LoginOutcome("unavailable", f"Feishu did not answer ({exc})")
        stored = await self.grants.stored(asking.open_id)
        wanted = {*scopes, *(stored.scopes if stored is not None else ())} - {"offline_access"}
        try:
            card = await self.asker.start(asking, sorted(wanted), LOGIN_PURPOSE)
        except ConsentUnavailable as exc:
            return LoginOutcome("unavailable", str(exc))
        return LoginOutcome("card" if card else "no_card", card or "")

    async def logout(self, open_id: str, *, chat_id: str) -> bool:
        """``/logout``: forget the person's grant; True when there was one."""
        entry = AuditEntry("user_auth.logout", actor=open_id, target=open_id, chat_id=chat_id)
        return await self._withdraw(open_id, LOGOUT_NOTE, entry)

    async def revoke(self, open_id: str, *, actor: str) -> bool:
        """An admin's revoke (the web console): forget the person's grant, audited."""
        entry = AuditEntry(
            "user_auth.revoked", actor=actor, target=open_id, detail={"via": "console"}
        )
        return await self._withdraw(open_id, REVOKED_NOTE, entry)

    async def granted(self) -> list[UserGrant]:
        """Who has authorised, and until when: never a token."""
        return await self.tokens.grants()

    async def _withdraw(self, open_id: str, note: str, entry: AuditEntry) -> bool:
        withdrawal = await self.tokens.withdraw(open_id, note=note, audit=entry)
        for request in withdrawal.cancelled:
            await self.consents.ended(request)  # wake its wait, rewrite its card
        return withdrawal.deleted

    async def sweep(self, *, interval: float = SWEEP_SECONDS) -> None:
        """Run for the life of the process: close requests nobody closed in time (their
        process is gone, or it was a /login card) and rewrite their cards; purge old ones."""
        sweeps = 0
        while True:
            await asyncio.sleep(interval)
            sweeps += 1
            try:
                for record in await self.requests.expire_overdue():
                    await self.consents.ended(record)
                if sweeps % PURGE_EVERY == 0:
                    await self.requests.purge()
            except Exception:
                logger.exception("sweeping authorisation requests failed; retrying")


def build_user_auth(
    config: UserAuthConfig,
    *,
    database: Database,
    feishu: FeishuClient,
    feishu_config: FeishuConfig,
    replays: ReplayGuard,
    timezone: str,
    owner: str,
    name_of: Callable[[str], Awaitable[str]],
    clock: Callable[[], float] = time.time,
) -> UserAuth:
    tokens = UserTokenStore(database, TokenCipher.from_setting(config.token_key), clock=clock)
    requests = UserAuthorizationStore(database, clock=clock)
    oauth = FeishuOAuth(feishu, feishu_config, clock=clock)
    grants = UserGrants(tokens, oauth, margin_seconds=config.refresh_margin_seconds, clock=clock)
    waits: PersonWaits[AuthorizationRecord] = PersonWaits(requests, kind="authorisation request")
    cards = AuthorizationCards(feishu, requests, timezone=timezone)
    consents = Consents(tokens=tokens, requests=requests, cards=cards, waits=waits)
    signer = StateSigner(config.state_secret)
    asker = ConsentAsker(
        AskerParts(
            config=config,
            requests=requests,
            cards=cards,
            waits=waits,
            consents=consents,
            signer=signer,
            app_id=feishu_config.app_id,
            feishu_domain=feishu_config.domain,
            device=FeishuDeviceFlow(oauth, domain=feishu_config.domain),
            owner=owner,
            clock=clock,
        )
    )
    reconsent = Reconsent()
    return UserAuth(
        config=config,
        tokens=tokens,
        requests=requests,
        grants=grants,
        asker=asker,
        consents=consents,
        waits=waits,
        source=UserTokenSource(grants=grants, reconsent=reconsent, name_of=name_of),
        callback=OAuthCallback(
            signer=signer,
            replays=replays,
            requests=requests,
            consents=consents,
            oauth=oauth,
            redirect_uri=config.redirect_uri,
            clock=clock,
        ),
        reconsent=reconsent,
        name_of=name_of,
    )
