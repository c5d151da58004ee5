"""Issue 32, item 4, through the whole bot: a person who is not in a group DMs the bot, and
the model asks feishu_get_chat_history for that group. The group's messages must never
reach the model, the answer card, or any message the bot sends; a member asking the same
gets them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from connectors.config import ConnectorsConfig

from e2e.harness import running_bot, settings_for
from e2e.test_user_auth import answer_to, tool_observations
from support.user_auth import calling

ALICE, BOB = "ou_fake_alice", "ou_fake_bob"  # Bob is in the board chat; Alice is not
BOARD = "oc_fake_board"
SECRETS = ("Berlin office", "reorg quiet")


@pytest.fixture
def workspace_bot(tmp_path, feishu, llm_server):
    """A bot with the Feishu workspace connector, the model scripted by ``handler``."""

    def start(handler: Any):
        llm_server.handler = handler
        settings = settings_for(tmp_path, feishu, llm_server)
        connectors = ConnectorsConfig({"feishu": {}}, explicit=True)
        return running_bot(settings, feishu, llm_server, connectors=connectors)

    return start


def everything_sent(bot: Any) -> str:
    """Every message and card the bot sent to Feishu, and every request to the model."""
    sent = [json.dumps(m.content, ensure_ascii=False) for m in bot.feishu.sent]
    cards = [json.dumps(c.card, ensure_ascii=False) for c in bot.feishu.cards.values()]
    model = [json.dumps(r.body, ensure_ascii=False) for r in bot.llm_server.requests]
    return "\n".join(sent + cards + model)


async def test_an_outsider_dming_the_bot_never_gets_a_groups_messages(workspace_bot, feishu):
    async with workspace_bot(calling("feishu_get_chat_history", {"chat_id": BOARD})) as bot:
        await bot.say("om_outsider", "what did the leadership group say?", sender_open_id=ALICE)
        answer = await answer_to(bot, "om_outsider")
        await bot.settle()
        (observation,) = tool_observations(bot.llm_server)
        leaked = everything_sent(bot)
    assert "Nothing was read" in observation and "member" in observation
    assert not any(text in leaked for text in SECRETS)
    assert not any(text in answer for text in SECRETS)
    history_reads = [r for r in feishu.requests if r.query.get("container_id") == BOARD]
    assert history_reads == []


async def test_a_member_dming_the_bot_gets_the_groups_messages(workspace_bot, feishu):
    async with workspace_bot(calling("feishu_get_chat_history", {"chat_id": BOARD})) as bot:
        await bot.say("om_member", "what did the leadership group say?", sender_open_id=BOB)
        await answer_to(bot, "om_member")
        await bot.settle()
        (observation,) = tool_observations(bot.llm_server)
    assert "Reorg: the Berlin office closes in May" in observation
