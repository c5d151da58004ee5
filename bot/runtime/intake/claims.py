"""The ACK path and the claims behind it.

Within the webhook request: pick the message id out of the verified event, drop
stale messages, claim the id in the ledger (the persistent dedup), schedule the work
and return, all in milliseconds. Feishu gets its 200 only once the claim is stored,
so an event is never acknowledged and then lost.

Behind it, for crash safety: a keeper renews the leases of the messages this process
is working on, and a sweeper takes over messages whose lease ran out (their process
died) without waiting for Feishu to deliver them again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from bot.feishu.untrusted_json import JSON_OBJECT
from bot.feishu.webhook import VerifiedEvent
from bot.runtime.tasks import TaskTracker
from bot.store import Claim, MessageLedger
from bot.store.ledger import FINAL_STATES

logger = logging.getLogger(__name__)

MESSAGE_EVENT = "im.message.receive_v1"
CLAIMED = ("claimed", "taken_over")
# Message ids this process claimed, remembered so that Feishu's redeliveries of them (a
# third of deliveries at times) are dropped without a database round trip.
RECENT_CLAIMS = 10_000

ProcessClaim = Callable[[Claim], Awaitable[None]]


class InFlight:
    """Message ids this process is working on, whose leases it must keep renewing."""

    def __init__(self) -> None:
        self._ids: set[str] = set()

    def add(self, message_id: str) -> None:
        self._ids.add(message_id)

    def done(self, message_id: str) -> None:
        self._ids.discard(message_id)

    def snapshot(self) -> list[str]:
        return list(self._ids)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)


class RecentClaims:
    """The last ``size`` message ids this process claimed, oldest forgotten first.

    A redelivery of one of them is a duplicate by the ledger's own rules: the claim is
    stored and ours, and if our work on it failed, the sweeper retries it once the lease
    lapses, as it would after a redelivery.
    """

    def __init__(self, size: int = RECENT_CLAIMS) -> None:
        self._size = size
        self._ids: dict[str, None] = {}  # insertion-ordered

    def add(self, message_id: str) -> None:
        self._ids[message_id] = None
        if len(self._ids) > self._size:
            del self._ids[next(iter(self._ids))]

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._ids


class EventIntake:
    def __init__(
        self,
        ledger: MessageLedger,
        process: ProcessClaim,
        tasks: TaskTracker,
        in_flight: InFlight,
        *,
        owner: str,
        lease_seconds: float,
        max_age_seconds: float,
        clock: Callable[[], float] = time.time,
        on_duplicate: Callable[[], None] | None = None,
    ) -> None:
        self._on_duplicate = on_duplicate  # told of each delivery the claim dropped
        self._ledger = ledger
        self._process = process
        self._tasks = tasks
        self._owner = owner
        self._lease = lease_seconds
        self._max_age = max_age_seconds
        self._clock = clock
        self._in_flight = in_flight
        self._recent = RecentClaims()
        # Claims on their way to the database, by message id: a redelivery of one waits
        # for its outcome instead of a transaction of its own. True: the claim is stored.
        self._claiming: dict[str, asyncio.Future[bool]] = {}

    async def __call__(self, event: VerifiedEvent) -> None:
        """The webhook's handler: quick, and it raises only if the claim could not be stored."""
        if event.event_type != MESSAGE_EVENT:
            logger.debug("ignoring %s event %s", event.event_type, event.event_id)
            return
        message_id, created_ms = _message_id_and_time(event.envelope)
        if not message_id:
            logger.warning("message event %s has no message_id; ignored", event.event_id)
            return
        age = self._clock() - created_ms / 1000 if created_ms else 0.0
        if age > self._max_age:
            logger.info("dropping stale message %s (%.0f s old)", message_id, age)
            return
        while True:
            if message_id in self._recent:
                self._duplicate(message_id, "claimed here")
                return
            racing = self._claiming.get(message_id)
            if racing is None:
                break
            if await asyncio.shield(racing):
                # A redelivery that raced the first delivery (Feishu retries within
                # milliseconds at times): that claim is stored, and decided this one too.
                self._duplicate(message_id, "its claim was being stored here")
                return
            # That claim failed: this delivery claims for itself, unless another one
            # already does (or did).
        stored = asyncio.get_running_loop().create_future()
        self._claiming[message_id] = stored
        claim: Claim | None = None
        try:
            claim = await self._ledger.claim(
                message_id,
                owner=self._owner,
                payload=dict(event.envelope),
                payload_json=event.raw.decode() if event.raw else None,
                lease_seconds=self._lease,
            )
        finally:  # stored or not, the racing deliveries learn which
            del self._claiming[message_id]
            stored.set_result(claim is not None)
        if claim.outcome not in CLAIMED:
            self._duplicate(message_id, claim.outcome)
            return
        self.start(claim)

    def _duplicate(self, message_id: str, why: str) -> None:
        logger.debug("duplicate delivery of %s (%s)", message_id, why)
        if self._on_duplicate is not None:
            self._on_duplicate()

    def start(self, claim: Claim) -> None:
        """Work on a claim this process holds; its lease is kept until the work is done."""
        self._recent.add(claim.message_id)
        self._in_flight.add(claim.message_id)
        self._tasks.spawn(self._run(claim), name=f"message:{claim.message_id}")

    async def _run(self, claim: Claim) -> None:
        try:
            await self._process(claim)
        except Exception:
            # Stop renewing: the lease runs out and the sweeper retries it, up to the
            # ledger's attempt limit, so one bad message cannot crash-loop the bot.
            logger.exception("processing message %s failed", claim.message_id)
            self._in_flight.done(claim.message_id)

    # -- crash safety ------------------------------------------------------------------

    async def keep_leases(self) -> None:
        """Renew the leases of in-flight messages, well before they run out."""
        interval = self._lease / 3
        while True:
            await asyncio.sleep(interval)
            await self.renew_leases()

    async def renew_leases(self) -> None:
        """One round of ``keep_leases``: every in-flight lease in one statement."""
        ids = self._in_flight.snapshot()
        if not ids:
            return
        try:
            kept = await self._ledger.renew_many(ids, owner=self._owner, lease_seconds=self._lease)
        except Exception:  # the next round tries again; the lease has slack
            logger.exception("renewing the leases of %d messages failed", len(ids))
            return
        for message_id in ids:
            if message_id not in kept and message_id in self._in_flight:
                await self._not_renewed(message_id)

    async def _not_renewed(self, message_id: str) -> None:
        """Say why a lease still in flight was not renewed. Mostly its turn finished in
        this instant (the finish committed, the turn not told yet): harmless. Else another
        process took it over, after this one let the lease lapse."""
        try:
            entry = await self._ledger.get(message_id)
        except Exception:
            logger.exception("reading the claim on %s failed", message_id)
            return
        if entry is None or entry.state in FINAL_STATES or entry.owner == self._owner:
            logger.debug("the claim on %s ended while its lease was renewed", message_id)
        else:
            logger.warning("lost the claim on %s to %s", message_id, entry.owner)

    async def sweep_expired(self, *, once: bool = False) -> None:
        """Take over messages whose owner stopped renewing (it crashed)."""
        interval = max(1.0, self._lease / 2)
        while True:
            try:
                claims = await self._ledger.take_over_expired(
                    owner=self._owner, lease_seconds=self._lease
                )
            except Exception:
                logger.exception("sweeping expired claims failed")
                claims = []
            for claim in claims:
                logger.warning(
                    "taking over message %s (attempt %d) from a process that stopped",
                    claim.message_id,
                    claim.attempts,
                )
                self.start(claim)
            if once:
                return
            await asyncio.sleep(interval)

    async def purge(self, retention_hours: int) -> None:
        while True:
            try:
                removed = await self._ledger.purge(older_than_seconds=retention_hours * 3600)
                if removed:
                    logger.info("purged %d old message claims", removed)
            except Exception:
                logger.exception("purging old claims failed")
            await asyncio.sleep(3600)


def _message_id_and_time(envelope: Mapping[str, Any]) -> tuple[str, int]:
    event = envelope.get("event")
    message = event.get("message") if isinstance(event, JSON_OBJECT) else None
    if not isinstance(message, JSON_OBJECT):
        return "", 0
    message_id = message.get("message_id")
    created = message.get("create_time")
    try:
        created_ms = int(created) if created not in (None, "") else 0
    except (TypeError, ValueError):
        created_ms = 0
    return (message_id if isinstance(message_id, str) else ""), created_ms
