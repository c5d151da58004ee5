"""Waiting for a person's consent without polling each request.

A consent completed by this process (its callback, or its own device-code poll) resolves
the waiting future at once. One completed on another replica (the callback may land on any
of them) is noticed by one watcher that reads the states of every local wait in a single
query every ``watch_interval`` seconds, only while something waits; the database stays the
source of truth either way (the approvals' pattern, ``bot.governance.waits``).
"""

from __future__ import annotations

import asyncio
import logging

from bot.store.user_authorizations import PENDING, AuthorizationRecord, UserAuthorizationStore

logger = logging.getLogger(__name__)


class AuthorizationWaits:
    def __init__(self, store: UserAuthorizationStore, *, watch_interval: float = 0.5) -> None:
        self._store = store
        self._interval = watch_interval
        self._futures: dict[str, asyncio.Future[AuthorizationRecord]] = {}
        self._wake = asyncio.Event()

    def register(self, request_id: str) -> asyncio.Future[AuthorizationRecord]:
        future = asyncio.get_running_loop().create_future()
        self._futures[request_id] = future
        self._wake.set()
        return future

    def discard(self, request_id: str) -> None:
        future = self._futures.pop(request_id, None)
        if future is not None and not future.done():
            future.cancel()

    def resolve(self, record: AuthorizationRecord) -> None:
        """A request ended: wake whoever waits for it here."""
        future = self._futures.get(record.id)
        if future is not None and not future.done() and record.state != PENDING:
            future.set_result(record)

    def __len__(self) -> int:
        return len(self._futures)

    async def watch(self) -> None:
        """Run for the life of the process: notice consents completed elsewhere."""
        while True:
            if not self._futures:
                self._wake.clear()
                await self._wake.wait()
            await asyncio.sleep(self._interval)
            try:
                await self.check()
            except Exception:
                logger.exception("checking authorisation requests failed; retrying")

    async def check(self) -> None:
        waiting = [i for i, f in self._futures.items() if not f.done()]
        for request_id, state in (await self._store.states(waiting)).items():
            if state != PENDING:
                record = await self._store.get(request_id)
                if record is not None:
                    self.resolve(record)
