"""Conversations: one per scope even under races, generations on reset, ordered history."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from bot.store import ConversationStore, HistoryEntry, LoadedConversation


async def test_concurrent_first_messages_of_a_scope_share_one_conversation(db, other_db, clock):
    stores = [ConversationStore(db, clock=clock), ConversationStore(other_db, clock=clock)]
    conversations = await asyncio.gather(
        *(store.active("chat:oc_1") for store in stores for _ in range(8))
    )
    assert len({conversation.id for conversation in conversations}) == 1
    conversation = conversations[0]
    assert (conversation.scope_key, conversation.generation) == ("chat:oc_1", 1)
    assert conversation.created_at == clock.now
    assert len(conversation.id) == 32
    assert await stores[0].get(conversation.id) == conversation


async def test_scopes_are_separate(db, clock):
    store = ConversationStore(db, clock=clock)
    first, second = await store.active("chat:oc_1"), await store.active("chat:oc_2")
    assert first.id != second.id
    assert await store.active("chat:oc_1") == first


async def test_reset_starts_a_new_conversation_without_the_old_history(db, clock):
    store = ConversationStore(db, clock=clock)
    old = await store.active("chat:oc_1")
    await store.append(old.id, "user", "remember 42", message_id="om_1")
    await store.append(old.id, "assistant", "noted")

    new = await store.reset("chat:oc_1")
    assert new.id != old.id
    assert new.generation == old.generation + 1
    assert await store.active("chat:oc_1") == new
    assert await store.history(new.id, limit=10) == []
    await store.append(new.id, "user", "what number?")
    assert await store.history(new.id, limit=10) == [HistoryEntry("user", "what number?")]
    assert len(await store.history(old.id, limit=10)) == 2


async def test_reset_of_an_unknown_scope_starts_generation_two(db, clock):
    # A scope without conversations is at generation 1 (see load()): a turn that loaded it
    # records into generation 1, never into the conversation the reset started.
    store = ConversationStore(db, clock=clock)
    conversation = await store.reset("dm:ou_1")
    assert conversation.generation == 2
    assert await store.active("dm:ou_1") == conversation


async def test_racing_resets_create_one_new_generation(db, other_db, clock):
    stores = [ConversationStore(db, clock=clock), ConversationStore(other_db, clock=clock)]
    old = await stores[0].active("chat:oc_1")
    new = await asyncio.gather(*(store.reset("chat:oc_1") for store in stores))
    generations = {conversation.generation for conversation in new}
    assert generations <= {2, 3}
    assert (await stores[0].active("chat:oc_1")).generation == max(generations)
    assert old.id not in {conversation.id for conversation in new}


async def test_history_is_the_last_entries_oldest_first(db, clock):
    store = ConversationStore(db, clock=clock)
    conversation = await store.active("chat:oc_1")
    ids = []
    for i in range(7):
        role = "user" if i % 2 == 0 else "assistant"
        ids.append(await store.append(conversation.id, role, f"turn {i}", message_id=f"om_{i}"))
        clock.advance(1)
    assert ids == sorted(ids)

    history = await store.history(conversation.id, limit=3)
    assert history == [
        HistoryEntry("user", "turn 4", "om_4"),
        HistoryEntry("assistant", "turn 5", "om_5"),
        HistoryEntry("user", "turn 6", "om_6"),
    ]
    assert [entry.content for entry in await store.history(conversation.id, limit=100)] == [
        f"turn {i}" for i in range(7)
    ]
    assert await store.history(conversation.id, limit=0) == []


async def test_append_refuses_unknown_roles_and_conversations(db, clock):
    store = ConversationStore(db, clock=clock)
    conversation = await store.active("chat:oc_1")
    with pytest.raises(ValueError, match="role"):
        await store.append(conversation.id, "system", "no")
    with pytest.raises(Exception, match=r"(?i)foreign key"):
        await store.append("no-such-conversation", "user", "hello")
    assert await store.history(conversation.id, limit=5) == []


async def test_load_of_a_new_scope_creates_nothing(db, clock):
    store = ConversationStore(db, clock=clock)
    loaded = await store.load("chat:oc_1", history_limit=10)
    assert loaded == LoadedConversation("chat:oc_1", None, 1, [])
    count = await db.transact(
        lambda connection: connection.execute(text("SELECT count(*) FROM conversations")).scalar(),
        write=False,
    )
    assert count == 0


async def test_load_returns_the_active_conversation_and_its_last_history(db, clock):
    store = ConversationStore(db, clock=clock)
    conversation = await store.active("chat:oc_1")
    for i in range(5):
        await store.append(conversation.id, "user" if i % 2 == 0 else "assistant", f"turn {i}")
    loaded = await store.load("chat:oc_1", history_limit=3)
    assert (loaded.scope_key, loaded.conversation_id, loaded.generation) == (
        "chat:oc_1",
        conversation.id,
        1,
    )
    assert [entry.content for entry in loaded.history] == ["turn 2", "turn 3", "turn 4"]
    assert loaded.history[0] == HistoryEntry("user", "turn 2")
    assert (await store.load("chat:oc_1", history_limit=0)).history == []
    assert len((await store.load("chat:oc_1", history_limit=100)).history) == 5
    assert (await store.load("chat:oc_2", history_limit=3)).conversation_id is None


async def test_load_after_a_reset_is_the_new_generation_with_no_history(db, clock):
    store = ConversationStore(db, clock=clock)
    old = await store.active("chat:oc_1")
    await store.append(old.id, "user", "remember 42")
    new = await store.reset("chat:oc_1")
    loaded = await store.load("chat:oc_1", history_limit=10)
    assert loaded == LoadedConversation("chat:oc_1", new.id, 2, [])
