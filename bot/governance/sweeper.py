"""Closing approvals nobody waits for any more, and rewriting their cards.

After a crash or a restart, an approval's run is gone: its card must not stay
clickable. Run once at start-up and then every ``interval`` seconds (a crashed
process's claims are only given up when their lease runs out).
"""

from __future__ import annotations

import asyncio
import logging

from bot.store.approvals import ApprovalStore
from bot.store.checkpoints import CheckpointStore

from .cards import ApprovalCards

logger = logging.getLogger(__name__)


class ApprovalSweeper:
    def __init__(
        self,
        store: ApprovalStore,
        cards: ApprovalCards,
        *,
        interval: float,
        checkpoints: CheckpointStore | None = None,
    ) -> None:
        self._store = store
        self._cards = cards
        self._interval = interval
        self._checkpoints = checkpoints

    async def sweep(self) -> int:
        closed = await self._store.close_orphans()
        for record in closed:
            logger.info("approval %s closed as %s: %s", record.id, record.state, record.note)
            await self._cards.refresh(record)
        if self._checkpoints is not None:
            # A saved run whose message failed (or finished elsewhere) is resumed by nobody.
            purged = await self._checkpoints.purge_orphans()
            if purged:
                logger.info("deleted %d saved runs nobody will resume", purged)
        return len(closed)

    async def close_run(self, run_id: str, note: str) -> None:
        """End what a run that will not go on waited for (its pending approvals), their
        cards saying ``note``."""
        for record in await self._store.cancel_run(run_id, note):
            await self._cards.refresh(record)

    async def run(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:
                logger.exception("closing orphaned approvals failed; retrying")
            await asyncio.sleep(self._interval)
