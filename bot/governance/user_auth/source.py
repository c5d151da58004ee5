"""The UserTokenSource connectors act as the user through (``connectors.base``).

``as_user(scopes, purpose, call)`` runs ``call(access_token)`` with the user token of the
person whose turn this is, found from the running turn, never from the model. By the time
a tool runs, the gate before it has made sure of the person's consent; this refreshes the
token when it is about to expire, and when Feishu refuses it mid-call (revoked, expired
early) refreshes once and retries. What cannot be fixed within the call (no grant, a scope
the grant lacks, a grant Feishu no longer honours) becomes a ToolError that says what to do,
and marks the person to be asked again by the gate when the tool is called again, once a
run. The token goes to ``call`` and nowhere else: not into a message, a log line or the
tool's result.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from bot.engine import ToolError, current_run
from bot.feishu.errors import FeishuError, FeishuTokenInvalid, FeishuUserScopeMissing
from bot.oauth_tokens import UserTokens

from .asker_of import asker_of
from .grants import UserGrants
from .reconsent import Reconsent

logger = logging.getLogger(__name__)

T = TypeVar("T")


class UserTokenSource:
    def __init__(
        self,
        *,
        grants: UserGrants,
        reconsent: Reconsent,
        name_of: Callable[[str], Awaitable[str]],
    ) -> None:
        self._grants = grants
        self._reconsent = reconsent
        self._name_of = name_of

    def __repr__(self) -> str:
        return "UserTokenSource()"

    async def as_user(
        self, scopes: Sequence[str], purpose: str, call: Callable[[str], Awaitable[T]]
    ) -> T:
        run = current_run()
        origin, refusal = asker_of(run)
        if origin is None or run is None:
            raise ToolError(refusal)
        open_id, run_id = origin.sender_open_id, run.run_id
        tokens = await self._usable(open_id, scopes)
        if tokens is None:
            raise await self._ask_again(run_id, open_id, f"has not authorised me to {purpose}")
        try:
            return await call(tokens.access_token)
        except FeishuUserScopeMissing:
            raise await self._ask_again(
                run_id, open_id, f"has not granted what is needed to {purpose}", scopes
            ) from None
        except FeishuTokenInvalid:
            logger.info("Feishu refused the user token of %s; refreshing it once", open_id)
        fresh = await self._refreshed(open_id, tokens)
        if fresh is None:
            raise await self._ask_again(run_id, open_id, "no longer has a grant Feishu honours")
        try:
            return await call(fresh.access_token)
        except FeishuTokenInvalid:
            await self._grants.store.delete(open_id)
            raise await self._ask_again(
                run_id, open_id, "has a grant Feishu refuses even refreshed"
            ) from None

    async def _usable(self, open_id: str, scopes: Sequence[str]) -> UserTokens | None:
        try:
            return await self._grants.usable(open_id, scopes)
        except FeishuError as exc:
            raise ToolError(f"Feishu did not answer about the person's grant ({exc})") from exc

    async def _refreshed(self, open_id: str, refused: UserTokens) -> UserTokens | None:
        try:
            return await self._grants.after_refusal(open_id, refused.access_token)
        except FeishuError as exc:
            raise ToolError(f"Feishu did not refresh the person's grant ({exc})") from exc

    async def _ask_again(
        self, run_id: str, open_id: str, problem: str, scopes: Sequence[str] = ()
    ) -> ToolError:
        who = await self._name_of(open_id)
        if self._reconsent.want(run_id, open_id):
            return ToolError(
                f"{who} {problem}. Nothing was done as them. Call this tool again: I will "
                "ask them to authorise first."
            )
        needed = f" ({', '.join(scopes)})" if scopes else ""
        return ToolError(
            f"{who} {problem}, and was already asked to authorise in this reply. Nothing was "
            f"done as them. If it keeps failing, an admin may need to grant the app the user "
            f"scopes{needed} in the Feishu developer console."
        )
