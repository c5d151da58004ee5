"""The conversation lock across server processes, over the database's lock rows.

Waiting is a short poll with backoff: it only happens when two processes hold messages
of the same conversation at the same moment, which is rare (a user writes again while
another replica still finishes the previous turn). Held locks are renewed by one loop.
"""

from __future__ import annotations

import asyncio
import logging
import random

from bot.store.conversation_locks import ConversationLocks

logger = logging.getLogger(__name__)


class SharedConversationLock:
    def __init__(
        self,
        locks: ConversationLocks,
        *,
        renew_every: float,
        first_wait: float = 0.05,
        max_wait: float = 0.5,
    ) -> None:
        self._locks = locks
        self._renew_every = renew_every
        self._first_wait = first_wait
        self._max_wait = max_wait
        self._held: set[str] = set()

    @property
    def held(self) -> frozenset[str]:
        return frozenset(self._held)

    async def acquire(self, key: str) -> None:
        wait = self._first_wait
        waited = False
        while True:
            try:
                if await self._locks.try_acquire(key):
                    self._held.add(key)
                    if waited:
                        logger.info("conversation %s: now ours after another process", key)
                    return
            except Exception:  # a database hiccup: keep the job, try again
                logger.exception("conversation %s: taking its lock failed; retrying", key)
            if not waited:
                logger.info("conversation %s is running in another process; waiting", key)
                waited = True
            await asyncio.sleep(wait * (0.5 + random.random()))
            wait = min(wait * 2, self._max_wait)

    async def release(self, key: str) -> None:
        self._held.discard(key)
        await self._locks.release(key)

    async def keep(self) -> None:
        """Run for the life of the process: renew the leases of the locks held here."""
        while True:
            await asyncio.sleep(self._renew_every)
            held = set(self._held)
            if not held:
                continue
            try:
                kept = await self._locks.renew(held)
            except Exception:
                logger.exception("renewing conversation locks failed; retrying")
                continue
            for key in held - kept:
                if key in self._held:
                    logger.warning(
                        "conversation %s: its lock lapsed (this process stalled past the "
                        "lease) and may be taken by another process",
                        key,
                    )
