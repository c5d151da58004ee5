"""Other bots' messages end to end: answered only from accepted bots that mention this bot
in a group, and never in an endless loop (``bot/runtime/intake/bot_peers.py``)."""

from __future__ import annotations

import asyncio

import pytest

from bot.runtime.intake.bot_peers import LOOP_CUTOFF
from bot.store.bot_hops import BotHopsStore

from e2e.harness import BOT_OPEN_ID, Bot, answering, running_bot, settings_for

PEER = "ou_peer_bot"
STRANGER = "ou_other_bot"
GROUP = "oc_team"
MENTION = [("@_user_1", BOT_OPEN_ID, "larkgate")]


def from_bot(sender: str = PEER, **fields):
    """The fields of a message another bot sends (Feishu's sender_type "app")."""
    return {
        "chat_id": GROUP,
        "chat_type": "group",
        "sender_open_id": sender,
        "sender_type": "app",
        "mentions": MENTION,
        **fields,
    }


def from_person(**fields):
    return {"chat_id": GROUP, "chat_type": "group", "mentions": MENTION, **fields}


def start(tmp_path, feishu, llm_server, **overrides):
    llm_server.handler = answering
    overrides.setdefault("larkgate_accept_bots", PEER)
    settings = settings_for(tmp_path, feishu, llm_server, **overrides)
    return running_bot(settings, feishu, llm_server)


async def answered(bot: Bot, message_id: str) -> str:
    return await bot.reply(message_id)


async def nothing_for(bot: Bot, message_id: str) -> None:
    await bot.settle()
    assert bot.replies_to(message_id) == []


async def test_an_accepted_bot_that_mentions_this_bot_is_answered(tmp_path, feishu, llm_server):
    async with start(tmp_path, feishu, llm_server) as bot:
        await bot.say("om_1", "@_user_1 what is the deploy status?", **from_bot())
        assert "Answer to: what is the deploy status?" in await answered(bot, "om_1")
        # A text that mentions the asking bot as it is created: Feishu notifies nobody of a
        # mention in a card, and the other bot would never hear the answer.
        (reply,) = bot.replies_to("om_1")
        assert reply.msg_type == "text"
        assert reply.content["text"].startswith(f'<at user_id="{PEER}"></at> Answer to:')


@pytest.mark.parametrize(
    ("why", "fields", "accept"),
    [
        ("not accepted", from_bot(STRANGER), PEER),
        ("no bot accepted at all", from_bot(), ""),
        ("no mention", from_bot(mentions=[]), PEER),
        ("mentions another", from_bot(mentions=[("@_user_1", "ou_someone", "x")]), PEER),
        ("a direct message", from_bot(chat_id="oc_p2p", chat_type="p2p"), PEER),
        # Its own messages echoed back (Feishu delivers a bot's own group messages).
        ("this bot itself", from_bot(BOT_OPEN_ID), f"{PEER},{BOT_OPEN_ID}"),
    ],
)
async def test_any_other_bot_message_is_not_answered(
    tmp_path, feishu, llm_server, why, fields, accept
):
    async with start(tmp_path, feishu, llm_server, larkgate_accept_bots=accept) as bot:
        await bot.say("om_1", "@_user_1 do it", **fields)
        await nothing_for(bot, "om_1")
        assert llm_server.requests == [], why


async def test_a_bot_runs_no_command(tmp_path, feishu, llm_server):
    """A bot's "/reset" is a question, not a reset of the people's conversation."""
    async with start(tmp_path, feishu, llm_server) as bot:
        await bot.say("om_p", "@_user_1 remember the word teal", **from_person())
        await answered(bot, "om_p")
        await bot.say("om_b", "@_user_1 /reset", **from_bot())
        assert "Answer to: /reset" in await answered(bot, "om_b")
        await bot.say("om_p2", "@_user_1 and now?", **from_person())
        await answered(bot, "om_p2")
    last = llm_server.requests[-1].body["messages"]
    assert any("remember the word teal" in str(m.get("content")) for m in last)


