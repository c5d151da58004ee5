"""The conversation lock across server processes, over the database's lock rows.

Waiting is a short poll with backoff: it only happens when two processes hold messages
of the same conversation at the same moment, which is rare (a user writes again while
another replica still finishes the previous turn). Held locks are renewed by one loop.

Releases are gathered for ``release_delay`` seconds and freed in one transaction: a busy
process frees dozens of conversations a second, and another process waits for a released
conversation at most that much longer. A conversation taken again here before its release
was written is simply kept: the row is still ours and its lease still runs.
"""

from __future__ import annotations

import asyncio
import logging
import random

from bot.store.conversation_locks import ConversationLocks
from bot.store.conversations import ConversationPrefetch

logger = logging.getLogger(__name__)


class SharedConversationLock:
    def __init__(
        self,
        locks: ConversationLocks,
        *,
        renew_every: float,
        first_wait: float = 0.05,
        max_wait: float = 0.5,
        release_delay: float = 0.05,
        prefetch: ConversationPrefetch | None = None,
    ) -> None:
        self._locks = locks
        self._prefetch = prefetch  # the conversation, read with its lock
        self._renew_every = renew_every
        self._first_wait = first_wait
        self._max_wait = max_wait
        self._release_delay = release_delay
        self._held: set[str] = set()
        self._releasing: set[str] = set()  # released here, not yet in the database
        self._writing: set[str] = set()  # in the release transaction under way
        self._flush: asyncio.Task[None] | None = None

    @property
    def held(self) -> frozenset[str]:
        return frozenset(self._held)

    async def acquire(self, key: str) -> None:
        if key in self._releasing:  # released a moment ago, and still ours
            self._releasing.discard(key)
            self._held.add(key)
            return
        while key in self._writing and self._flush is not None:
            await asyncio.shield(self._flush)  # then take it as anyone would
        wait = self._first_wait
        waited = False
        while True:
            try:
                read = self._prefetch.read if self._prefetch is not None else None
                won, loaded = await self._locks.try_acquire_reading(key, read)
                if won:
                    if self._prefetch is not None and loaded is not None:
                        self._prefetch.keep(key, loaded)
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
        """Let ``key`` go; it is freed in the database within ``release_delay``."""
        if key not in self._held:
            return
        self._held.discard(key)
        if self._prefetch is not None:
            self._prefetch.forget(key)  # true only while the lock is held
        self._releasing.add(key)
        if self._flush is None or self._flush.done():
            self._flush = asyncio.create_task(self._write_releases(), name="release-locks")

    async def flush(self) -> None:
        """Write the releases still gathered (at shutdown: other processes need not wait)."""
        while self._flush is not None and not self._flush.done():
            await asyncio.shield(self._flush)
        if self._releasing:
            self._flush = asyncio.create_task(self._write_releases(delay=0.0))
            await self._flush

    async def _write_releases(self, delay: float | None = None) -> None:
        await asyncio.sleep(self._release_delay if delay is None else delay)
        while self._releasing:
            self._writing, self._releasing = self._releasing, set()
            try:
                await self._locks.release(self._writing)
            except Exception:  # their leases lapse on their own
                logger.exception("releasing %d conversation locks failed", len(self._writing))
            finally:
                self._writing = set()

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
