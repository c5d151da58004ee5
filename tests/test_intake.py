"""The ACK path's claims: a redelivery of a message claimed here costs no transaction,
and every message is still claimed once, across processes."""

from __future__ import annotations

import asyncio
import json
import logging
import time

from bot.feishu.webhook import VerifiedEvent, WebhookVerifier
from bot.runtime.intake.claims import EventIntake, InFlight, RecentClaims
from bot.runtime.tasks import TaskTracker
from bot.store import Database, MessageLedger, upgrade_async

from fakes.feishu_push import encrypt, sign


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


async def test_the_ledger_keeps_the_push_as_it_came_and_reads_it_back_the_same(tmp_path):
    """The claim stores the decrypted plaintext itself (escapes, spacing and all) instead
    of encoding the envelope again; what a take-over parses back is the same envelope."""
    url = f"sqlite+aiosqlite:///{tmp_path}/ledger.db"
    await upgrade_async(url)
    envelope = _event("om_raw").envelope
    envelope["header"]["token"] = "vt"
    envelope["event"]["message"]["content"] = json.dumps({"text": '你好 "quoted" \\ \u2028'})
    plaintext = json.dumps(envelope, indent=1).encode()  # \u escapes, newlines, spaces
    verifier = WebhookVerifier(
        verification_token="vt", encrypt_key="ek", max_age_seconds=900.0, clock=time.time
    )
    body = json.dumps({"encrypt": encrypt(plaintext.decode(), "ek")}).encode()
    timestamp, nonce = str(int(time.time())), "n"
    headers = {
        "X-Lark-Request-Timestamp": timestamp,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": sign(timestamp, nonce, "ek", body),
    }
    event = verifier.open(body, headers)
    assert isinstance(event, VerifiedEvent) and event.raw == plaintext
    async with Database(url) as db:
        ledger = MessageLedger(db)
        claims = []

        async def process(claim) -> None:
            claims.append(claim)

        tracker = TaskTracker()
        intake = EventIntake(
            ledger,
            process,
            tracker,
            InFlight(),
            owner="p0",
            lease_seconds=30.0,
            max_age_seconds=900.0,
        )
        await intake(event)
        await tracker.drain(5.0)
        assert claims[0].payload == envelope
        stored = await db.transact(
            lambda c: c.exec_driver_sql("SELECT payload FROM message_claims").scalar_one()
        )
        assert stored == plaintext.decode()
        entry = await ledger.get("om_raw")
        assert entry is not None and entry.payload == envelope


async def test_a_lease_that_ended_is_not_reported_lost_and_one_taken_over_is(tmp_path, caplog):
    url = f"sqlite+aiosqlite:///{tmp_path}/ledger.db"
    await upgrade_async(url)
    dbs = [await Database.connect(url), await Database.connect(url)]
    try:
        ledgers = [MessageLedger(db) for db in dbs]
        in_flight = InFlight()

        async def process(claim) -> None:  # the turn: still "in flight" until told
            return None

        tracker = TaskTracker()
        here = EventIntake(
            ledgers[0],
            process,
            tracker,
            in_flight,
            owner="p0",
            lease_seconds=0.2,
            max_age_seconds=900.0,
        )
        for message_id in ("om_done", "om_kept", "om_taken"):
            await here(_event(message_id))
        assert await tracker.drain(5.0) == 0
        # om_done: its turn's finish committed, the turn not told yet (the race that
        # used to be reported as a claim lost to another process).
        assert await ledgers[0].complete("om_done", owner="p0")
        # om_taken: the lease lapsed (this process stalled) and p1 took the message over.
        await asyncio.sleep(0.3)
        taken = await ledgers[1].take_over_expired(owner="p1", lease_seconds=60.0)
        assert {c.message_id for c in taken} == {"om_kept", "om_taken"}
        assert await ledgers[1].complete("om_kept", owner="p1") is True
        assert await ledgers[1].renew("om_taken", owner="p1", lease_seconds=60.0)
        with caplog.at_level(logging.DEBUG, logger="bot.runtime.intake.claims"):
            await here.renew_leases()
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert warnings == ["lost the claim on om_taken to p1"]
        assert (await ledgers[1].get("om_taken")).owner == "p1"  # a renewal took nothing
    finally:
        for db in dbs:
            await db.dispose()


class GatedLedger(CountingLedger):
    """Claims wait for ``gate``; the first may be told to fail."""

    def __init__(self, db) -> None:
        super().__init__(db)
        self.gate = asyncio.Event()
        self.fail_first = False

    async def claim(self, *args, **kwargs):
        self.claims += 1
        await self.gate.wait()
        if self.fail_first and self.claims == 1:
            raise ConnectionError("the database went away")
        return await MessageLedger.claim(self, *args, **kwargs)


async def _gated_intake(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path}/ledger.db"
    await upgrade_async(url)
    db = await Database.connect(url)
    ledger = GatedLedger(db)
    processed: list[str] = []

    async def process(claim) -> None:
        processed.append(claim.message_id)

    tracker = TaskTracker()
    intake = EventIntake(
        ledger, process, tracker, InFlight(), owner="p0", lease_seconds=30.0, max_age_seconds=900.0
    )
    return db, ledger, intake, tracker, processed


async def test_a_redelivery_racing_the_first_waits_for_its_claim_instead_of_claiming(tmp_path):
    db, ledger, intake, tracker, processed = await _gated_intake(tmp_path)
    try:
        first = asyncio.create_task(intake(_event("om_1")))
        racing = [asyncio.create_task(intake(_event("om_1"))) for _ in range(3)]
        await asyncio.sleep(0.05)
        # Nobody is answered before the claim is stored: a 200 now could lose the message.
        assert not first.done() and not any(task.done() for task in racing)
        ledger.gate.set()
        await asyncio.gather(first, *racing)
        assert ledger.claims == 1
        assert await tracker.drain(5.0) == 0
        assert processed == ["om_1"]
    finally:
        await db.dispose()


async def test_when_the_raced_claim_fails_a_redelivery_claims_for_itself(tmp_path):
    db, ledger, intake, tracker, processed = await _gated_intake(tmp_path)
    ledger.fail_first = True
    try:
        first = asyncio.create_task(intake(_event("om_1")))
        racing = [asyncio.create_task(intake(_event("om_1"))) for _ in range(2)]
        await asyncio.sleep(0.05)
        ledger.gate.set()
        results = await asyncio.gather(first, *racing, return_exceptions=True)
        assert isinstance(results[0], ConnectionError)  # its sender gets a 500
        assert results[1:] == [None, None]
        assert ledger.claims == 2  # one of the two claimed; the other waited for it
        assert await tracker.drain(5.0) == 0
        assert processed == ["om_1"]
    finally:
        await db.dispose()
