"""Acting as the user, end to end: the authorisation card, the consent through Feishu's
OAuth (the emulator's), the callback that resumes the waiting turn, and every refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.store.audit import AuditLog

from e2e.harness import Bot, running_bot, settings_for
from fakes.feishu_server import FakeMessage
from support.user_auth import PUBLIC_URL, TOKEN_KEY, AsMe, calling, card_link, follow

ALICE = "ou_user"  # the sender of message_event's messages
CONNECTORS = {"asme": AsMe}


def auth_cards(bot: Bot, message_id: str) -> list[FakeMessage]:
    return [
        m
        for m in bot.replies_to(message_id)
        if "Authorisation" in json.dumps(m.content.get("header", {}))
    ]


async def auth_card(bot: Bot, message_id: str) -> FakeMessage:
    await bot.wait_for(lambda: bool(auth_cards(bot, message_id)))
    return auth_cards(bot, message_id)[0]


def title(message: FakeMessage) -> str:
    return str(message.content["header"]["title"]["content"])


@pytest.fixture
def as_user(tmp_path, feishu, llm_server):
    """Start a bot with per-user authorisation and the AsMe connector."""
    from connectors.config import ConnectorsConfig

    AsMe.calls.clear()
    feishu.workspace.add_user(ALICE, "Alice Asker")

    def start(handler: Any, **overrides: Any):
        llm_server.handler = handler
        values = {
            "larkgate_token_key": TOKEN_KEY,
            "larkgate_public_url": PUBLIC_URL,
            **overrides,
        }
        settings = settings_for(tmp_path, feishu, llm_server, **values)
        return running_bot(
            settings,
            feishu,
            llm_server,
            connectors=ConnectorsConfig({"asme": {}}, explicit=True),
            connector_classes=CONNECTORS,
        )

    return start


async def test_the_card_the_consent_and_the_answer_without_asking_again(as_user, feishu):
    async with as_user(calling("my_name")) as bot:
        await bot.say("om_1", "what is my name in Feishu?")
        card = await auth_card(bot, "om_1")
        assert title(card) == "Authorisation needed"
        text = json.dumps(card.content, ensure_ascii=False)
        assert "contact:user.base:readonly" in text and f"<at id={ALICE}></at>" in text
        assert AsMe.calls == []  # nothing ran as anyone yet
        status, page, _ = await follow(card_link(card.content), bot.url, as_user=ALICE)
        assert status == 200 and "Authorised" in page
        answer = await bot.reply("om_1", within=15)
        await bot.settle()
        assert "Alice Asker" in answer
        assert title(feishu.message_by_id[card.message_id]) == "Authorised"
        audit = await AuditLog(bot.services.database).recent(action="user_auth.")
        assert [(a.action, a.actor) for a in audit] == [("user_auth.granted", ALICE)]
