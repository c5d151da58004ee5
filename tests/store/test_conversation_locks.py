"""Conversation locks: one process at a time per conversation, lapsing with the lease."""

from __future__ import annotations

import asyncio

from bot.runtime.conversation_lock import SharedConversationLock
from bot.store.conversation_locks import ConversationLocks
from bot.store.conversations import ConversationPrefetch, ConversationStore

KEY = "p2p:oc_a"


def locks(db, clock, owner: str) -> ConversationLocks:
    return ConversationLocks(db, owner=owner, lease_seconds=30.0, clock=clock)


async def test_one_holder_at_a_time(db, other_db, clock):
    a, b = locks(db, clock, "a"), locks(other_db, clock, "b")
    assert await a.try_acquire(KEY)
    assert await a.try_acquire(KEY)  # re-entrant for its holder
    assert not await b.try_acquire(KEY)
    assert await b.try_acquire("p2p:oc_other")  # other conversations are independent
    await b.release([KEY])  # not b's to release: nothing happens
    assert not await b.try_acquire(KEY)
    await a.release([KEY])
    assert await b.try_acquire(KEY)
    assert not await a.try_acquire(KEY)


async def test_a_lapsed_lease_is_taken_over_and_renewal_keeps_it(db, other_db, clock):
    a, b = locks(db, clock, "a"), locks(other_db, clock, "b")
    assert await a.try_acquire(KEY)
    clock.advance(20)
    assert await a.renew([KEY, "p2p:never_taken"]) == {KEY}
    clock.advance(20)  # 40 s after taking it, 20 s after renewing: still a's
    assert not await b.try_acquire(KEY)
    clock.advance(11)  # the holder stopped renewing (it crashed)
    assert await b.try_acquire(KEY)
    assert await a.renew([KEY]) == set()  # a learns it lost the lock
    assert await a.renew([]) == set()


async def test_racing_processes_have_one_winner(db, other_db, clock):
    contenders = [locks(db, clock, "a"), locks(other_db, clock, "b")] * 3
    won = await asyncio.gather(*(c.try_acquire(KEY) for c in contenders))
    owners = {c._owner for c, ok in zip(contenders, won, strict=True) if ok}
    assert len(owners) == 1


class CountingLocks(ConversationLocks):
    """The store, counting the release transactions it runs."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.releases: list[set[str]] = []
        self.writing = asyncio.Event()  # a release transaction has started

    async def release(self, keys) -> None:
        self.releases.append(set(keys))
        self.writing.set()
        await super().release(keys)


def shared(
    db, clock, owner: str, delay: float = 0.05
) -> tuple[SharedConversationLock, CountingLocks]:
    store = CountingLocks(db, owner=owner, lease_seconds=30.0, clock=clock)
    return SharedConversationLock(store, renew_every=10.0, release_delay=delay), store


async def test_releases_are_written_together_within_the_delay(db, other_db, clock):
    a, a_store = shared(db, clock, "a")
    b, _ = shared(other_db, clock, "b")
    keys = [f"p2p:oc_{n}" for n in range(5)]
    for key in keys:
        await a.acquire(key)
    for key in keys:
        await a.release(key)
    async with asyncio.timeout(2):  # b polls until each is free: within the delay
        for key in keys:
            await b.acquire(key)
    assert a_store.releases == [set(keys)]  # one transaction for the five


async def test_a_conversation_taken_again_before_its_release_was_written_stays_ours(
    db, other_db, clock
):
    a, a_store = shared(db, clock, "a")
    other = locks(other_db, clock, "b")
    await a.acquire(KEY)
    await a.release(KEY)
    await a.acquire(KEY)  # the next message, a moment later: no round trip, still ours
    await asyncio.sleep(0.15)  # past the delay: nothing was released
    assert not await other.try_acquire(KEY)
    assert a_store.releases == []
    await a.release(KEY)
    await a.flush()  # at shutdown: written at once
    assert await other.try_acquire(KEY)


async def test_a_conversation_in_a_release_being_written_is_taken_after_it(db, clock):
    a, a_store = shared(db, clock, "a", delay=0.0)
    await a.acquire(KEY)
    await a.release(KEY)
    await a_store.writing.wait()
    await a.acquire(KEY)  # waits for it, then takes the row again
    assert a_store.releases == [{KEY}]
    assert KEY in a.held
    other = locks(db, clock, "b")
    assert not await other.try_acquire(KEY)


class CountingDatabase:
    """Counts the transactions run through it (a thin wrapper around the real one)."""

    def __init__(self, db) -> None:
        self._db = db
        self.transactions = 0

    async def transact(self, fn, *args, **options):
        self.transactions += 1
        return await self._db.transact(fn, *args, **options)

    def insert(self, table):
        return self._db.insert(table)


async def test_the_first_load_rides_with_the_lock_and_is_what_a_load_would_read(
    db, other_db, clock
):
    writer = ConversationStore(other_db, clock=clock)  # another process wrote history
    conversation = await writer.active(KEY)
    await writer.append(conversation.id, "user", "hello", message_id="om_1")
    counted = CountingDatabase(db)
    prefetch = ConversationPrefetch(history_limit=20)
    store = ConversationStore(counted, clock=clock, prefetch=prefetch)
    lock = SharedConversationLock(
        ConversationLocks(counted, owner="a", lease_seconds=30.0, clock=clock),
        renew_every=10.0,
        prefetch=prefetch,
    )
    await lock.acquire(KEY)
    loaded = await store.load(KEY, history_limit=20)
    assert counted.transactions == 1  # the lock and the load, together
    assert loaded == await ConversationStore(db).load(KEY, history_limit=20)
    assert [h.content for h in loaded.history] == ["hello"]
    await store.load(KEY, history_limit=20)  # a later turn reads afresh
    assert counted.transactions == 2


async def test_a_read_ahead_is_forgotten_at_a_reset_and_at_the_release(db, clock):
    prefetch = ConversationPrefetch(history_limit=20)
    store = ConversationStore(db, clock=clock, prefetch=prefetch)
    lock = SharedConversationLock(
        ConversationLocks(db, owner="a", lease_seconds=30.0, clock=clock),
        renew_every=10.0,
        prefetch=prefetch,
    )
    await lock.acquire(KEY)
    await store.reset(KEY)
    assert (await store.load(KEY, history_limit=20)).generation == 2
    await lock.release(KEY)
    await lock.flush()
    await lock.acquire(KEY)
    await lock.release(KEY)
    assert prefetch.take(KEY, 20) is None
