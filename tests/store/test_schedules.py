"""Scheduled tasks in the store: the cap, the list, cancel, and each due time claimed exactly
once across processes (races, misses, lease take-overs, failures that pause a task)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime

import pytest

from bot.schedules import Schedule, parse_schedule
from bot.store import ScheduledTask, ScheduleStore, TooManyTasks

LEASE = 60.0
GRACE = 600.0
HOUR = 3600.0


def hourly(task: ScheduledTask, after: float) -> float | None:
    """The store's `next_run` for the tests: a cron task fires on the hour, a one-off once."""
    return None if task.kind == "at" else (after // HOUR + 1) * HOUR


def by_schedule(task: ScheduledTask, after: float) -> float | None:
    """The `next_run` the runtime gives: the task's own schedule."""
    return Schedule.stored(task.kind, task.expression, task.timezone).next_timestamp_after(after)


async def new_task(
    store: ScheduleStore,
    *,
    creator: str = "ou_alice",
    kind: str = "cron",
    next_run_at: float,
    cap: int = 20,
    name: str = "digest",
) -> ScheduledTask:
    return await store.create(
        name=name,
        prompt="Post the open tasks of the team",
        creator=creator,
        chat_id="oc_team",
        chat_type="group",
        thread_id="omt_1",
        reply_to="om_question",
        kind=kind,
        expression="0 * * * *" if kind == "cron" else "2026-12-04T09:00:00+08:00",
        timezone="Asia/Shanghai",
        next_run_at=next_run_at,
        created_in_run="run_1",
        max_per_creator=cap,
    )


async def claim(store: ScheduleStore, owner: str, next_run=hourly, **options):
    return await store.claim_due(
        owner=owner, lease_seconds=LEASE, grace_seconds=GRACE, next_run=next_run, **options
    )


# Creating, listing, cancelling.


async def test_create_and_get(db, clock):
    store = ScheduleStore(db, clock=clock)
    task = await new_task(store, next_run_at=clock.now + 60)
    assert len(task.id) == 32
    assert (task.state, task.failures, task.last_run_at, task.last_outcome) == (
        "active",
        0,
        None,
        None,
    )
    assert (task.chat_id, task.thread_id, task.reply_to) == ("oc_team", "omt_1", "om_question")
    assert (task.created_at, task.created_in_run) == (clock.now, "run_1")
    assert await store.get(task.id) == task
    assert await store.get("nope") is None
    with pytest.raises(ValueError, match="kind"):
        await new_task(store, kind="interval", next_run_at=clock.now)


async def test_the_cap_counts_a_creators_active_and_paused_tasks(db, clock):
    store = ScheduleStore(db, clock=clock)
    tasks = [await new_task(store, next_run_at=clock.now + 60, cap=3) for _ in range(3)]
    with pytest.raises(TooManyTasks, match="at most 3 scheduled tasks") as raised:
        await new_task(store, next_run_at=clock.now + 60, cap=3)
    assert (raised.value.creator, raised.value.cap) == ("ou_alice", 3)
    await new_task(store, creator="ou_bob", next_run_at=clock.now + 60, cap=3)  # per person
    await store.cancel(tasks[0].id)  # a cancelled task no longer counts
    await new_task(store, next_run_at=clock.now + 60, cap=3)
    assert len(await store.list(creator="ou_alice")) == 3


async def test_the_cap_holds_when_creations_race(db, other_db, clock):
    stores = [ScheduleStore(db, clock=clock), ScheduleStore(other_db, clock=clock)]

    async def attempt(store: ScheduleStore) -> bool:
        try:
            await new_task(store, next_run_at=clock.now + 60, cap=4)
        except TooManyTasks:
            return False
        return True

    created = await asyncio.gather(*(attempt(store) for store in stores * 5))
    assert created.count(True) == 4
    assert len(await stores[0].list(creator="ou_alice")) == 4


async def test_list_shows_active_paused_and_recently_done_tasks(db, clock):
    store = ScheduleStore(db, clock=clock)
    later = clock.now + 10 * HOUR

    async def created(**options) -> ScheduledTask:
        clock.advance(1)  # listed oldest first
        return await new_task(store, **options)

    mine = await created(next_run_at=later, name="mine")
    theirs = await created(creator="ou_bob", next_run_at=later, name="theirs")
    gone = await created(next_run_at=later, name="gone")
    once = await created(kind="at", next_run_at=clock.now + 60, name="once")
    await store.cancel(gone.id)
    clock.advance(60)
    (firing,), _ = await claim(store, "a")
    assert (firing.task.id, firing.task.state) == (once.id, "done")
    assert [task.name for task in await store.list(creator="ou_alice")] == ["mine", "once"]
    assert [task.name for task in await store.list(creator=None)] == ["mine", "theirs", "once"]
    assert await store.list(creator="ou_nobody") == []
    clock.advance(86_401)  # a day after the one-off ended: no longer listed
    assert [task.id for task in await store.list(creator=None)] == [mine.id, theirs.id]


async def test_cancel_once(db, clock):
    store = ScheduleStore(db, clock=clock)
    task = await new_task(store, next_run_at=clock.now + 60)
    cancelled = await store.cancel(task.id)
    assert cancelled is not None
    assert (cancelled.state, cancelled.next_run_at) == ("cancelled", None)
    assert await store.cancel(task.id) is None
    assert await store.cancel("nope") is None
    clock.advance(60)
    assert await claim(store, "a") == ([], [])  # a cancelled task never fires


# Claiming due times.


async def test_a_due_time_is_claimed_once_when_two_processes_race(db, other_db, clock):
    stores = [ScheduleStore(db, clock=clock), ScheduleStore(other_db, clock=clock)]
    tasks = [await new_task(stores[0], next_run_at=clock.now + 30) for _ in range(5)]
    assert await claim(stores[0], "a") == ([], [])  # not due yet
    clock.advance(30)
    results = await asyncio.gather(
        *(claim(store, owner) for store, owner in zip(stores * 3, "abcdef", strict=True))
    )
    firings = [firing for fired, _ in results for firing in fired]
    assert Counter(firing.task.id for firing in firings) == {task.id: 1 for task in tasks}
    assert {firing.attempt for firing in firings} == {1}
    for firing in firings:
        assert firing.due_at == clock.now
        assert firing.task.next_run_at == hourly(firing.task, clock.now)  # moved on
    assert all(not missed for _, missed in results)
    assert await claim(stores[1], "g") == ([], [])


async def test_claims_take_at_most_limit_tasks_earliest_first(db, clock):
    store = ScheduleStore(db, clock=clock)
    tasks = [await new_task(store, next_run_at=clock.now - 10 * n) for n in range(4)]
    fired, _ = await claim(store, "a", limit=2)
    assert sorted(firing.task.id for firing in fired) == sorted(t.id for t in tasks[2:])
    fired, _ = await claim(store, "a", limit=2)
    assert sorted(firing.task.id for firing in fired) == sorted(t.id for t in tasks[:2])


async def test_due_times_passed_within_the_grace_coalesce_into_one_firing(db, clock):
    store = ScheduleStore(db, clock=clock)
    calls: list[float] = []

    def every_five_minutes(task: ScheduledTask, after: float) -> float:
        calls.append(after)
        return (after // 300 + 1) * 300

    start = (clock.now // 300 + 1) * 300
    task = await new_task(store, next_run_at=start)
    clock.now = start + 540  # due at start, start + 300 and start + 600 has not come
    (firing,), missed = await claim(store, "a", next_run=every_five_minutes)
    assert (firing.due_at, missed) == (start, [])
    assert calls == [clock.now]  # from now: the due time at start + 300 is not run on its own
    assert firing.task.next_run_at == start + 600
    assert (await store.get(task.id)).next_run_at == start + 600


async def test_a_due_time_missed_beyond_the_grace_is_recorded_and_the_next_kept(db, clock):
    store = ScheduleStore(db, clock=clock)
    task = await new_task(store, next_run_at=clock.now)
    clock.advance(GRACE + 1)  # the bot was down
    fired, (missed,) = await claim(store, "a")
    assert fired == []
    assert missed.id == task.id
    assert (missed.state, missed.last_outcome, missed.last_run_at) == ("active", "missed", None)
    assert missed.next_run_at == hourly(task, clock.now)
    assert await store.get(task.id) == missed
    assert await claim(store, "a") == ([], [])
    clock.now = missed.next_run_at  # the next due time fires as usual
    (firing,), _ = await claim(store, "a")
    assert firing.due_at == missed.next_run_at


async def test_a_missed_one_off_is_done(db, clock):
    store = ScheduleStore(db, clock=clock)
    task = await new_task(store, kind="at", next_run_at=clock.now)
    clock.advance(GRACE + 1)
    _, (missed,) = await claim(store, "a")
    assert (missed.id, missed.state, missed.last_outcome, missed.next_run_at) == (
        task.id,
        "done",
        "missed",
        None,
    )


async def test_a_one_off_is_done_once_it_fires(db, clock):
    store = ScheduleStore(db, clock=clock)
    task = await new_task(store, kind="at", next_run_at=clock.now)
    (firing,), _ = await claim(store, "a")
    assert (firing.task.state, firing.task.next_run_at) == ("done", None)
    assert await claim(store, "b") == ([], [])
    finished = await store.finish(firing, owner="a", ok=True)
    assert finished is not None
    assert (finished.id, finished.state, finished.last_outcome) == (task.id, "done", "ok")
    assert finished.last_run_at == clock.now


async def test_a_schedule_that_cannot_be_computed_pauses_its_task_only(db, clock):
    store = ScheduleStore(db, clock=clock)
    broken = await new_task(store, next_run_at=clock.now, name="broken")
    fine = await new_task(store, next_run_at=clock.now, name="fine")

    def next_run(task: ScheduledTask, after: float) -> float | None:
        if task.id == broken.id:
            raise ValueError("unknown time zone 'Mars/Olympus'")
        return hourly(task, after)

    (firing,), (paused,) = await claim(store, "a", next_run=next_run)
    assert firing.task.id == fine.id
    assert (paused.id, paused.state, paused.next_run_at) == (broken.id, "paused", clock.now)
    assert paused.last_outcome == (
        "failed: its schedule cannot be computed: unknown time zone 'Mars/Olympus'"
    )


async def test_a_real_schedule_as_next_run(db, clock):
    store = ScheduleStore(db, clock=clock)
    now = datetime.fromtimestamp(clock.now, UTC)
    schedule = parse_schedule(at=None, cron="0 9 * * 1-5", timezone="Asia/Shanghai", now=now)
    first = schedule.next_timestamp_after(clock.now)
    assert first is not None
    task = await store.create(
        name="standup",
        prompt="Post the open tasks",
        creator="ou_alice",
        chat_id="oc_team",
        chat_type="group",
        thread_id="",
        reply_to="",
        kind=schedule.kind,
        expression=schedule.expression,
        timezone=schedule.timezone,
        next_run_at=first,
        created_in_run="run_1",
        max_per_creator=20,
    )
    clock.now = first
    (firing,), _ = await claim(store, "a", next_run=by_schedule)
    assert firing.due_at == first
    assert firing.task.next_run_at == schedule.next_timestamp_after(first)
    assert (await store.get(task.id)).next_run_at == firing.task.next_run_at


# Leases, take-overs, outcomes.


async def test_a_renewed_lease_is_kept_and_an_expired_one_taken_over(db, other_db, clock):
    a, b = ScheduleStore(db, clock=clock), ScheduleStore(other_db, clock=clock)
    task = await new_task(a, next_run_at=clock.now)
    (firing,), _ = await claim(a, "a")
    clock.advance(LEASE - 1)
    assert await a.renew(firing, owner="a", lease_seconds=LEASE)
    clock.advance(LEASE - 1)
    assert await claim(b, "b") == ([], [])  # renewed: still a's
    assert await b.next_lease_end() == clock.now + 1
    clock.advance(2)  # a stopped renewing: its process died
    (taken,), _ = await claim(b, "b")
    assert (taken.task.id, taken.due_at, taken.attempt) == (task.id, firing.due_at, 2)
    assert not await a.renew(firing, owner="a", lease_seconds=LEASE)
    assert await a.finish(firing, owner="a", ok=True) is None  # no longer a's
    finished = await b.finish(taken, owner="b", ok=True)
    assert finished is not None and finished.last_outcome == "ok"
    assert await b.next_lease_end() is None


async def test_a_take_over_is_won_by_one_process(db, other_db, clock):
    stores = [ScheduleStore(db, clock=clock), ScheduleStore(other_db, clock=clock)]
    for _ in range(4):
        await new_task(stores[0], next_run_at=clock.now)
    fired, _ = await claim(stores[0], "dead")
    assert len(fired) == 4
    clock.advance(LEASE + 1)
    results = await asyncio.gather(
        *(claim(store, owner) for store, owner in zip(stores * 2, "abcd", strict=True))
    )
    taken = [firing for firings, _ in results for firing in firings]
    assert Counter(firing.task.id for firing in taken) == {firing.task.id: 1 for firing in fired}
    assert {firing.attempt for firing in taken} == {2}


async def test_a_run_the_bot_stopped_in_three_times_fails(db, clock):
    store = ScheduleStore(db, clock=clock)
    task = await new_task(store, next_run_at=clock.now)
    (firing,), _ = await claim(store, "p1")
    for attempt, owner in ((2, "p2"), (3, "p3")):
        clock.advance(LEASE + 1)
        (firing,), _ = await claim(store, owner)
        assert firing.attempt == attempt
    clock.advance(LEASE + 1)
    fired, (failed,) = await claim(store, "p4")
    assert fired == []
    assert (failed.id, failed.state, failed.failures) == (task.id, "active", 1)
    assert failed.last_outcome == "failed: the bot stopped while running it"
    assert await store.finish(firing, owner="p3", ok=True) is None
    assert await claim(store, "p5") == ([], [])


async def test_the_expired_run_of_a_cancelled_task_is_not_run_again(db, clock):
    store = ScheduleStore(db, clock=clock)
    task = await new_task(store, next_run_at=clock.now)
    (firing,), _ = await claim(store, "a")
    await store.cancel(task.id)
    clock.advance(LEASE + 1)
    assert await claim(store, "b") == ([], [])
    assert await store.finish(firing, owner="a", ok=True) is None


async def test_three_failures_in_a_row_pause_a_task_until_resumed(db, clock):
    store = ScheduleStore(db, clock=clock)
    task = await new_task(store, next_run_at=clock.now)

    async def run(ok: bool, detail: str = "") -> ScheduledTask:
        clock.now = (await store.get(task.id)).next_run_at
        (firing,), _ = await claim(store, "a")
        finished = await store.finish(firing, owner="a", ok=ok, detail=detail)
        assert finished is not None
        return finished

    first = await run(False, "the database\nwas down")
    assert (first.state, first.failures) == ("active", 1)
    assert first.last_outcome == "failed: the database was down"
    assert (first.last_run_at, (await store.get(task.id)).last_outcome) == (
        clock.now,
        first.last_outcome,
    )
    assert (await run(True)).failures == 0  # a success resets the count
    await run(False)
    assert (await run(False)).state == "active"
    third = await run(False)
    assert (third.state, third.failures, third.last_outcome) == (
        "paused",
        3,
        "failed: no reason given",
    )
    clock.now = third.next_run_at
    assert await claim(store, "a") == ([], [])  # a paused task does not fire
    assert await store.next_due_at() is None
    assert [t.state for t in await store.list(creator="ou_alice")] == ["paused"]
    resumed = await store.resume(task.id, next_run_at=clock.now + 60)
    assert resumed is not None
    assert (resumed.state, resumed.failures, resumed.next_run_at) == ("active", 0, clock.now + 60)
    assert await store.resume(task.id, next_run_at=clock.now) is None  # not paused any more
    assert await store.next_due_at() == clock.now + 60


async def test_pause_after_is_the_callers(db, clock):
    store = ScheduleStore(db, clock=clock)
    await new_task(store, next_run_at=clock.now)
    (firing,), _ = await claim(store, "a")
    finished = await store.finish(firing, owner="a", ok=False, detail="boom", pause_after=1)
    assert finished is not None and finished.state == "paused"


async def test_a_refused_firing_pauses_its_task_at_once_without_counting_a_failure(db, clock):
    store = ScheduleStore(db, clock=clock)
    task = await new_task(store, next_run_at=clock.now)
    (firing,), _ = await claim(store, "a")
    await store.finish(firing, owner="a", ok=False, detail="boom")  # one failure before
    clock.now = (await store.get(task.id)).next_run_at
    (firing,), _ = await claim(store, "a")
    assert await store.finish_refused(firing, owner="b", reason="gone") is None  # not b's
    refused = await store.finish_refused(firing, owner="a", reason="the bot left\nthe group")
    assert refused is not None and refused.paused
    assert (refused.task.state, refused.task.failures) == ("paused", 1)
    assert refused.task.last_outcome == "not run: the bot left the group"
    assert refused.task.last_run_at == clock.now
    clock.now = refused.task.next_run_at
    assert await claim(store, "a") == ([], [])  # paused: nothing fires
    assert await store.finish(firing, owner="a", ok=True) is None  # the firing is over


async def test_of_two_refused_firings_at_once_one_pauses_the_task(db, clock):
    """A firing taken over from a process that died, and the next due time, both refused:
    one of them paused the task (its creator is told once)."""
    store = ScheduleStore(db, clock=clock)
    task = await new_task(store, next_run_at=clock.now)
    await claim(store, "dead")
    clock.now = (await store.get(task.id)).next_run_at + 1  # the next hour, a lease gone by
    fired, _ = await claim(store, "a")
    assert len(fired) == 2
    refusals = [await store.finish_refused(f, owner="a", reason="closed") for f in fired]
    assert [r.paused for r in refusals if r is not None] == [True, False]
    assert {r.task.state for r in refusals if r is not None} == {"paused"}


async def test_a_refused_one_off_stays_done(db, clock):
    store = ScheduleStore(db, clock=clock)
    await new_task(store, kind="at", next_run_at=clock.now)
    (firing,), _ = await claim(store, "a")
    refused = await store.finish_refused(firing, owner="a", reason="not allowed")
    assert refused is not None and not refused.paused
    assert (refused.task.state, refused.task.failures) == ("done", 0)
    assert refused.task.last_outcome == "not run: not allowed"


async def test_a_due_time_fires_once_even_when_set_again(db, clock):
    store = ScheduleStore(db, clock=clock)
    task = await new_task(store, next_run_at=clock.now)
    due = clock.now
    (firing,), _ = await claim(store, "a")
    await store.finish(firing, owner="a", ok=False, pause_after=1)
    await store.resume(task.id, next_run_at=due)  # the same due time once more
    assert await claim(store, "a") == ([], [])
    resumed = await store.get(task.id)
    assert resumed is not None and resumed.next_run_at == hourly(task, clock.now)


async def test_next_due_at_is_the_earliest_active_due_time(db, clock):
    store = ScheduleStore(db, clock=clock)
    assert await store.next_due_at() is None
    later = await new_task(store, next_run_at=clock.now + 500)
    sooner = await new_task(store, next_run_at=clock.now + 100)
    assert await store.next_due_at() == clock.now + 100
    await store.cancel(sooner.id)
    assert await store.next_due_at() == clock.now + 500
    await store.cancel(later.id)
    assert await store.next_due_at() is None
