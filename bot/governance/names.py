"""People's display names, for what the model reads ("denied by Alice"), and their time
zones (a scheduled task's default).

Cards use ``<at id=…>`` mentions, which Feishu renders itself; the model only sees
text, so names are looked up (contact API, cached) with the open_id as the fallback
when the app may not read contacts. The same answer carries the person's time zone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from lark_oapi.api.contact.v3 import BatchUserRequest

from bot.feishu.client import FeishuClient
from bot.feishu.errors import FeishuError

logger = logging.getLogger(__name__)


NAME_TTL = 3600.0  # a name changes rarely; an hour keeps lookups to a few a day a person
MISS_TTL = 300.0  # no name (no contact scope, or Feishu hiccuped): ask again in minutes


class UserNames:
    """Names by open_id, cached with an expiry; concurrent lookups of one person share
    one API call (the free tier counts every call)."""

    def __init__(
        self,
        feishu: FeishuClient,
        *,
        cache_size: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._feishu = feishu
        # open_id -> (expires at, name, time zone or None)
        self._cache: dict[str, tuple[float, str, str | None]] = {}
        self._cache_size = cache_size
        self._clock = clock
        self._pending: dict[str, asyncio.Task[tuple[str, str | None, bool]]] = {}

    async def name(self, open_id: str) -> str:
        if not open_id:
            return "someone"
        name, _ = await self._person(open_id)
        return name

    async def time_zone(self, open_id: str) -> str | None:
        """The person's time zone as Feishu has it (an IANA name), or None when unknown."""
        if not open_id:
            return None
        _, zone = await self._person(open_id)
        return zone

    async def _person(self, open_id: str) -> tuple[str, str | None]:
        cached = self._cache.get(open_id)
        if cached is not None and cached[0] > self._clock():
            return cached[1], cached[2]
        task = self._pending.get(open_id)
        if task is None:
            task = asyncio.ensure_future(self._look_up(open_id))
            self._pending[open_id] = task
            task.add_done_callback(lambda _: self._pending.pop(open_id, None))
        name, zone, found = await asyncio.shield(task)
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[open_id] = (self._clock() + (NAME_TTL if found else MISS_TTL), name, zone)
        return name, zone

    async def _look_up(self, open_id: str) -> tuple[str, str | None, bool]:
        try:
            request = BatchUserRequest.builder().user_ids([open_id]).user_id_type("open_id")
            body = await self._feishu.call("contact.user.batch", request.build())
            items = (body.get("data") or {}).get("items") or []
            if items and items[0].get("name"):
                zone = items[0].get("time_zone")
                return str(items[0]["name"]), zone if isinstance(zone, str) and zone else None, True
        except (FeishuError, AttributeError, TypeError) as exc:
            logger.info("no name for %s (%s); using the open_id", open_id, exc)
        return open_id, None, False
