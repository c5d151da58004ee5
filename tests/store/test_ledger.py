"""The message ledger: dedup, leases, take-overs and their races, give-ups, purge."""

from __future__ import annotations

import asyncio
from collections import Counter

import bot.store.ledger as ledger_module
from bot.store import Claim, MessageLedger

LEASE = 60.0
PAYLOAD = {"text": "你好 @_user_1", "chat_id": "oc_1", "mentions": [{"key": "@_user_1"}]}


def make_ledger(db, clock) -> MessageLedger:
    return MessageLedger(db, clock=clock)


async def test_claim_then_redelivery_then_done(db, clock):
    ledger = make_ledger(db, clock)
    first = await ledger.claim(
        "om_1", owner="a", payload=PAYLOAD, lease_seconds=LEASE, conversation_key="chat:oc_1"
    )
    assert (first.outcome, first.state, first.attempts) == ("claimed", "claimed", 1)
    assert first.acquired
    assert first.payload == PAYLOAD
    assert first.lease_until == clock.now + LEASE

    again = await ledger.claim("om_1", owner="b", payload={}, lease_seconds=LEASE)
    assert again.outcome == "duplicate_in_progress"
    assert not again.acquired
    assert (again.owner, again.payload, again.conversation_key) == ("a", PAYLOAD, "chat:oc_1")

    assert await ledger.complete("om_1", owner="a")
    done = await ledger.claim("om_1", owner="b", payload={}, lease_seconds=LEASE)
    assert (done.outcome, done.state) == ("duplicate_done", "done")
    clock.advance(10 * LEASE)
    assert (await ledger.claim("om_1", owner="b", payload={}, lease_seconds=LEASE)).outcome == (
        "duplicate_done"
    )


async def _racing_claims(ledgers: list[MessageLedger], ids: list[str]) -> list[Claim]:
    """Every id claimed three times by each ledger (each a process), all at once."""
    return await asyncio.gather(
        *(
            ledger.claim(message_id, owner=f"p{n}", payload={"i": i}, lease_seconds=LEASE)
            for i, message_id in enumerate(ids)
            for n, ledger in enumerate(ledgers)
            for _ in range(3)
        )
    )


async def test_two_processes_claiming_the_same_messages_at_once_claim_each_once(
    db, other_db, clock
):
    ledgers = [make_ledger(db, clock), make_ledger(other_db, clock)]
    ids = [f"om_{i}" for i in range(12)]
    claims = await _racing_claims(ledgers, ids)
    winners = Counter(claim.message_id for claim in claims if claim.outcome == "claimed")
    assert winners == dict.fromkeys(ids, 1)
    assert Counter(claim.outcome for claim in claims) == {
        "claimed": len(ids),
        "duplicate_in_progress": len(ids) * 5,
    }


async def test_a_redelivery_after_the_lease_ran_out_takes_the_message_over(db, clock):
    ledger = make_ledger(db, clock)
    await ledger.claim("om_1", owner="dead", payload=PAYLOAD, lease_seconds=LEASE)
    clock.advance(LEASE - 1)
    assert (await ledger.claim("om_1", owner="b", payload={}, lease_seconds=LEASE)).outcome == (
        "duplicate_in_progress"
    )
    clock.advance(1)

    taken = await ledger.claim("om_1", owner="b", payload={"new": True}, lease_seconds=LEASE)
    assert (taken.outcome, taken.state, taken.attempts, taken.owner) == (
        "taken_over",
        "claimed",
        2,
        "b",
    )
    assert taken.acquired
    assert taken.payload == PAYLOAD  # the stored message, not the redelivered copy
    assert not await ledger.renew("om_1", owner="dead", lease_seconds=LEASE)
    assert not await ledger.complete("om_1", owner="dead")
    assert await ledger.complete("om_1", owner="b")


async def test_redeliveries_racing_to_take_over_an_expired_message_take_it_once(
    db, other_db, clock
):
    # The take-over is one conditional update, outside any transaction on PostgreSQL
    # (atomic=False): racers in two processes must still find exactly one winner.
    ledgers = [make_ledger(db, clock), make_ledger(other_db, clock)]
    ids = [f"om_{i}" for i in range(8)]
    for message_id in ids:
        await ledgers[0].claim(message_id, owner="dead", payload=PAYLOAD, lease_seconds=LEASE)
    clock.advance(LEASE)
    claims = await _racing_claims(ledgers, ids)
    takers = Counter(claim.message_id for claim in claims if claim.outcome == "taken_over")
    assert takers == dict.fromkeys(ids, 1)
    assert Counter(claim.outcome for claim in claims) == {
        "taken_over": len(ids),
        "duplicate_in_progress": len(ids) * 5,
    }
    assert all(claim.attempts == 2 for claim in claims if claim.outcome == "taken_over")