async def test_bots_answer_each_other_at_most_the_cap_then_the_chat_is_told_once(
    tmp_path, feishu, llm_server
):
    async with start(tmp_path, feishu, llm_server, larkgate_bot_hops=3) as bot:
        for n in range(1, 4):
            await bot.say(f"om_b{n}", f"@_user_1 round {n}", **from_bot())
            assert f"Answer to: round {n}" in await answered(bot, f"om_b{n}")
        calls = len(llm_server.requests)
        await bot.say("om_b4", "@_user_1 round 4", **from_bot())
        told = await answered(bot, "om_b4")
        assert told == LOOP_CUTOFF.format(hops=3)
        await bot.say("om_b5", "@_user_1 round 5", **from_bot())
        await nothing_for(bot, "om_b5")  # said once, then silent
        assert len(llm_server.requests) == calls  # no model call past the cap
        # A person speaks: bots may answer each other again.
        await bot.say("om_p", "@_user_1 carry on", **from_person())
        await answered(bot, "om_p")
        await bot.say("om_b6", "@_user_1 round 6", **from_bot())
        assert "Answer to: round 6" in await answered(bot, "om_b6")


async def test_a_redelivered_bot_message_is_counted_once(tmp_path, feishu, llm_server):
    async with start(tmp_path, feishu, llm_server, larkgate_bot_hops=1) as bot:
        await bot.say("om_b1", "@_user_1 once", **from_bot())
        await answered(bot, "om_b1")
        await bot.say("om_b1", "@_user_1 once", **from_bot())  # Feishu's retry
        await bot.settle()
        await bot.say("om_b2", "@_user_1 twice", **from_bot())
        assert await answered(bot, "om_b2") == LOOP_CUTOFF.format(hops=1)
        assert len(bot.replies_to("om_b1")) == 1  # answered once, and counted once


async def test_the_count_holds_when_bots_race(tmp_path, feishu, llm_server):
    """Every process counts in the database: 20 bot messages at once are 20 hops, no
    increment lost (the store, on this test's database)."""
    async with start(tmp_path, feishu, llm_server) as bot:
        store = BotHopsStore(bot.services.database)
        counts = await asyncio.gather(*(store.from_bot("chat:oc_race") for _ in range(20)))
        assert sorted(counts) == list(range(1, 21))
        assert [await store.claim_telling("chat:oc_race") for _ in range(3)] == [
            True,
            False,
            False,
        ]
        await store.from_person("chat:oc_race")
        assert await store.from_bot("chat:oc_race") == 1
        assert await store.claim_telling("chat:oc_race") is True  # a new run, told anew


def test_an_accepted_bot_is_named_by_its_open_id(monkeypatch, tmp_path):
    from bot.config import SettingsError, load_settings

    from support.env import clear_settings

    clear_settings(monkeypatch, tmp_path)
    monkeypatch.setenv("LARKGATE_ACCEPT_BOTS", "ou_peer, cli_a1b2c3")
    with pytest.raises(SettingsError, match="cli_a1b2c3: a bot's open_id"):
        load_settings()
    monkeypatch.setenv("LARKGATE_ACCEPT_BOTS", "ou_peer, ou_other")
    assert load_settings().larkgate_accept_bots == ("ou_peer", "ou_other")


async def test_a_person_ends_a_bots_run_where_each_sender_has_a_conversation(
    tmp_path, feishu, llm_server
):
    """In a chat_sender scope each sender's messages are a conversation of their own; the
    count is by chat and thread, so a person's message still ends the bots' run there."""
    async with start(
        tmp_path, feishu, llm_server, larkgate_bot_hops=1, larkgate_group_scope="chat_sender"
    ) as bot:
        await bot.say("om_b1", "@_user_1 one", **from_bot())
        await answered(bot, "om_b1")
        await bot.say("om_b2", "@_user_1 two", **from_bot())
        assert await answered(bot, "om_b2") == LOOP_CUTOFF.format(hops=1)
        await bot.say("om_p", "@_user_1 go on", **from_person())
        await answered(bot, "om_p")
        await bot.say("om_b3", "@_user_1 three", **from_bot())
        assert "Answer to: three" in await answered(bot, "om_b3")
        # Another thread of the chat has a count of its own.
        await bot.say("om_t1", "@_user_1 in a thread", **from_bot(root_id="om_root"))
        assert "Answer to: in a thread" in await answered(bot, "om_t1")
