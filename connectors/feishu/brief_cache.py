"""Answers from Feishu kept for a short while: who is in a chat, who a document is shared
with. The free tier allows 10,000 API calls a month, and one question can ask the same
thing several times (a chat's members for each tool call of a run); a minute is short
enough that a person removed from a chat or a document stops being let in soon after."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

BRIEFLY = 60.0  # seconds an answer is trusted


class BriefCache(Generic[K, V]):
    """``fetch(key)``'s answer for ``ttl`` seconds of ``clock``; callers asking for a key
    while it is being fetched share that one call. A fetch that raises is not kept."""

    def __init__(
        self,
        fetch: Callable[[K], Awaitable[V]],
        *,
        ttl: float = BRIEFLY,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 1000,
    ) -> None:
        self._fetch = fetch
        self._ttl = ttl
        self._clock = clock
        self._max_entries = max_entries
        self._kept: dict[K, tuple[float, V]] = {}
        self._pending: dict[K, asyncio.Future[V]] = {}

    async def get(self, key: K) -> V:
        while True:
            kept = self._kept.get(key)
            if kept is not None and self._clock() < kept[0]:
                return kept[1]
            pending = self._pending.get(key)
            if pending is None:
                return await self._fetch_once(key)
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # this caller was cancelled
                # The call that was fetching was cancelled, not this one: fetch again.

    async def _fetch_once(self, key: K) -> V:
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            value = await self._fetch(key)
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here, so a fetch nobody shared logs nothing
            raise
        except BaseException:
            future.cancel()
            raise
        finally:
            del self._pending[key]
        future.set_result(value)
        self._keep(key, value)
        return value

    def _keep(self, key: K, value: V) -> None:
        now = self._clock()
        if len(self._kept) >= self._max_entries:
            self._kept = {k: v for k, v in self._kept.items() if now < v[0]}
            while len(self._kept) >= self._max_entries:
                del self._kept[next(iter(self._kept))]  # the oldest first
        self._kept[key] = (now + self._ttl, value)


__all__ = ["BRIEFLY", "BriefCache"]
