"""Conversation locks: one process at a time per conversation, lapsing with the lease."""

from __future__ import annotations

import asyncio

from bot.store.conversation_locks import ConversationLocks

KEY = "p2p:oc_a"


def locks(db, clock, owner: str) -> ConversationLocks:
    return ConversationLocks(db, owner=owner, lease_seconds=30.0, clock=clock)


async def test_one_holder_at_a_time(db, other_db, clock):
    a, b = locks(db, clock, "a"), locks(other_db, clock, "b")
    assert await a.try_acquire(KEY)
    assert await a.try_acquire(KEY)  # re-entrant for its holder
    assert not await b.try_acquire(KEY)
    assert await b.try_acquire("p2p:oc_other")  # other conversations are independent
    await b.release(KEY)  # not b's to release: nothing happens
    assert not await b.try_acquire(KEY)
    await a.release(KEY)
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
