"""The ACK path's claims: a redelivery of a message claimed here costs no transaction,
and every message is still claimed once, across processes."""

from __future__ import annotations

import time

from bot.feishu.webhook import VerifiedEvent
from bot.runtime.intake import EventIntake, InFlight, RecentClaims
from bot.runtime.tasks import TaskTracker
from bot.store import Database, MessageLedger, upgrade_async


class CountingLedger(MessageLedger):
    claims = 0

    async def claim(self, *args, **kwargs):
        self.claims += 1
        return await super().claim(*args, **kwargs)


def _event(message_id: str) -> VerifiedEvent:
    envelope = {
        "schema": "2.0",
        "header": {"event_type": "im.message.receive_v1", "event_id": f"ev_{message_id}"},
        "event": {
            "message": {"message_id": message_id, "create_time": str(int(time.time() * 1000))}
        },
    }
    return VerifiedEvent(envelope, "im.message.receive_v1", f"ev_{message_id}")


async def test_redeliveries_here_skip_the_database_and_elsewhere_are_still_duplicates(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path}/ledger.db"
    await upgrade_async(url)
    dbs = [await Database.connect(url), await Database.connect(url)]
    processed: list[tuple[str, str]] = []
    try:
        intakes, ledgers, trackers = [], [], []
        for n, db in enumerate(dbs):
            ledger = CountingLedger(db)

            async def process(claim, owner=f"p{n}") -> None:
                processed.append((owner, claim.message_id))

            ledgers.append(ledger)
            trackers.append(TaskTracker())
            intakes.append(
                EventIntake(
                    ledger,
                    process,
                    trackers[-1],
                    InFlight(),
                    owner=f"p{n}",
                    lease_seconds=30.0,
                    max_age_seconds=900.0,
                )
            )
        here, there = intakes
        await here(_event("om_1"))
        for _ in range(3):  # Feishu's redeliveries to the same process
            await here(_event("om_1"))
        assert ledgers[0].claims == 1
        await there(_event("om_1"))  # and to another: the ledger says it is taken
        assert ledgers[1].claims == 1
        # Whatever was taken in is processing in a tracked task: wait for all of them.
        for tracker in trackers:
            assert await tracker.drain(5.0) == 0  # none had to be cancelled
        assert processed == [("p0", "om_1")]
    finally:
        for db in dbs:
            await db.dispose()


def test_recent_claims_forget_the_oldest_first():
    recent = RecentClaims(size=3)
    for n in range(5):
        recent.add(f"om_{n}")
    assert [f"om_{n}" in recent for n in range(5)] == [False, False, True, True, True]
