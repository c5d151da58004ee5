"""Memories in the database (SQLite FTS5 and PostgreSQL): a recall reads only the owners it
names, ranked by the question's terms; caps forget the oldest least-used; audit rows never
keep a forgotten text."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.memory.terms import query_terms, terms
from bot.memory.text import MemoryTextError, clean_text
from bot.store import AuditLog
from bot.store.memories import MemoryStore, Readable

ALICE, BOB = "ou_alice", "ou_bob"
GROUP, OTHER_GROUP = "oc_team", "oc_other"


async def remember(store: MemoryStore, scope, owner, text, *, by=ALICE, cap=200):
    stored = await store.add(
        scope=scope, owner=owner, text=text, terms=terms(text), created_by=by, chat_id=None,
        cap=cap,
    )  # fmt: skip
    return stored.memory


async def recall(store: MemoryStore, readable: Readable, question: str, limit: int = 5):
    return [m.text for m in await store.recall(readable, query_terms(question), limit=limit)]


async def test_a_recall_ranks_the_owner_s_memories_by_the_question(db, clock):
    store = MemoryStore(db, clock=clock)
    await remember(store, "person", ALICE, "I am on the Shanghai team")
    clock.advance(1)
    await remember(store, "person", ALICE, "My manager is Li Wei")
    clock.advance(1)
    await remember(store, "person", ALICE, "Lunch is at noon")
    assert await recall(store, Readable(person=ALICE), "which team am I on?") == [
        "I am on the Shanghai team"
    ]
    assert await recall(store, Readable(person=ALICE), "who is my manager") == [
        "My manager is Li Wei"
    ]
    assert await recall(store, Readable(person=ALICE), "what about the weather") == []


async def test_chinese_is_found_by_its_character_pairs(db, clock):
    store = MemoryStore(db, clock=clock)
    await remember(store, "person", ALICE, "我在上海团队工作")
    await remember(store, "person", ALICE, "周三开站会")
    assert await recall(store, Readable(person=ALICE), "我是哪个团队的?") == ["我在上海团队工作"]


async def test_a_recall_never_reads_an_owner_it_does_not_name(db, clock):
    store = MemoryStore(db, clock=clock)
    await remember(store, "person", BOB, "Bob's salary is 100k", by=BOB)
    await remember(store, "chat", OTHER_GROUP, "the other group's salary plan")
    await remember(store, "chat", GROUP, "our salary review is in March")
    await remember(store, "org", "", "salary questions go to HR")
    in_group = await recall(store, Readable(chat=GROUP), "salary")
    assert sorted(in_group) == ["our salary review is in March", "salary questions go to HR"]
    alice_dm = await recall(store, Readable(person=ALICE), "salary")
    assert alice_dm == ["salary questions go to HR"]
    assert await recall(store, Readable(person=ALICE, org=False), "salary") == []
    # Another app of the deployment sees none of them.
    assert (
        await recall(MemoryStore(db, clock=clock, app="hr"), Readable(chat=GROUP), "salary") == []
    )


OWNERS = [("person", ALICE), ("person", BOB), ("chat", GROUP), ("chat", OTHER_GROUP), ("org", "")]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    stored=st.lists(
        st.tuples(st.sampled_from(OWNERS), st.text(min_size=1, max_size=40)), max_size=12
    ),
    question=st.text(max_size=60),
    reader=st.tuples(
        st.sampled_from([None, ALICE, BOB]), st.sampled_from([None, GROUP]), st.booleans()
    ),
)
async def test_whatever_is_stored_and_asked_a_recall_returns_only_readable_memories(
    db, clock, stored, question, reader
):
    """Any texts (quotes, FTS5 operators, column names, CJK), any question: never an
    error, never a memory of an owner the reader does not name."""
    store = MemoryStore(db, clock=clock, app=f"p{abs(hash((tuple(stored), question))) % 10**9}")
    for (scope, owner), text in stored:
        try:
            cleaned = clean_text(text)  # as the remember tool stores it
        except MemoryTextError:
            continue
        await remember(store, scope, owner, cleaned)
    readable = Readable(person=reader[0], chat=reader[1], org=reader[2])
    for memory in await store.recall(readable, query_terms(question), limit=50):
        assert readable.may_read(memory)


@pytest.mark.parametrize(
    "question", ['" OR owner_key : *', "terms : NEAR(a b)", "a AND NOT b", "*"]
)
async def test_search_syntax_in_a_question_is_only_words(db, clock, question):
    store = MemoryStore(db, clock=clock)
    await remember(store, "person", BOB, "owner key terms near a b", by=BOB)
    assert await recall(store, Readable(person=ALICE), question) == []


async def test_past_the_cap_the_oldest_least_used_is_forgotten_and_said(db, clock):
    store = MemoryStore(db, clock=clock)
    first = await remember(store, "person", ALICE, "alpha fact", cap=2)
    clock.advance(1)
    await remember(store, "person", ALICE, "beta fact", cap=2)
    clock.advance(1)
    await store.recall(Readable(person=ALICE), ["alpha"], limit=5)  # alpha is used once
    clock.advance(1)
    stored = await store.add(
        scope="person", owner=ALICE, text="gamma fact", terms=["gamma", "fact"],
        created_by=ALICE, chat_id=None, cap=2,
    )  # fmt: skip
    assert [m.text for m in stored.evicted] == ["beta fact"]
    (evicted,) = await AuditLog(db, clock=clock).recent(action="memory.evicted")
    assert (evicted.actor, evicted.target, evicted.detail["via"]) == (
        None,
        stored.evicted[0].id,
        "cap",
    )
    assert "beta" not in json.dumps(evicted.detail)
    kept = {m.text for m in await store.of_owner("person", ALICE)}
    assert kept == {"alpha fact", "gamma fact"}
    assert (await store.get(first.id)).uses == 1  # type: ignore[union-attr]
    # Another owner's count is its own.
    await remember(store, "person", BOB, "bob one", by=BOB, cap=2)
    assert len(await store.of_owner("person", ALICE)) == 2


async def test_a_forgotten_memory_leaves_no_text_behind(db, clock):
    store = MemoryStore(db, clock=clock)
    secret = "my door code is 4321"
    memory = await remember(store, "person", ALICE, secret)
    assert (await store.forget(memory.id, actor=ALICE, via="card")).text == secret  # type: ignore[union-attr]
    assert await store.forget(memory.id, actor=ALICE, via="card") is None
    assert await recall(store, Readable(person=ALICE), "door code") == []
    entries = await AuditLog(db, clock=clock).recent(action="memory.")
    assert [e.action for e in entries] == ["memory.forgotten", "memory.stored"]
    assert all(secret not in json.dumps(e.detail) for e in entries)
    assert entries[0].actor == ALICE and entries[0].detail["via"] == "card"


async def test_forget_all_takes_one_owner_s_memories(db, clock):
    store = MemoryStore(db, clock=clock)
    for n in range(3):
        await remember(store, "person", ALICE, f"fact {n}")
    await remember(store, "person", BOB, "bob's fact", by=BOB)
    assert await store.forget_all("person", ALICE, actor=ALICE, via="command") == 3
    assert await store.of_owner("person", ALICE) == []
    assert len(await store.of_owner("person", BOB)) == 1


async def test_another_app_s_memory_is_unknown(db, clock):
    store, hr = MemoryStore(db, clock=clock), MemoryStore(db, clock=clock, app="hr")
    memory = await remember(store, "person", ALICE, "a fact")
    assert await hr.get(memory.id) is None
    assert await hr.forget(memory.id, actor=ALICE, via="card") is None
    assert await store.get(memory.id) is not None
