"""The turn journal: history, run and claims of a finished turn, all in one transaction."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from bot.store import (
    ConversationStore,
    FinishedTurn,
    HistoryEntry,
    MessageLedger,
    RunStore,
    TurnJournal,
)

LEASE = 60.0


def finished(scope_key: str = "chat:oc_1", **fields) -> FinishedTurn:
    values = {
        "scope_key": scope_key,
        "entries": (
            HistoryEntry("user", "what is 6 x 7?", "om_1"),
            HistoryEntry("user", "quickly", "om_2"),
            HistoryEntry("assistant", "42"),
        ),
        "run_id": "run_1",
        "message_id": "om_1",
        "status": "completed",
        "model": "m",
        "iterations": 2,
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "total_tokens": 120,
        "tool_calls": 1,
        "feishu_calls": 1,
        "started_at": 1_600_000_000.0,
        "completed_message_ids": ("om_1", "om_2"),
        "owner": "a",
        "reply_message_id": "om_reply",
    }
    return FinishedTurn(**{**values, **fields})


async def claim(ledger: MessageLedger, *message_ids: str, owner: str = "a") -> None:
    for message_id in message_ids:
        await ledger.claim(message_id, owner=owner, payload={}, lease_seconds=LEASE)


async def count(db, table: str) -> int:
    return await db.transact(
        lambda connection: connection.execute(text(f"SELECT count(*) FROM {table}")).scalar(),
        write=False,
    )


async def test_the_first_finished_turn_creates_the_conversation_and_records_everything(db, clock):
    ledger, conversations = MessageLedger(db, clock=clock), ConversationStore(db, clock=clock)
    await claim(ledger, "om_1", "om_2")
    clock.advance(5)
    conversation_id = await TurnJournal(db, clock=clock).finish_turn(finished())

    conversation = await conversations.get(conversation_id)
    assert (conversation.scope_key, conversation.generation) == ("chat:oc_1", 1)
    loaded = await conversations.load("chat:oc_1", history_limit=10)
    assert loaded.conversation_id == conversation_id
    assert loaded.history == list(finished().entries)

    run = await RunStore(db).get("run_1")
    assert (run.conversation_id, run.message_id, run.owner, run.status, run.model) == (
        conversation_id,
        "om_1",
        "a",
        "completed",
        "m",
    )
    assert (run.iterations, run.prompt_tokens, run.completion_tokens, run.total_tokens) == (
        2,
        100,
        20,
        120,
    )
    assert (run.tool_calls, run.feishu_calls, run.error) == (1, 1, None)
    assert (run.started_at, run.finished_at) == (1_600_000_000.0, clock.now)

    first, second = await ledger.get("om_1"), await ledger.get("om_2")
    assert (first.state, first.reply_message_id, first.updated_at) == (
        "done",
        "om_reply",
        clock.now,
    )
    assert (second.state, second.reply_message_id) == ("done", None)


async def test_later_turns_reuse_the_conversation(db, clock):
    journal, conversations = TurnJournal(db, clock=clock), ConversationStore(db, clock=clock)
    first = await journal.finish_turn(finished(completed_message_ids=()))
    # By the id the turn loaded, or by (scope_key, generation) when it loaded none.
    second = await journal.finish_turn(
        finished(run_id="run_2", conversation_id=first, completed_message_ids=())
    )
    third = await journal.finish_turn(finished(run_id="run_3", completed_message_ids=()))
    assert first == second == third
    assert await count(db, "conversations") == 1
    history = (await conversations.load("chat:oc_1", history_limit=100)).history
    assert len(history) == 9
    assert [run.conversation_id for run in await RunStore(db).recent()] == [first] * 3


async def test_a_turn_of_the_generation_before_a_reset_stays_out_of_the_new_conversation(db, clock):
    conversations = ConversationStore(db, clock=clock)
    loaded = await conversations.load("chat:oc_1", history_limit=10)  # the turn starts
    new = await conversations.reset("chat:oc_1")  # /reset while it runs
    old = await TurnJournal(db, clock=clock).finish_turn(
        finished(conversation_id=loaded.conversation_id, generation=loaded.generation)
    )
    assert old != new.id
    after = await conversations.load("chat:oc_1", history_limit=10)
    assert (after.conversation_id, after.generation, after.history) == (new.id, 2, [])


async def test_claims_another_owner_took_over_are_not_completed(db, clock):
    ledger = MessageLedger(db, clock=clock)
    await claim(ledger, "om_1")
    await claim(ledger, "om_2", owner="dead")  # taken over below, its lease runs out first
    await claim(ledger, "om_3")
    await ledger.drop("om_3", reason="ignored", owner="a")
    clock.advance(LEASE)
    await ledger.renew("om_1", owner="a", lease_seconds=LEASE)
    [taken] = await ledger.take_over_expired(owner="b", lease_seconds=LEASE)
    assert taken.message_id == "om_2"

    await TurnJournal(db, clock=clock).finish_turn(
        finished(completed_message_ids=("om_1", "om_2", "om_3"))
    )
    assert (await ledger.get("om_1")).state == "done"
    second = await ledger.get("om_2")
    assert (second.state, second.owner, second.reply_message_id) == ("claimed", "b", None)
    assert (await ledger.get("om_3")).state == "dropped"


async def test_a_turn_without_a_reply_keeps_a_reply_recorded_earlier(db, clock):
    ledger = MessageLedger(db, clock=clock)
    await claim(ledger, "om_1")
    await ledger.mark_replied("om_1", owner="a", reply_message_id="om_earlier")
    await TurnJournal(db, clock=clock).finish_turn(
        finished(completed_message_ids=("om_1",), reply_message_id=None, entries=())
    )
    entry = await ledger.get("om_1")
    assert (entry.state, entry.reply_message_id) == ("done", "om_earlier")


async def test_a_turn_of_one_message_completes_it_only_while_its_owner_holds_it(db, clock):
    ledger, journal = MessageLedger(db, clock=clock), TurnJournal(db, clock=clock)
    await claim(ledger, "om_1")
    await claim(ledger, "om_2", owner="other")
    await journal.finish_turn(finished(completed_message_ids=("om_1",)))
    await journal.finish_turn(
        finished(run_id="run_2", message_id="om_2", completed_message_ids=("om_2",))
    )
    first, second = await ledger.get("om_1"), await ledger.get("om_2")
    assert (first.state, first.reply_message_id) == ("done", "om_reply")
    assert (second.state, second.owner, second.reply_message_id) == ("claimed", "other", None)


async def test_a_failure_midway_records_nothing(db, clock):
    ledger, journal = MessageLedger(db, clock=clock), TurnJournal(db, clock=clock)
    await journal.finish_turn(finished(scope_key="chat:other", completed_message_ids=()))
    await claim(ledger, "om_1", "om_2")

    # The run row is bad (its id is taken): written after the conversation and the history,
    # before the claims. None of it stays.
    with pytest.raises(IntegrityError):
        await journal.finish_turn(finished())
    assert await count(db, "conversations") == 1
    assert await count(db, "conversation_messages") == 3
    assert await count(db, "runs") == 1
    assert [(await ledger.get(i)).state for i in ("om_1", "om_2")] == ["claimed", "claimed"]

    # The database, and its writer, are fine afterwards.
    await journal.finish_turn(finished(run_id="run_2"))
    assert [(await ledger.get(i)).state for i in ("om_1", "om_2")] == ["done", "done"]
    assert await count(db, "conversation_messages") == 6


async def test_bad_statuses_and_roles_are_refused_before_writing(db, clock):
    journal = TurnJournal(db, clock=clock)
    with pytest.raises(ValueError, match="status"):
        await journal.finish_turn(finished(status="running"))
    with pytest.raises(ValueError, match="role"):
        await journal.finish_turn(finished(entries=(HistoryEntry("system", "no"),)))
    assert await count(db, "conversations") == 0


async def test_concurrent_first_turns_of_a_scope_end_with_one_conversation(db, other_db, clock):
    journals = [TurnJournal(db, clock=clock), TurnJournal(other_db, clock=clock)]
    turns = [
        dataclasses.replace(
            finished(completed_message_ids=()),
            run_id=f"run_{n}",
            entries=(HistoryEntry("user", f"question {n}", f"om_{n}"),),
        )
        for n in range(8)
    ]
    ids = await asyncio.gather(*(journals[n % 2].finish_turn(turn) for n, turn in enumerate(turns)))
    assert len(set(ids)) == 1
    assert await count(db, "conversations") == 1
    history = (await ConversationStore(db).load("chat:oc_1", history_limit=100)).history
    assert sorted(entry.content for entry in history) == [f"question {n}" for n in range(8)]
