"""Waiting for approval decisions without polling each one.

A decision made by this process (its card callback) resolves the waiting future at
once. A decision recorded by another process sharing the database is noticed by one
watcher that reads the states of all local waits in a single query every
``watch_interval`` seconds, and only while something waits; the database stays the
source of truth either way.
"""

from __future__ import annotations

import asyncio
import logging

from bot.store.approvals import PENDING, ApprovalRecord, ApprovalStore

logger = logging.getLogger(__name__)


class ApprovalWaits:
    def __init__(self, store: ApprovalStore, *, watch_interval: float = 0.5) -> None:
        self._store = store
        self._interval = watch_interval
        self._futures: dict[str, asyncio.Future[ApprovalRecord]] = {}
        self._wake = asyncio.Event()

    def register(self, approval_id: str) -> asyncio.Future[ApprovalRecord]:
        future = asyncio.get_running_loop().create_future()
        self._futures[approval_id] = future
        self._wake.set()
        return future

    def discard(self, approval_id: str) -> None:
        future = self._futures.pop(approval_id, None)
        if future is not None and not future.done():
            future.cancel()

    def resolve(self, record: ApprovalRecord) -> None:
        """A decision is recorded: wake the call waiting for it, if it waits here."""
        future = self._futures.get(record.id)
        if future is not None and not future.done() and record.state != PENDING:
            future.set_result(record)

    def __len__(self) -> int:
        return len(self._futures)

    async def watch(self) -> None:
        """Run for the life of the process: notice decisions made elsewhere."""
        while True:
            if not self._futures:
                self._wake.clear()
                await self._wake.wait()
            await asyncio.sleep(self._interval)
            try:
                await self._check()
            except Exception:
                logger.exception("checking approval states failed; retrying")

    async def _check(self) -> None:
        waiting = [i for i, f in self._futures.items() if not f.done()]
        if not waiting:
            return
        states = await self._store.states(waiting)
        for approval_id, state in states.items():
            if state != PENDING:
                record = await self._store.get(approval_id)
                if record is not None:
                    self.resolve(record)
