"""What every workspace tool family shares: the client call and the shape of results."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any, TypeVar
from uuid import UUID, uuid5

import lark_oapi as lark
from lark_oapi.api.authen.v1 import GetUserInfoRequest

from bot.feishu.client import FeishuClient
from bot.feishu.errors import FeishuError
from bot.timezones import time_zone
from connectors.base import Connector, ConnectorContext, ToolError

from .access import ReadAccess
from .brief_cache import BriefCache
from .errors import tool_error, user_tool_error
from .members import chat_is_external, chat_members
from .settings import FeishuWorkspaceSettings
from .shares import Shares
from .times import parse_time

_IDS = UUID("5f0c7d52-7a51-4d0c-9d0e-6c1f7a3f2b10")  # namespace of our idempotency keys
T = TypeVar("T")

# Said when a tool that acts as the asker runs on a bot without per-user authorisation.
NOT_SET_UP = (
    "this needs the bot to act as you in Feishu, and acting as users is not set up on this "
    "bot: an admin must set LARKGATE_TOKEN_KEY (the key that encrypts people's Feishu "
    "authorisations; see the README's configuration reference). Until then the bot sees "
    "only its own calendar, the tasks it made and what was shared with it."
)


class UserCall:
    """Feishu calls with one person's user access token, inside
    :meth:`~connectors.base.UserTokenSource.as_user`. Failures are raised as they are, so
    that the token source can refresh the token or ask the person again."""

    def __init__(self, client: FeishuClient, access_token: str) -> None:
        self._client = client
        self._token = access_token

    def __repr__(self) -> str:
        return "UserCall(<user token>)"  # never the token itself

    async def data(self, endpoint: str, request: lark.BaseRequest) -> dict[str, Any]:
        """The ``data`` of one call made as the person."""
        body = await self._client.call_as_user(endpoint, request, self._token)
        data = body.get("data")
        return data if isinstance(data, dict) else {}

    async def open_id(self) -> str:
        """Whose token this is: their open_id (``authen/v1/user_info``)."""
        data = await self.data("authen.user_info", GetUserInfoRequest.builder().build())
        open_id = data.get("open_id")
        if not isinstance(open_id, str) or not open_id:
            raise ToolError("Feishu did not say whose authorisation this is (no open_id)")
        return open_id


class WorkspaceTools(Connector):
    """The base of each tool family; :class:`FeishuWorkspace` mixes the families together."""

    def __init__(
        self,
        settings: FeishuWorkspaceSettings,
        context: ConnectorContext,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(settings, context)
        self.settings: FeishuWorkspaceSettings = settings
        self._tz: tzinfo = time_zone(settings.timezone)
        # Who may read what the app reads (audience.py, access.py): Feishu's answers about
        # chats and shares are kept for a minute of ``clock``.
        self._clock = clock
        self._access = ReadAccess(
            BriefCache(lambda chat_id: chat_members(self._client(), chat_id), clock=clock),
            BriefCache(lambda chat_id: chat_is_external(self._client(), chat_id), clock=clock),
        )
        self._shares = Shares(self._client, self._access, clock)

    def _client(self) -> FeishuClient:
        client = self.context.feishu
        if client is None:
            raise ToolError("the Feishu workspace tools are not configured (no Feishu client)")
        return client

    async def _data(self, endpoint: str, request: lark.BaseRequest, doing: str) -> dict[str, Any]:
        """The ``data`` of one call; any Feishu failure as a ToolError saying what to do."""
        # The bot's own client: the app's tenant token, counted, retried once on a token
        # error. The app acts as itself, never as the person asking.
        try:
            body = await self._client().call(endpoint, request)
        except FeishuError as exc:
            raise tool_error(exc, doing) from exc
        data = body.get("data")
        return data if isinstance(data, dict) else {}

    async def _as_user(
        self,
        scopes: Sequence[str],
        purpose: str,
        doing: str,
        work: Callable[[UserCall], Awaitable[T]],
    ) -> T:
        """``work`` done with the asking person's user token, which the context's token
        source provides (asking them to authorise ``purpose`` with ``scopes`` first, if
        need be). Who that person is comes from the run, never from the model."""
        source = self.context.user_tokens
        if source is None:
            raise ToolError(f"{doing} failed: {NOT_SET_UP}")
        client = self._client()

        async def call(access_token: str) -> T:
            return await work(UserCall(client, access_token))

        try:
            return await source.as_user(scopes, purpose, call)
        except FeishuError as exc:
            raise user_tool_error(exc, doing) from exc

    def _when(self, value: str, name: str) -> datetime:
        return parse_time(value, name, self._tz)

    def _epoch(self, value: str, name: str) -> int:
        return int(self._when(value, name).timestamp())


def items_of(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    items = data.get("items")
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def object_of(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` when it is a JSON object, else {} (Feishu omits empty ones)."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def more_hint(data: Mapping[str, Any]) -> list[str]:
    token = data.get("page_token")
    if data.get("has_more") and token:
        return [f"[More: call again with page_token={token}]"]
    return []


def stable_id(*parts: Any) -> str:
    """A UUID derived from ``parts``: the same request twice gets the same key."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return str(uuid5(_IDS, text))


def clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = [
    "NOT_SET_UP",
    "UserCall",
    "WorkspaceTools",
    "clip",
    "items_of",
    "more_hint",
    "object_of",
    "stable_id",
]
