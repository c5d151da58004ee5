"""``larkgate dev``: acting as the user against the emulator's OAuth, from the chat page."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from bot.config import load_settings
from bot.sandbox.people import ADMIN
from bot.sandbox.runner import Sandbox, dev_settings
from connectors.config import ConnectorsConfig

from support.sandbox import Page, answered, card_text, cards
from support.user_auth import AsMe, calling, card_link


@pytest.fixture
async def page(tmp_path, fake_openai) -> AsyncIterator[Page]:
    AsMe.calls.clear()
    fake_openai.handler = calling("my_name")
    settings = load_settings(
        llm_base_url=fake_openai.base_url,
        llm_model="fake-model",
        database_url=f"sqlite+aiosqlite:///{tmp_path}/dev.db",
        larkgate_claim_lease_seconds=2.0,
        larkgate_shutdown_grace_seconds=2.0,
    )
    async with (
        Sandbox(
            settings,
            port=0,
            connectors=ConnectorsConfig({"asme": {}}, explicit=True),
            connector_classes={"asme": AsMe},
        ) as sandbox,
        aiohttp.ClientSession() as session,
    ):
        assert sandbox.bot_settings is not None
        assert sandbox.bot_settings.larkgate_public_url == sandbox.bot_url
        yield Page(sandbox.page_url, session)


def _authorisation(messages):
    return [m for m in cards(messages) if "Authorisation" in card_text(m)]


async def test_a_person_authorises_from_the_page_and_gets_the_answer(page):
    await page.send(ADMIN.key, "dm", "what is my name?")
    messages = await page.until(ADMIN.key, "dm", _authorisation)
    link = card_link(_authorisation(messages)[0]["card"])
    async with page.session.post(
        page.url + "/api/open", json={"user": ADMIN.key, "url": link}
    ) as resp:
        assert resp.status == 200
        opened = await resp.json()
    assert opened == {"status": 200, "title": "Authorised"}
    await page.until(ADMIN.key, "dm", lambda m: answered(m, ADMIN.name))


async def test_the_page_opens_only_the_emulators_links(page):
    async with page.session.post(
        page.url + "/api/open", json={"user": ADMIN.key, "url": "http://127.0.0.1:1/x"}
    ) as resp:
        assert resp.status == 400


def test_dev_settings_turn_per_user_authorisation_on_with_a_session_key():
    settings = load_settings(llm_base_url="http://127.0.0.1:1/v1", llm_model="m")
    dev = dev_settings(
        settings, domain="http://127.0.0.1:9", app_secret="s", token="t", key="k",
        bot_url="http://127.0.0.1:8",
    )  # fmt: skip
    config = dev.user_auth()
    assert config is not None and config.redirect_uri == "http://127.0.0.1:8/feishu/oauth/callback"
    mine = load_settings(llm_base_url="x", llm_model="m", larkgate_token_key=config.token_key)
    kept = dev_settings(mine, domain="d", app_secret="s", token="t", key="k", bot_url="u")
    assert kept.larkgate_token_key.get_secret_value() == config.token_key