async def test_renew_keeps_the_message_and_fails_for_anyone_else(db, clock):
    ledger = make_ledger(db, clock)
    await ledger.claim("om_1", owner="a", payload={}, lease_seconds=LEASE)
    assert not await ledger.renew("om_1", owner="b", lease_seconds=LEASE)
    assert not await ledger.renew("om_unknown", owner="a", lease_seconds=LEASE)
    clock.advance(LEASE - 1)
    assert await ledger.renew("om_1", owner="a", lease_seconds=LEASE)
    clock.advance(LEASE - 1)
    assert (await ledger.claim("om_1", owner="b", payload={}, lease_seconds=LEASE)).outcome == (
        "duplicate_in_progress"
    )
    assert await ledger.take_over_expired(owner="b", lease_seconds=LEASE) == []
    entry = await ledger.get("om_1")
    assert entry is not None
    assert (entry.owner, entry.attempts, entry.lease_until) == ("a", 1, clock.now + 1)


async def test_expired_claims_go_to_exactly_one_of_two_sweepers(db, other_db, clock):
    ledgers = [make_ledger(db, clock), make_ledger(other_db, clock)]
    ids = {f"om_{i}" for i in range(20)}
    for message_id in sorted(ids):
        await ledgers[0].claim(message_id, owner="dead", payload={}, lease_seconds=LEASE)
        clock.advance(0.01)
    await ledgers[0].claim("om_live", owner="alive", payload={}, lease_seconds=10 * LEASE)
    clock.advance(LEASE)

    results = await asyncio.gather(
        *(
            ledger.take_over_expired(owner=f"sweeper{n}", lease_seconds=LEASE)
            for n, ledger in enumerate(ledgers)
            for _ in range(2)
        )
    )
    taken = [claim.message_id for claims in results for claim in claims]
    assert sorted(taken) == sorted(ids)
    for claims in results:
        assert all(claim.outcome == "taken_over" and claim.attempts == 2 for claim in claims)
    assert (await ledgers[0].get("om_live")).owner == "alive"
    assert await ledgers[1].take_over_expired(owner="late", lease_seconds=LEASE) == []


async def test_take_over_expired_honours_the_limit_oldest_lease_first(db, clock):
    ledger = make_ledger(db, clock)
    for i in range(5):
        await ledger.claim(f"om_{i}", owner="dead", payload={"i": i}, lease_seconds=LEASE)
        clock.advance(1)
    clock.advance(LEASE)
    first = await ledger.take_over_expired(owner="b", lease_seconds=LEASE, limit=2)
    assert [claim.message_id for claim in first] == ["om_0", "om_1"]
    assert [claim.payload for claim in first] == [{"i": 0}, {"i": 1}]
    rest = await ledger.take_over_expired(owner="b", lease_seconds=LEASE)
    assert [claim.message_id for claim in rest] == ["om_2", "om_3", "om_4"]


async def test_a_message_that_keeps_killing_its_holder_fails_after_max_attempts(db, clock):
    ledger = make_ledger(db, clock)
    await ledger.claim("om_poison", owner="p0", payload={}, lease_seconds=LEASE)
    for attempt in (2, 3):
        clock.advance(LEASE)
        [claim] = await ledger.take_over_expired(
            owner=f"p{attempt}", lease_seconds=LEASE, max_attempts=3
        )
        assert (claim.message_id, claim.attempts) == ("om_poison", attempt)
    clock.advance(LEASE)
    assert await ledger.take_over_expired(owner="p4", lease_seconds=LEASE, max_attempts=3) == []
    entry = await ledger.get("om_poison")
    assert entry is not None
    assert (entry.state, entry.attempts) == ("failed", 3)
    assert entry.reason
    redelivered = await ledger.claim("om_poison", owner="p5", payload={}, lease_seconds=LEASE)
    assert (redelivered.outcome, redelivered.state) == ("duplicate_done", "failed")


async def test_a_redelivery_of_an_exhausted_message_marks_it_failed(db, clock):
    ledger = make_ledger(db, clock)
    await ledger.claim("om_1", owner="p0", payload={}, lease_seconds=LEASE)
    clock.advance(LEASE)
    claim = await ledger.claim("om_1", owner="p1", payload={}, lease_seconds=LEASE, max_attempts=1)
    assert (claim.outcome, claim.state, claim.attempts) == ("duplicate_done", "failed", 1)


async def test_release_makes_the_message_takeable_at_once_without_counting_an_attempt(db, clock):
    ledger = make_ledger(db, clock)
    await ledger.claim("om_1", owner="a", payload={}, lease_seconds=LEASE)
    assert not await ledger.release("om_1", owner="b")
    assert await ledger.release("om_1", owner="a")
    [claim] = await ledger.take_over_expired(owner="b", lease_seconds=LEASE)
    assert (claim.message_id, claim.owner, claim.attempts) == ("om_1", "b", 1)
    assert not await ledger.renew("om_1", owner="a", lease_seconds=LEASE)


