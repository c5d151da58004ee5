"""Questions (``ask_user``): created pending, ended once, answered only by their asker, with
one of their options or with text; racers on two engines (two replicas) have one winner.
Every test runs on SQLite, and on PostgreSQL when LARKGATE_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from alembic import command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import inspect

from bot.store import Database, NewQuestion, QuestionStore
from bot.store.migrate import alembic_config
from bot.store.models import QuestionRow, table_of
from bot.store.questions import (
    ANSWERED,
    CANCELLED,
    EXPIRED,
    MAX_ANSWER_CHARS,
    PENDING,
    QUESTION_STATES,
)

TTL = 300.0
ASKER = "ou_asker"


def new_question(**changes) -> NewQuestion:
    values = {
        "run_id": "run_1",
        "call_id": "call_1",
        "scope_key": "chat:oc_1",
        "generation": 1,
        "chat_id": "oc_1",
        "message_id": "om_1",
        "thread_id": "",
        "asker": ASKER,
        "question": "Which environment?",
        "options": ("staging", "production"),
        "owner": "p1",
        "ttl_seconds": TTL,
    }
    values.update(changes)
    return NewQuestion(**values)


@pytest.fixture
def store(db, clock) -> QuestionStore:
    return QuestionStore(db, clock=clock)


async def test_a_question_is_created_pending_and_read_back(store, clock):
    options = ("staging", "prod «eu»", "日本", 'with "quotes"')
    created = await store.create(new_question(options=options))
    assert len(created.id) == 32
    assert (created.state, created.options, created.asker) == (PENDING, options, ASKER)
    assert (created.created_at, created.expires_at) == (clock.now, clock.now + TTL)
    assert (created.answer, created.answered_by, created.decided_at) == (None, None, None)
    assert (created.note, created.card_message_id) == (None, None)
    assert await store.get(created.id) == created
    assert await store.get("nope") is None

    await store.attach_card(created.id, "om_card")
    assert await store.get(created.id) == dataclasses.replace(created, card_message_id="om_card")
    assert await store.states([created.id, "nope"]) == {created.id: PENDING}
    assert await store.states([]) == {}


async def test_a_free_text_question_has_no_options(store):
    created = await store.create(new_question(options=()))
    assert created.options == ()
    assert (await store.get(created.id)).options == ()


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"asker": ""}, "asker"),
        ({"options": ("yes", " ")}, "blank"),
        ({"options": ("yes", "")}, "blank"),
        ({"options": ("yes", "yes")}, "distinct"),
    ],
)
async def test_a_question_nobody_could_answer_is_not_created(store, changes, says):
    with pytest.raises(ValueError, match=says):
        await store.create(new_question(**changes))


async def test_the_asker_answers_with_an_option_once(store, clock):
    created = await store.create(new_question())
    clock.advance(5)
    first = await store.answer(created.id, by=ASKER, text="production")
    assert first.changed and first.refusal is None
    assert (first.record.state, first.record.answer, first.record.answered_by) == (
        ANSWERED,
        "production",
        ASKER,
    )
    assert first.record.decided_at == clock.now
    again = await store.answer(created.id, by=ASKER, text="staging")
    assert (again.changed, again.refusal) == (False, "already_answered")
    assert again.record == first.record
    assert await store.states([created.id]) == {created.id: ANSWERED}


async def test_someone_else_never_answers(store):
    created = await store.create(new_question())
    for person in ("ou_mallory", "", "ou_asker ", "OU_ASKER"):
        outcome = await store.answer(created.id, by=person, text="production")
        assert (outcome.changed, outcome.refusal) == (False, "not_yours")
        assert outcome.record == created
    assert await store.get(created.id) == created


async def test_an_answer_that_is_not_an_option_changes_nothing(store):
    created = await store.create(new_question())
    for text in ("Production", "production ", "", "0", "staging, production"):
        outcome = await store.answer(created.id, by=ASKER, text=text)
        assert (outcome.changed, outcome.refusal) == (False, "not_an_option")
    assert (await store.get(created.id)).state == PENDING


async def test_a_free_text_answer_is_kept_as_written_within_the_limit(store):
    created = await store.create(new_question(options=()))
    blank = await store.answer(created.id, by=ASKER, text=" \n\t")
    assert (blank.changed, blank.refusal) == (False, "empty")
    long = await store.answer(created.id, by=ASKER, text="x" * (MAX_ANSWER_CHARS + 1))
    assert (long.changed, long.refusal) == (False, "too_long")
    tail = " [link](https://evil) <at id=all></at>\n"
    text = "x" * (MAX_ANSWER_CHARS - len(tail)) + tail
    answered = await store.answer(created.id, by=ASKER, text=text)
    assert answered.changed and answered.record.answer == text


async def test_an_answer_after_the_deadline_is_refused(store, clock):
    created = await store.create(new_question())
    late = await store.answer(created.id, by=ASKER, text="staging", now=clock.now + TTL)
    assert (late.changed, late.refusal) == (False, "expired")
    clock.advance(TTL)  # the store's own clock, exactly at expires_at
    late = await store.answer(created.id, by=ASKER, text="staging")
    assert (late.changed, late.refusal) == (False, "expired")
    in_time = await store.answer(created.id, by=ASKER, text="staging", now=clock.now - 1)
    assert in_time.changed


async def test_an_unknown_question_is_said_so(store):
    outcome = await store.answer("nope", by=ASKER, text="staging")
    assert (outcome.changed, outcome.record, outcome.refusal) == (False, None, "unknown")
    assert (await store.expire("nope")).record is None
    assert (await store.cancel("nope", "stopped")).record is None


async def test_expire_and_cancel_end_a_pending_question_once(store, clock):
    expiring = await store.create(new_question(call_id="c1"))
    cancelled = await store.create(new_question(call_id="c2"))
    clock.advance(1)
    first = await store.expire(expiring.id)
    assert first.changed and (first.record.state, first.record.decided_at) == (EXPIRED, clock.now)
    assert not (await store.expire(expiring.id)).changed
    assert not (await store.cancel(expiring.id, "late")).changed
    stop = await store.cancel(cancelled.id, "the run was stopped")
    assert stop.changed and (stop.record.state, stop.record.note) == (
        CANCELLED,
        "the run was stopped",
    )
    for question, refusal in ((expiring, "expired"), (cancelled, "cancelled")):
        outcome = await store.answer(question.id, by=ASKER, text="staging")
        assert (outcome.changed, outcome.refusal) == (False, refusal)
        assert outcome.record.answer is None and outcome.record.answered_by is None


async def test_close_expired_ends_only_pending_questions_past_their_time(store, clock):
    old = await store.create(new_question(call_id="old", ttl_seconds=10))
    clock.advance(1)
    older_answered = await store.create(new_question(call_id="answered", ttl_seconds=5))
    await store.answer(older_answered.id, by=ASKER, text="staging")
    later = await store.create(new_question(call_id="later", ttl_seconds=20))
    clock.advance(1)
    cancelled = await store.create(new_question(call_id="cancelled", ttl_seconds=5))
    await store.cancel(cancelled.id, "stopped")
    overdue = await store.create(new_question(call_id="overdue", ttl_seconds=8))
    fresh = await store.create(new_question(call_id="fresh"))

    closed = await store.close_expired(clock.now + 10)
    assert [record.id for record in closed] == [old.id, overdue.id]  # oldest first
    assert all(record.state == EXPIRED for record in closed)
    assert await store.close_expired(clock.now + 10) == []
    states = await store.states([old.id, older_answered.id, later.id, cancelled.id, fresh.id])
    assert states == {
        old.id: EXPIRED,
        older_answered.id: ANSWERED,
        later.id: PENDING,
        cancelled.id: CANCELLED,
        fresh.id: PENDING,
    }
    clock.advance(TTL)
    assert {record.id for record in await store.close_expired()} == {later.id, fresh.id}


async def test_find_gives_the_newest_question_of_a_call(store, clock):
    assert await store.find("run_1", "call_1") is None
    first = await store.create(new_question())
    await store.answer(first.id, by=ASKER, text="staging")
    clock.advance(1)
    # A model that names every call "call_1" asks again later in the same run.
    second = await store.create(new_question(question="And which region?"))
    other_run = await store.create(new_question(run_id="run_2"))
    assert (await store.find("run_1", "call_1")).id == second.id
    assert (await store.find("run_2", "call_1")).id == other_run.id
    assert await store.find("run_1", "call_2") is None


async def test_pending_for_scope_lists_the_conversations_waiting_questions(store, clock):
    first = await store.create(new_question(call_id="a"))
    clock.advance(1)
    answered = await store.create(new_question(call_id="b"))
    await store.answer(answered.id, by=ASKER, text="staging")
    elsewhere = await store.create(new_question(call_id="c", scope_key="chat:oc_2"))
    clock.advance(1)
    second = await store.create(new_question(call_id="d", generation=2))
    assert [q.id for q in await store.pending_for_scope("chat:oc_1")] == [first.id, second.id]
    assert [q.id for q in await store.pending_for_scope("chat:oc_2")] == [elsewhere.id]
    assert await store.pending_for_scope("chat:oc_3") == []


async def test_racers_on_two_engines_have_exactly_one_winner(db, other_db, clock):
    here, there = QuestionStore(db, clock=clock), QuestionStore(other_db, clock=clock)
    for round_ in range(5):
        created = await here.create(new_question(call_id=f"c{round_}"))
        outcomes = await asyncio.gather(
            here.answer(created.id, by=ASKER, text="staging"),
            there.answer(created.id, by=ASKER, text="production"),
            there.answer(created.id, by="ou_mallory", text="production"),
            here.expire(created.id),
            there.cancel(created.id, "stopped"),
            there.answer(created.id, by=ASKER, text="staging"),
        )
        winners = [outcome for outcome in outcomes if outcome.changed]
        assert len(winners) == 1
        final = await here.get(created.id)
        assert winners[0].record == final
        # A refusal carries the row as it was read: before the winner, or after it.
        assert all(outcome.record in (created, final) for outcome in outcomes)
        assert final.state in (ANSWERED, EXPIRED, CANCELLED)
        if final.state == ANSWERED:
            assert final.answered_by == ASKER and final.answer in ("staging", "production")
        assert outcomes[2].refusal in ("not_yours", "already_answered", "expired", "cancelled")


PEOPLE = (ASKER, "ou_mallory", "", "ou_asker ")
OPTIONS = ("staging", "production", "日本 «x»")
answers = st.lists(
    st.tuples(
        st.sampled_from(PEOPLE),
        st.one_of(st.sampled_from(OPTIONS), st.text(max_size=30)),
        st.booleans(),  # on the other engine (another replica)
    ),
    min_size=1,
    max_size=6,
)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(attempts=answers, with_options=st.booleans(), expire_too=st.booleans())
async def test_concurrent_answers_change_the_row_at_most_once_and_only_for_the_asker(
    db, other_db, clock, attempts, with_options, expire_too
):
    here, there = QuestionStore(db, clock=clock), QuestionStore(other_db, clock=clock)
    options = OPTIONS if with_options else ()
    created = await here.create(new_question(options=options))
    racers = [
        (there if elsewhere else here).answer(created.id, by=by, text=text)
        for by, text, elsewhere in attempts
    ]
    if expire_too:
        racers.append(there.expire(created.id))
    outcomes = await asyncio.gather(*racers)
    final = await here.get(created.id)

    changed = [outcome for outcome in outcomes if outcome.changed]
    assert len(changed) <= 1
    assert all(outcome.record == final for outcome in changed)
    # A refusal carries the row as it was read: before the winner, or after it.
    assert all(outcome.record in (created, final) for outcome in outcomes)
    answered = outcomes[: len(attempts)]
    assert all((outcome.refusal is None) == outcome.changed for outcome in answered)
    if final.state == ANSWERED:
        assert len(changed) == 1 and changed[0].refusal is None
        assert final.answered_by == ASKER
        assert final.answer in options if options else final.answer.strip()
        # Exactly one of the asker's valid answers is what was kept.
        valid = [
            text
            for by, text, _ in attempts
            if by == ASKER and (text in options if options else bool(text.strip()))
        ]
        assert final.answer in valid
    else:
        assert final.answer is None and final.answered_by is None
        assert final.state == (EXPIRED if expire_too and changed else PENDING)
    for (by, _, _), outcome in zip(attempts, answered, strict=True):
        if by != ASKER:
            assert not outcome.changed and outcome.refusal is not None


async def test_migration_0012_makes_the_table_of_the_model_and_takes_it_back(database_url):
    config = alembic_config(database_url)
    await asyncio.to_thread(command.upgrade, config, "0012")

    def columns(connection):
        inspector = inspect(connection)
        if "questions" not in inspector.get_table_names():
            return None
        indexes = {index["name"] for index in inspector.get_indexes("questions")}
        return {column["name"] for column in inspector.get_columns("questions")}, indexes

    database = await Database.connect(database_url)
    try:
        made, indexes = await database.transact(columns, write=False)
        model = table_of(QuestionRow)
        # What 0012 made; 0016 added the app the question belongs to.
        assert made == {column.name for column in model.columns} - {"app"}
        assert indexes == {index.name for index in model.indexes}
        await asyncio.to_thread(command.downgrade, config, "0011")
        assert await database.transact(columns, write=False) is None
    finally:
        await database.dispose()


def test_the_states_are_the_four_a_question_moves_through():
    assert QUESTION_STATES == ("pending", "answered", "expired", "cancelled")
