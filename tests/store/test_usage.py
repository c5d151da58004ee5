"""Usage counters: daily tokens per subject, messages per rate window, across processes."""

from __future__ import annotations

import asyncio

from bot.store import UsageStore

DAY = "2026-01-02"
USER, GROUP = "user:ou_x", "group:oc_y"


async def test_add_and_read_daily_tokens(db, clock):
    usage = UsageStore(db, clock=clock)
    assert await usage.usage(DAY, [USER, GROUP]) == {USER: 0, GROUP: 0}
    assert await usage.usage(DAY, []) == {}

    await usage.add(DAY, [USER, GROUP], tokens=1200, messages=1)
    await usage.add(DAY, [USER], tokens=300)
    await usage.add(DAY, [USER, USER], tokens=5)  # named twice, counted once
    await usage.add(DAY, [], tokens=999)
    await usage.add("2026-01-03", [USER], tokens=7)

    assert await usage.usage(DAY, [USER, GROUP, "user:ou_z"]) == {
        USER: 1505,
        GROUP: 1200,
        "user:ou_z": 0,
    }
    assert await usage.usage("2026-01-03", [GROUP, USER]) == {GROUP: 0, USER: 7}


async def test_concurrent_adds_from_two_processes_lose_nothing(db, other_db, clock):
    stores = [UsageStore(db, clock=clock), UsageStore(other_db, clock=clock)]
    await asyncio.gather(
        *(
            store.add(DAY, subjects, tokens=10, messages=1)
            for store in stores
            for subjects in ([USER, GROUP], [GROUP, USER]) * 5
        )
    )
    assert await stores[0].usage(DAY, [USER, GROUP]) == {USER: 200, GROUP: 200}


async def test_hit_counts_messages_per_subject_and_window(db, clock):
    usage = UsageStore(db, clock=clock)
    assert [await usage.hit(USER, 60) for _ in range(3)] == [1, 2, 3]
    assert await usage.hit(USER, 120) == 1
    assert await usage.hit(GROUP, 60) == 1
    assert await usage.hit(USER, 60) == 4


async def test_concurrent_hits_get_distinct_counts(db, other_db, clock):
    stores = [UsageStore(db, clock=clock), UsageStore(other_db, clock=clock)]
    counts = await asyncio.gather(*(store.hit(USER, 600) for store in stores * 10))
    assert sorted(counts) == list(range(1, 21))


async def test_purge_drops_old_days_and_windows(db, clock):
    usage = UsageStore(db, clock=clock)
    for day in ("2026-01-01", "2026-01-02", "2026-01-03"):
        await usage.add(day, [USER, GROUP], tokens=1)
    for window in (0, 60, 120):
        await usage.hit(USER, window)

    assert await usage.purge(before_day="2026-01-02", before_window=120) == 2 + 2
    assert await usage.usage("2026-01-01", [USER]) == {USER: 0}
    assert await usage.usage("2026-01-02", [USER, GROUP]) == {USER: 1, GROUP: 1}
    assert await usage.hit(USER, 60) == 1  # counted afresh
    assert await usage.hit(USER, 120) == 2
    assert await usage.purge(before_day="2026-01-02", before_window=0) == 0