async def test_a_replied_message_is_taken_over_with_its_reply(db, clock):
    ledger = make_ledger(db, clock)
    await ledger.claim("om_1", owner="a", payload={}, lease_seconds=LEASE)
    assert not await ledger.mark_replied("om_1", owner="b", reply_message_id="om_r")
    assert await ledger.mark_replied("om_1", owner="a", reply_message_id="om_r")
    live = await ledger.claim("om_1", owner="b", payload={}, lease_seconds=LEASE)
    assert (live.outcome, live.state) == ("duplicate_in_progress", "replied")
    clock.advance(LEASE)
    taken = await ledger.claim("om_1", owner="b", payload={}, lease_seconds=LEASE)
    assert (taken.outcome, taken.state, taken.reply_message_id) == ("taken_over", "replied", "om_r")
    assert await ledger.complete("om_1", owner="b")


async def test_dropped_messages_make_redeliveries_no_ops(db, clock):
    ledger = make_ledger(db, clock)
    assert await ledger.drop("om_stale", reason="stale", payload={"t": 1})
    assert not await ledger.drop("om_stale", reason="stale again")
    claim = await ledger.claim("om_stale", owner="a", payload={}, lease_seconds=LEASE)
    assert (claim.outcome, claim.state, claim.payload) == ("duplicate_done", "dropped", {"t": 1})

    await ledger.claim("om_2", owner="a", payload={}, lease_seconds=LEASE)
    assert not await ledger.drop("om_2", reason="ignored")
    assert not await ledger.drop("om_2", reason="ignored", owner="b")
    assert await ledger.drop("om_2", reason="not mentioned", owner="a")
    entry = await ledger.get("om_2")
    assert entry is not None
    assert (entry.state, entry.reason) == ("dropped", "not mentioned")
    clock.advance(LEASE)
    assert await ledger.take_over_expired(owner="b", lease_seconds=LEASE) == []


async def test_purge_removes_only_old_finished_rows(db, clock):
    ledger = make_ledger(db, clock)
    day = 24 * 3600.0
    await ledger.claim("om_old_done", owner="a", payload={}, lease_seconds=LEASE)
    await ledger.complete("om_old_done", owner="a")
    await ledger.drop("om_old_dropped", reason="stale")
    await ledger.claim("om_old_claimed", owner="a", payload={}, lease_seconds=LEASE)
    clock.advance(day + 1)
    await ledger.claim("om_new_done", owner="a", payload={}, lease_seconds=LEASE)
    await ledger.complete("om_new_done", owner="a")

    assert await ledger.purge(older_than_seconds=day) == 2
    assert await ledger.get("om_old_done") is None
    assert await ledger.get("om_old_dropped") is None
    assert (await ledger.get("om_old_claimed")).state == "claimed"
    assert (await ledger.get("om_new_done")).state == "done"
    assert await ledger.purge(older_than_seconds=day) == 0


async def test_get_returns_none_for_an_unknown_message(db, clock):
    assert await make_ledger(db, clock).get("om_nope") is None


async def test_complete_can_record_the_reply_in_the_same_statement(db, clock):
    ledger = make_ledger(db, clock)
    await ledger.claim("om_1", owner="a", payload={}, lease_seconds=LEASE)
    assert not await ledger.complete("om_1", owner="b", reply_message_id="om_r")
    assert await ledger.complete("om_1", owner="a", reply_message_id="om_r")
    entry = await ledger.get("om_1")
    assert (entry.state, entry.reply_message_id) == ("done", "om_r")
    assert not await ledger.complete("om_1", owner="a", reply_message_id="om_other")


async def test_renew_many_keeps_the_messages_still_held(db, clock):
    ledger = make_ledger(db, clock)
    for message_id in ("om_1", "om_2", "om_3"):
        await ledger.claim(message_id, owner="a", payload={}, lease_seconds=LEASE)
    await ledger.claim("om_other", owner="b", payload={}, lease_seconds=LEASE)
    await ledger.complete("om_3", owner="a")
    clock.advance(LEASE - 1)
    kept = await ledger.renew_many(
        ["om_1", "om_2", "om_3", "om_other", "om_unknown"], owner="a", lease_seconds=LEASE
    )
    assert kept == {"om_1", "om_2"}
    assert (await ledger.get("om_1")).lease_until == clock.now + LEASE
    assert (await ledger.get("om_other")).lease_until == clock.now + 1
    assert await ledger.renew_many([], owner="a", lease_seconds=LEASE) == set()


async def test_renew_many_binds_any_number_of_ids(db, clock, monkeypatch):
    """More ids than a statement may bind (SQLite 32,766, PostgreSQL 32,767): in-flight
    messages have no bound of their own, and one failed renewal round loses them all."""
    ledger = make_ledger(db, clock)
    held = ["om_a", "om_b", "om_c"]
    for message_id in held:
        await ledger.claim(message_id, owner="a", payload={}, lease_seconds=LEASE)
    unknown = [f"om_unknown_{n}" for n in range(33_000)]
    kept = await ledger.renew_many(
        [*unknown[:16_000], *held, *unknown[16_000:]], owner="a", lease_seconds=LEASE
    )
    assert kept == set(held)
    # Batches split anywhere, the held ones among them.
    monkeypatch.setattr(ledger_module, "RENEW_BATCH", 2)
    assert await ledger.renew_many(["om_x", *held, "om_y"], owner="a", lease_seconds=LEASE) == set(
        held
    )
