"""Saved runs: one per run and per message, replaced by a later save, gone with the run's
finish; a run that waits does not use up its message's attempts; the messages that joined
it end with the save; a checkpoint nobody will resume any more is purged."""

from __future__ import annotations

import pytest

from bot.store import CheckpointStore, FinishedTurn, MessageLedger, TurnJournal

LEASE = 30.0


@pytest.fixture
def store(db, clock) -> CheckpointStore:
    return CheckpointStore(db, clock=clock)


@pytest.fixture
def ledger(db, clock) -> MessageLedger:
    return MessageLedger(db, clock=clock)


async def _save(store: CheckpointStore, run_id: str = "run1", **changes) -> None:
    values = {
        "run_id": run_id,
        "message_id": "om_1",
        "scope_key": "dm:ou_a",
        "generation": 1,
        "owner": "p1",
        "payload": '{"x": 1}',
        "seal": "ab",
        **changes,
    }
    await store.save(**values)


async def test_a_save_replaces_the_runs_checkpoint_and_another_runs_for_its_message(store):
    await _save(store, payload="first")
    await _save(store, payload="second")
    saved = await store.for_message("om_1")
    assert saved is not None and (saved.run_id, saved.payload) == ("run1", "second")
    # A run started again from its message (its checkpoint could not be used) replaces it.
    await _save(store, run_id="run2", payload="again")
    assert (await store.for_message("om_1")).run_id == "run2"
    assert await store.for_run("run1") is None
    assert [c.run_id for c in await store.in_scope("dm:ou_a")] == ["run2"]


async def test_a_run_that_waits_does_not_use_up_its_messages_attempts(store, ledger, clock):
    await ledger.claim("om_1", owner="p1", payload={}, lease_seconds=LEASE)
    for dead, next_owner in (("p1", "p2"), ("p2", "p3"), ("p3", "p4"), ("p4", "p5")):
        await _save(store, owner=dead)  # the run waits, saved by the process holding it
        clock.advance(LEASE + 1)  # ... which dies
        (claim,) = await ledger.take_over_expired(owner=next_owner, lease_seconds=LEASE)
        assert claim.message_id == "om_1" and claim.attempts == 2
    # A process that dies before the run waits again still counts (a poison message).
    clock.advance(LEASE + 1)
    (claim,) = await ledger.take_over_expired(owner="p6", lease_seconds=LEASE)
    assert claim.attempts == 3


async def test_the_joined_messages_a_save_holds_end_with_it(store, ledger):
    for message_id in ("om_1", "om_2", "om_3"):
        await ledger.claim(message_id, owner="p1", payload={}, lease_seconds=LEASE)
    await _save(store, joined_message_ids=["om_2"])
    assert (await ledger.get("om_2")).state == "done"
    assert (await ledger.get("om_1")).state == "claimed"  # the run's own: taken over later
    assert (await ledger.get("om_3")).state == "claimed"  # not read by the run yet


async def test_the_runs_finish_deletes_its_checkpoint(db, store, ledger, clock):
    await ledger.claim("om_1", owner="p1", payload={}, lease_seconds=LEASE)
    await _save(store)
    finished = FinishedTurn(
        scope_key="dm:ou_a",
        run_id="run1",
        message_id="om_1",
        status="completed",
        model="m",
        started_at=clock.now,
        completed_message_ids=("om_1",),
        owner="p1",
        checkpointed=True,
    )
    await TurnJournal(db, clock=clock).finish_turn(finished)
    assert await store.for_run("run1") is None


async def test_checkpoints_nobody_will_resume_are_purged(store, ledger, clock):
    await ledger.claim("om_1", owner="p1", payload={}, lease_seconds=LEASE)
    await ledger.claim("om_2", owner="p1", payload={}, lease_seconds=LEASE)
    await _save(store, run_id="run1", message_id="om_1")
    await _save(store, run_id="run2", message_id="om_2")
    await ledger.drop("om_2", reason="failed elsewhere", owner="p1")
    clock.advance(120)
    assert await store.purge_orphans(grace_seconds=60) == 1
    assert await store.for_run("run1") is not None  # its message is still to be answered
    assert await store.for_run("run2") is None
