"""FEISHU_EVENT_MODE=ws end to end: the real app receives over Feishu's long connection.

One fake domain serves both the OpenAPI (replies, cards) and the long-connection gateway
(``/callback/ws/endpoint`` and its WebSocket), as Feishu's domain does.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.app import LONG_CONNECTION
from bot.cli import main

from e2e.harness import BOT_OPEN_ID, VERIFICATION_TOKEN, Bot, running_bot, settings_for
from fakes.feishu_push import card_action_event, message_event
from fakes.feishu_server import FakeFeishu
from fakes.feishu_ws import FakeLongConnection
from support.waiting import wait_until

ADMIN = "ou_admin"
FAST = {"ReconnectCount": -1, "ReconnectInterval": 0.5, "ReconnectNonce": 0.05, "PingInterval": 1}


@pytest.fixture
def gateway() -> FakeLongConnection:
    return FakeLongConnection("cli_test", "secret", client_config=FAST)


@pytest.fixture
async def feishu(gateway) -> AsyncIterator[FakeFeishu]:
    """The e2e fake Feishu, with the long-connection gateway on the same domain."""
    fake = FakeFeishu(gateway.app_id, gateway.app_secret, bot_open_id=BOT_OPEN_ID)
    fake.add_routes(gateway.routes(), public=True)
    async with fake:
        yield fake


@pytest.fixture
async def ws_bot(tmp_path, feishu, llm_server, gateway) -> AsyncIterator[Bot]:
    settings = settings_for(
        tmp_path, feishu, llm_server, feishu_event_mode="ws", larkgate_admins=ADMIN
    )
    async with running_bot(settings, feishu, llm_server) as bot:
        await gateway.wait_connections(1)
        yield bot


async def healthz(bot: Bot) -> tuple[int, dict[str, Any]]:
    async with bot.session.get(bot.url + "/healthz") as response:
        return response.status, await response.json()


async def test_a_message_over_the_long_connection_is_answered_once(ws_bot, gateway):
    envelope = message_event(
        message_id="om_ws",
        chat_id="oc_dm",
        text="hello over ws",
        verification_token=VERIFICATION_TOKEN,
    )
    # Pushed twice, as Feishu redelivers (e.g. after a reconnect): one claim, one reply.
    first = await gateway.push_event(envelope)
    again = await gateway.push_event(envelope)
    for frame_id in (first, again):
        answer = await gateway.response_to(frame_id)
        assert answer.code == 200
        assert int(answer.headers["biz_rt"]) < 1000  # recorded and acknowledged, not run
    assert "Answer to: hello over ws" in await ws_bot.reply("om_ws")
    await ws_bot.settle()
    late = await gateway.push_event(envelope)
    assert (await gateway.response_to(late)).code == 200
    await ws_bot.settle()
    (reply,) = ws_bot.replies_to("om_ws")
    assert reply.reply_to == "om_ws"
    assert len(ws_bot.llm_server.requests) == 1  # one streamed call: its final reply
    assert (await ws_bot.services.ledger.get("om_ws")).state == "done"


async def test_a_card_click_over_the_long_connection_gets_its_toast(ws_bot, gateway):
    # The toggle of the admin card as the bot renders it now (sealed, at the mode's version).
    governance = ws_bot.services.governance
    card = governance.admin.card(await governance.org.read_only())
    [toggle] = [e for e in card["body"]["elements"] if e.get("tag") == "button"]
    read_only_on = toggle["behaviors"][0]["value"]

    def click(by: str) -> dict[str, Any]:
        return card_action_event(
            verification_token=VERIFICATION_TOKEN,
            value=read_only_on,
            operator_open_id=by,
            open_chat_id="oc_ops",
        )

    stranger = await gateway.response_to(await gateway.push_event(click("ou_user")))
    assert stranger.code == 200
    assert stranger.data["toast"]["type"] == "error" and "card" not in stranger.data
    admin = await gateway.response_to(await gateway.push_event(click(ADMIN)))
    assert admin.code == 200
    assert admin.data["toast"]["type"] == "success"
    assert admin.data["card"]["type"] == "raw"
    assert (await ws_bot.services.governance.org.read_only()).on


async def test_healthz_shows_the_long_connection_through_a_reconnect(ws_bot, gateway):
    status, body = await healthz(ws_bot)
    assert status == 200 and body["event_mode"] == "ws"
    assert body["long_connection"]["state"] == "connected"
    assert body["long_connection"]["reconnects"] == 0
    await gateway.drop()
    # Briefly down is still healthy (503 only after 60 s without a connection).
    status, body = await healthz(ws_bot)
    assert status == 200
    await gateway.wait_connections(2)
    connection = ws_bot.app[LONG_CONNECTION]
    await wait_until(lambda: connection.health.state == "connected")
    status, body = await healthz(ws_bot)
    assert status == 200
    assert body["long_connection"]["reconnects"] == 1
    assert "closed by the server" in body["long_connection"]["last_error"]
    async with ws_bot.session.get(ws_bot.url + "/metrics") as response:
        exposition = await response.text()
    assert 'larkgate_long_connection_state{state="connected"} 1.0' in exposition
    envelope = message_event(
        message_id="om_after",
        chat_id="oc_dm",
        text="still there?",
        verification_token=VERIFICATION_TOKEN,
    )
    assert (await gateway.response_to(await gateway.push_event(envelope))).code == 200
    assert "Answer to: still there?" in await ws_bot.reply("om_after")


async def test_webhook_mode_has_no_long_connection(bot, gateway):
    status, body = await healthz(bot)
    assert status == 200 and body["event_mode"] == "webhook"
    assert "long_connection" not in body
    assert not gateway.endpoint_requests


def test_serve_in_ws_mode_needs_no_verification_token(monkeypatch, tmp_path, capsys):
    for name in list(os.environ):
        if name.startswith(("FEISHU_", "LLM_", "LARKGATE_", "DATABASE_URL")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    assert main(["serve", "--mode", "ws"]) == 2
    err = capsys.readouterr().err
    assert "FEISHU_APP_ID" in err and "FEISHU_VERIFICATION_TOKEN" not in err
    # The flag wins over FEISHU_EVENT_MODE.
    monkeypatch.setenv("FEISHU_EVENT_MODE", "ws")
    assert main(["serve", "--mode", "webhook"]) == 2
    assert "FEISHU_VERIFICATION_TOKEN" in capsys.readouterr().err
