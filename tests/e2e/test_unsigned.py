"""Unsigned mode: webhook pushes without an Encrypt Key carry no signature and no signed
timestamp, so the bot refuses to start that way unless told to, warns everywhere when it
is, and still refuses a plaintext push older than the replay window."""

from __future__ import annotations

import time

import pytest

from bot.app import create_app
from bot.checks import run_checks
from bot.config import SettingsError
from bot.store import OrgSettingsStore

from e2e.harness import VERIFICATION_TOKEN, running_bot, settings_for
from fakes.feishu_push import card_action_event, message_event, plain_request

ADMIN = "ou_admin"


def unsigned(tmp_path, feishu, llm_server, **values):
    return settings_for(tmp_path, feishu, llm_server, feishu_encrypt_key="", **values)


async def healthz(bot) -> tuple[int, dict]:
    async with bot.session.get(bot.url + "/healthz") as response:
        return response.status, await response.json()


def test_webhook_mode_without_an_encrypt_key_refuses_to_start(tmp_path, feishu, llm_server):
    with pytest.raises(SettingsError) as refused:
        create_app(unsigned(tmp_path, feishu, llm_server))
    assert "FEISHU_ENCRYPT_KEY" in str(refused.value)
    assert "LARKGATE_ALLOW_UNSIGNED_EVENTS" in str(refused.value)
    # The long connection needs no key: it is authenticated by the app secret.
    create_app(unsigned(tmp_path, feishu, llm_server, feishu_event_mode="ws"))


async def test_allowed_unsigned_mode_warns_at_start_in_check_and_on_healthz(
    tmp_path, feishu, llm_server, caplog
):
    settings = unsigned(tmp_path, feishu, llm_server, larkgate_allow_unsigned_events=True)
    async with running_bot(settings, feishu, llm_server) as bot:
        status, health = await healthz(bot)
        assert status == 200
    assert any("unsigned events accepted" in w for w in health["warnings"])
    assert any("unsigned events accepted" in r.getMessage() for r in caplog.records)
    signing = {r.name: r for r in await run_checks(settings)}["event signing"]
    assert signing.ok and signing.warn and "unsigned" in signing.detail


async def test_a_month_old_plaintext_toggle_is_refused_even_when_unsigned_is_allowed(
    tmp_path, feishu, llm_server
):
    settings = unsigned(
        tmp_path, feishu, llm_server, larkgate_allow_unsigned_events=True, larkgate_admins=ADMIN
    )
    async with running_bot(settings, feishu, llm_server) as bot:
        governance = bot.services.governance
        card = governance.admin.card(await governance.org.read_only())
        [toggle] = [e for e in card["body"]["elements"] if e.get("tag") == "button"]
        value = toggle["behaviors"][0]["value"]
        month_ago_us = int((time.time() - 30 * 86_400) * 1_000_000)
        old = card_action_event(
            verification_token=VERIFICATION_TOKEN,
            value=value,
            operator_open_id=ADMIN,
            open_chat_id="oc_ops",
            create_time_us=month_ago_us,
        )
        status, answer = await bot.post("/feishu/card", *plain_request(old))
        assert status == 401 and "create_time" in answer["msg"]
        assert not (await OrgSettingsStore(bot.services.database).read_only()).on
        # Without any create_time it is refused too; a current one is accepted.
        undated = card_action_event(
            verification_token=VERIFICATION_TOKEN, value=value, operator_open_id=ADMIN
        )
        del undated["header"]["create_time"]
        assert (await bot.post("/feishu/card", *plain_request(undated)))[0] == 400
        stale_message = message_event(
            message_id="om_old",
            chat_id="oc_dm",
            verification_token=VERIFICATION_TOKEN,
            text="hello",
            create_time_ms=int((time.time() - 30 * 86_400) * 1000),
        )
        stale_message["header"]["create_time"] = str(int((time.time() - 30 * 86_400) * 1000))
        assert (await bot.post("/feishu/events", *plain_request(stale_message)))[0] == 401
        current = card_action_event(
            verification_token=VERIFICATION_TOKEN,
            value=value,
            operator_open_id=ADMIN,
            open_chat_id="oc_ops",
        )
        status, answer = await bot.post("/feishu/card", *plain_request(current))
        assert status == 200 and answer["toast"]["type"] == "success"
        assert (await OrgSettingsStore(bot.services.database).read_only()).on
