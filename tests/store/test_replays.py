"""The replay guard: the first sighting of a key wins, across processes, until its window ends."""

from __future__ import annotations

import asyncio

from bot.store import ReplayGuard


async def test_a_key_is_new_once_within_its_window(db, clock):
    guard = ReplayGuard(db, clock=clock)
    assert await guard.first_sighting("card:ev_1", remember_seconds=60)
    assert not await guard.first_sighting("card:ev_1", remember_seconds=60)
    assert await guard.first_sighting("card:ev_2", remember_seconds=60)
    clock.advance(30)
    assert not await guard.first_sighting("card:ev_1", remember_seconds=60)
    # Past the window, the signed timestamp check refuses the request anyway; the key is free.
    clock.advance(31)
    assert await guard.first_sighting("card:ev_1", remember_seconds=60)


async def test_replicas_racing_on_one_key_have_one_winner(db, other_db, clock):
    guards = [ReplayGuard(db, clock=clock), ReplayGuard(other_db, clock=clock)]
    results = await asyncio.gather(
        *(guard.first_sighting("card:ev_race", remember_seconds=60) for guard in guards * 4)
    )
    assert sum(results) == 1


async def test_purge_forgets_only_what_has_passed(db, clock):
    guard = ReplayGuard(db, clock=clock)
    await guard.first_sighting("old", remember_seconds=10)
    await guard.first_sighting("new", remember_seconds=100)
    clock.advance(50)
    assert await guard.purge() == 1
    assert not await guard.first_sighting("new", remember_seconds=100)
