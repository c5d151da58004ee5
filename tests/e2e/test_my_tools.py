"""The feishu_my_* tools through the whole bot: the question, the authorisation card, the
consent through the emulator's OAuth, and the answer read from the asker's own calendar and
tasks. The tools and the consent flow were built apart; this is where they meet."""

from __future__ import annotations

import json
from typing import Any

import pytest

from connectors.config import ConnectorsConfig

from e2e.harness import running_bot, settings_for
from e2e.test_user_auth import answer_to, auth_card, auth_cards, title, tool_observations
from support.user_auth import PUBLIC_URL, TOKEN_KEY, calling, card_link, follow

ALICE, BOB = "ou_fake_alice", "ou_fake_bob"  # people of the emulator's seeded workspace


@pytest.fixture
def my_tools(tmp_path, feishu, llm_server):
    """A bot with the Feishu workspace connector and per-user authorisation on."""

    def start(handler: Any):
        llm_server.handler = handler
        settings = settings_for(
            tmp_path,
            feishu,
            llm_server,
            larkgate_token_key=TOKEN_KEY,
            larkgate_public_url=PUBLIC_URL,
        )
        return running_bot(
            settings, feishu, llm_server, connectors=ConnectorsConfig({"feishu": {}}, explicit=True)
        )

    return start


async def test_my_calendar_is_read_as_me_after_i_consent(my_tools, feishu):
    async with my_tools(calling("feishu_my_calendar_events")) as bot:
        await bot.say("om_1", "what is on my calendar?", sender_open_id=ALICE)
        card = await auth_card(bot, "om_1")
        scopes = json.dumps(card.content, ensure_ascii=False)
        assert "calendar:calendar.event:read" in scopes
        status, page, _ = await follow(card_link(card.content), bot.url, as_user=ALICE)
        assert status == 200 and "Authorised" in page
        answer = await answer_to(bot, "om_1")
        await bot.settle()
    # Her events, not the bot's calendar, not Bob's.
    assert "1:1 with Bob" in answer and "Dentist" in answer
    seen = " ".join(tool_observations(bot.llm_server))
    assert "Board prep" not in seen and "Weekly sync" not in seen
    assert title(feishu.message_by_id[card.message_id]) == "Authorised"


async def test_bob_cannot_consent_for_alices_question(my_tools, feishu):
    async with my_tools(calling("feishu_my_tasks")) as bot:
        await bot.say("om_2", "what are my open tasks?", sender_open_id=ALICE)
        card = await auth_card(bot, "om_2")
        status, page, _ = await follow(card_link(card.content), bot.url, as_user=BOB)
        assert status != 200 or "Authorised" not in page
        assert await bot.services.user_auth.tokens.get(BOB) is None
        assert await bot.services.user_auth.tokens.get(ALICE) is None
        # Alice still can, with the same card.
        status, page, _ = await follow(card_link(card.content), bot.url, as_user=ALICE)
        assert status == 200 and "Authorised" in page
        await answer_to(bot, "om_2")
        await bot.settle()
        assert len(auth_cards(bot, "om_2")) == 1
    assert "Board prep" not in " ".join(tool_observations(bot.llm_server))
