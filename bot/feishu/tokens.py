"""The tenant access token, fetched without blocking the event loop.

lark-oapi's own token path is a synchronous HTTP call made inside its async methods
(it stalls the loop) and it never refetches after Feishu answers 99991663. So the
client fetches the token itself, through this cache:

- single flight: one fetch at a time; concurrent callers await the same fetch;
- the token is replaced ``refresh_margin`` seconds before the ``expire`` Feishu
  returned (Feishu may hand back an existing token with less than 2 h left, so the
  returned ``expire`` is the only truth);
- ``invalidate(token)`` drops a token the API refused, so the next ``get()`` refetches.
  Invalidating a token that was already replaced does nothing, so a burst of calls
  refused with the same stale token causes one refetch, not one each.

The fetch function is injected (the client supplies one that goes through lark-oapi),
which keeps this module free of the SDK.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

# Returns (token, expire): the token and its remaining lifetime in seconds.
TokenFetcher = Callable[[], Awaitable[tuple[str, float]]]


class TenantTokenManager:
    def __init__(
        self,
        fetch: TokenFetcher,
        *,
        refresh_margin: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._margin = refresh_margin
        self._clock = clock
        self._token: str | None = None
        self._refresh_at = 0.0
        self._inflight: asyncio.Task[str] | None = None
        self.fetches = 0  # completed fetches, for tests and metrics

    async def get(self) -> str:
        """A valid token, fetching one if there is none or it is about to expire."""
        if self._token is not None and self._clock() < self._refresh_at:
            return self._token
        if self._inflight is None:
            self._inflight = asyncio.create_task(self._refresh(), name="feishu-tenant-token")
            # Retrieve the outcome even if every waiter was cancelled (no "never retrieved").
            self._inflight.add_done_callback(_consume_outcome)
        # shield: a cancelled caller must not cancel the fetch the others are waiting for.
        return await asyncio.shield(self._inflight)

    def invalidate(self, token: str) -> None:
        """Forget ``token`` if it is the current one (Feishu refused it)."""
        if token == self._token:
            logger.info("feishu tenant token refused; it will be refetched")
            self._token = None

    async def aclose(self) -> None:
        task, self._inflight = self._inflight, None
        if task is not None and not task.done():
            task.cancel()
        self._token = None

    async def _refresh(self) -> str:
        try:
            started = self._clock()
            token, expire = await self._fetch()
            lifetime = max(float(expire), 0.0)
            # A short-lived token (tests, or Feishu near the end of a token's life) is still
            # used for half its life rather than refetched on every call.
            margin = min(self._margin, lifetime / 2)
            self._token = token
            self._refresh_at = started + lifetime - margin
            self.fetches += 1
            logger.debug("feishu tenant token fetched, expires in %.0f s", lifetime)
            return token
        finally:
            if self._inflight is asyncio.current_task():
                self._inflight = None


def _consume_outcome(task: asyncio.Task[str]) -> None:
    if not task.cancelled():
        task.exception()
