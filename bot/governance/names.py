"""People's display names, for what the model reads ("denied by Alice").

Cards use ``<at id=…>`` mentions, which Feishu renders itself; the model only sees
text, so names are looked up (contact API, cached) with the open_id as the fallback
when the app may not read contacts.
"""

from __future__ import annotations

import logging

from lark_oapi.api.contact.v3 import BatchUserRequest

from bot.feishu.client import FeishuClient
from bot.feishu.errors import FeishuError

logger = logging.getLogger(__name__)


class UserNames:
    def __init__(self, feishu: FeishuClient, *, cache_size: int = 1024) -> None:
        self._feishu = feishu
        self._cache: dict[str, str] = {}
        self._cache_size = cache_size

    async def name(self, open_id: str) -> str:
        if not open_id:
            return "someone"
        cached = self._cache.get(open_id)
        if cached is not None:
            return cached
        name = open_id
        try:
            request = BatchUserRequest.builder().user_ids([open_id]).user_id_type("open_id")
            body = await self._feishu.call("contact.user.batch", request.build())
            items = (body.get("data") or {}).get("items") or []
            if items and items[0].get("name"):
                name = str(items[0]["name"])
        except (FeishuError, AttributeError, TypeError) as exc:
            logger.info("no name for %s (%s); using the open_id", open_id, exc)
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[open_id] = name
        return name
