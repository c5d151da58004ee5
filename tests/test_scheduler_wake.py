"""The scheduler's loop never sleeps through a wake-up (a task created in this process)."""

from __future__ import annotations

import asyncio
from typing import Any

from bot.runtime.schedules.scheduler import POLL_SECONDS, ScheduledRuns, SchedulerConfig
from bot.store import Database, upgrade_async
from bot.store.schedules import ScheduleStore


class ReadingSlowly(ScheduleStore):
    """The real store, whose next due time is read while the test says so."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.claims = 0
        self.reading = asyncio.Event()
        self.go_on = asyncio.Event()

    async def claim_due(self, **options: Any) -> Any:
        self.claims += 1
        return await super().claim_due(**options)

    async def next_due_at(self) -> float | None:
        self.reading.set()
        await self.go_on.wait()
        return await super().next_due_at()


async def test_a_wake_up_while_the_next_due_time_is_read_is_not_lost(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path / 'larkgate.db'}"
    await upgrade_async(url)
    async with Database(url) as db:
        store = ReadingSlowly(db)
        config = SchedulerConfig(owner="host:1", lease_seconds=60, grace_seconds=60)
        runs = ScheduledRuns(
            store,
            config,
            feishu=None,  # type: ignore[arg-type]  # nothing is due: nothing is fired
            workers=None,  # type: ignore[arg-type]
            turns=None,  # type: ignore[arg-type]
            admission=None,  # type: ignore[arg-type]
        )
        loop = asyncio.create_task(runs.run())
        try:
            await asyncio.wait_for(store.reading.wait(), 5)
            assert store.claims == 1
            runs.wake()  # a task was created here while the loop read the next due time
            store.reading.clear()
            store.go_on.set()
            # It looks again at once, not after POLL_SECONDS.
            await asyncio.wait_for(store.reading.wait(), POLL_SECONDS / 10)
            assert store.claims == 2
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
