"""Who a document or Base is shared with, as Feishu tells the app.

Feishu has no call that asks, with the app's token, whether *another* person may open a
document (``permissions/:token/members/auth`` answers for the caller only). What the app
may read is the direct collaborator list (``GET /drive/v1/permissions/:token/members``:
people by open_id, group chats by chat_id) and the owner (``POST /drive/v1/metas/
batch_query``). A grant found there is certain; access that comes another way (a
department, a user group, a parent folder or wiki space, a link shared with the whole
company) is not in the list, so it is not counted: the bot then reads nothing and says how
to share the document so that it can.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import lark_oapi as lark
from lark_oapi.api.drive.v1 import (
    BatchQueryMetaRequest,
    ListPermissionMemberRequest,
    MetaRequest,
    RequestDoc,
)

from bot.feishu.client import FeishuClient
from bot.feishu.errors import FeishuError

from .access import ReadAccess
from .audience import Audience
from .brief_cache import BriefCache
from .errors import tool_error

Kind = Literal["docx", "bitable"]
# A document or Base token as Feishu writes them: letters and digits only. Anything else is
# never put into a request path.
_TOKEN = re.compile(r"[A-Za-z0-9]{1,100}")


def is_token(value: str) -> bool:
    return _TOKEN.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class Sharing:
    """The direct grants of one document or Base: people (open_ids) and group chats."""

    people: frozenset[str]
    chats: frozenset[str]


class Shares:
    """The audience check for documents and Bases, each answer kept briefly."""

    def __init__(
        self,
        client: Callable[[], FeishuClient],
        access: ReadAccess,
        clock: Callable[[], float],
    ) -> None:
        self._client = client
        self._access = access
        self._sharing: BriefCache[tuple[Kind, str], Sharing] = BriefCache(
            self._fetch_sharing, clock=clock
        )
        self._owner: BriefCache[tuple[Kind, str], str] = BriefCache(self._fetch_owner, clock=clock)

    async def audience_may_open(self, audience: Audience, kind: Kind, token: str) -> bool:
        """Whether a direct grant of ``token`` (or its ownership) covers the audience."""
        sharing = await self._sharing.get((kind, token))
        if await self._access.covers(audience, sharing.people, sharing.chats):
            return True
        owner = await self._owner.get((kind, token))
        return bool(owner) and await self._access.covers(
            audience, sharing.people | {owner}, sharing.chats
        )

    async def _fetch_sharing(self, key: tuple[Kind, str]) -> Sharing:
        kind, token = key
        request = ListPermissionMemberRequest.builder().token(token).type(kind).build()
        data = await self._data("drive.permission.member.list", request)
        people: set[str] = set()
        chats: set[str] = set()
        for item in data.get("items") or []:
            if not isinstance(item, dict) or not item.get("member_id"):
                continue
            if item.get("member_type") == "openid":
                people.add(str(item["member_id"]))
            elif item.get("member_type") == "openchat":
                chats.add(str(item["member_id"]))
        return Sharing(frozenset(people), frozenset(chats))

    async def _fetch_owner(self, key: tuple[Kind, str]) -> str:
        kind, token = key
        body = MetaRequest.builder().request_docs(
            [RequestDoc.builder().doc_token(token).doc_type(kind).build()]
        )
        request = (
            BatchQueryMetaRequest.builder()
            .user_id_type("open_id")
            .request_body(body.build())
            .build()
        )
        data = await self._data("drive.meta.batch_query", request)
        for meta in data.get("metas") or []:
            if isinstance(meta, dict) and meta.get("doc_token") == token:
                return str(meta.get("owner_id") or "")
        return ""

    async def _data(self, endpoint: str, request: lark.BaseRequest) -> dict[str, Any]:
        try:
            body = await self._client().call(endpoint, request)
        except FeishuError as exc:
            raise tool_error(exc, "Checking who it is shared with") from exc
        data = body.get("data")
        return data if isinstance(data, dict) else {}


__all__ = ["Kind", "Shares", "Sharing", "is_token"]
