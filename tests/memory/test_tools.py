"""The remember and forget tools, at the tool: whose memory a call reaches is the run's,
never the model's to say, and a run others joined writes and erases for nobody alone."""

from __future__ import annotations

import pytest

from bot.engine import ToolError
from bot.memory.recall import MemoryConfig
from bot.memory.terms import terms
from bot.memory.tools import MemoryTools
from bot.store import Database, upgrade_async
from bot.store.memories import MemoryStore

from support.turns import serving, turn_context

ALICE, BOB, ADMIN = "ou_alice", "ou_bob", "ou_admin"
GROUP = "oc_team"


@pytest.fixture
async def store(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path}/m.db"
    await upgrade_async(url)
    async with Database(url) as db:
        yield MemoryStore(db)


def tools_of(store: MemoryStore) -> MemoryTools:
    return MemoryTools(store, MemoryConfig(), is_admin=lambda who: who == ADMIN)


def in_group(sender: str = ALICE, joined: tuple[str, ...] = ()):
    return turn_context(sender_open_id=sender, chat_id=GROUP, chat_type="group", joined=joined)


async def test_remember_stores_for_the_run_s_person_and_chat_only(store):
    tools = tools_of(store)
    with serving(turn_context(sender_open_id=ALICE, chat_id="oc_dm_alice")):
        said = await tools.remember("I like green tea")
    assert "Remembered for you" in said
    (mine,) = await store.of_owner("person", ALICE)
    assert (mine.created_by, mine.chat_id) == (ALICE, "oc_dm_alice")
    with serving(in_group(BOB)):
        await tools.remember("our sprint starts Wednesdays", scope="chat")
    (group,) = await store.of_owner("chat", GROUP)
    assert group.created_by == BOB


async def test_a_joined_run_stores_nobody_s_personal_memory(store):
    """Bob's message joined Alice's run in the group: "remember for me that ..." would be
    stored as Alice's, in Bob's words; refused."""
    with serving(in_group(ALICE, joined=(BOB,))), pytest.raises(ToolError, match="asks alone"):
        await tools_of(store).remember("Alice's badge number is 7", scope="me")
    assert await store.of_owner("person", ALICE) == []


async def test_a_joined_run_forgets_only_what_every_asker_may(store):
    stored = await store.add(
        scope="chat", owner=GROUP, text="deploys freeze on fridays",
        terms=terms("deploys freeze on fridays"), created_by=ALICE, chat_id=GROUP, cap=10,
    )  # fmt: skip
    tools = tools_of(store)
    with serving(in_group(ALICE, joined=(BOB,))), pytest.raises(ToolError, match="may forget"):
        await tools.forget(memory_id=stored.memory.id)
    with serving(in_group(BOB)), pytest.raises(ToolError, match="may forget"):
        await tools.forget(memory_id=stored.memory.id)
    with serving(in_group(ALICE)):
        assert "Forgot" in await tools.forget(memory_id=stored.memory.id)


@pytest.mark.parametrize(
    ("scope", "where", "says"),
    [
        ("chat", "p2p", "belong to a group"),
        ("org", "group", "only an admin"),
        ("everyone", "group", 'scope is "me", "chat" or "org"'),
    ],
)
async def test_a_scope_the_person_may_not_use_is_refused(store, scope, where, says):
    context = turn_context(sender_open_id=BOB, chat_id=GROUP, chat_type=where)
    with serving(context), pytest.raises(ToolError, match=says):
        await tools_of(store).remember("a fact", scope=scope)


async def test_no_turn_no_memory(store):
    with pytest.raises(ToolError, match="this run has none"):
        await tools_of(store).remember("a fact")
