"""``larkgate dev``: the real bot, the Feishu emulator and the chat page, driven through
the page's own API the way the browser does (Playwright tests are a later step)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from bot.cli import main
from bot.config import SettingsError, load_settings
from bot.sandbox.people import ADMIN, GROUP_CHAT_ID, USER
from bot.sandbox.runner import DEV_DATABASE_URL, dev_settings

from support.cards import button_values
from support.env import clear_settings
from support.sandbox import answered, card_text, cards


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    clear_settings(monkeypatch, tmp_path)


def buttons(message: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Button label -> its callback value, as the page finds them."""
    return button_values(message["card"])


async def test_a_dm_gets_the_streamed_answer(sandbox, page):
    sent = await page.send(USER.key, "dm", "hello there")
    assert sent["chat_id"] == USER.dm_chat_id()
    seen: list[list[dict[str, Any]]] = []
    messages = await page.until(USER.key, "dm", lambda ms: answered(ms, "All done here"), seen)
    # The page saw the answer grow while the card was still streaming.
    partial = [
        card_text(m)
        for ms in seen
        for m in cards(ms)
        if m["streaming"] and "All done" in card_text(m)
    ]
    assert partial and not any("nothing to do." in text for text in partial[:1])
    assert messages[0]["id"] == sent["message_id"] and messages[0]["text"] == "hello there"
    assert messages[0]["sender"] == USER.name and not messages[0]["from_bot"]
    (reply,) = cards(messages)
    assert reply["reply_to"] == sent["message_id"]
    assert "All done here: nothing to do." in card_text(reply)
    # It streamed: a CardKit card entity, its answer written piece by piece, then closed.
    message = sandbox.emulator.message_by_id[reply["id"]]
    entity = sandbox.emulator.cards[message.card_id]
    assert sum(op.op == "content" and op.code == 0 for op in entity.timeline) >= 2
    assert not entity.streaming_mode
    # The admin's DM is another chat.
    assert (await page.transcript(ADMIN.key, "dm"))["messages"] == []


async def test_a_write_tool_waits_for_the_admin_to_press_approve(sandbox, page, deployer):
    sent = await page.send(USER.key, "group", "please deploy web")
    messages = await page.until(
        ADMIN.key, "group", lambda ms: any("Approve" in buttons(m) for m in cards(ms))
    )
    assert messages[0]["text"] == "@larkgate please deploy web"
    (approval,) = [m for m in cards(messages) if "Approve" in buttons(m)]
    assert approval["reply_to"] == sent["message_id"]
    assert "deploy" in card_text(approval)
    assert deployer.runs == []

    # Bob asked, but only the admins may approve (LARKGATE_ADMINS holds the sandbox admin).
    refused = await page.click(USER.key, approval["id"], buttons(approval)["Approve"])
    assert refused["status"] == 200 and refused["toast"]["type"] in ("warning", "error")
    assert deployer.runs == []

    clicked = await page.click(ADMIN.key, approval["id"], buttons(approval)["Approve"])
    assert clicked["status"] == 200 and clicked["toast"]["type"] == "success", clicked
    messages = await page.until(USER.key, "group", lambda ms: answered(ms, "web deployed"))
    assert deployer.runs == ["web"]
    (decided,) = [m for m in cards(messages) if m["id"] == approval["id"]]
    assert buttons(decided) == {} and "Approved" in card_text(decided)


async def test_readonly_on_from_the_admin_just_by_typing_it(sandbox, page, llm_server):
    await page.send(USER.key, "dm", "/readonly on")
    await page.until(USER.key, "dm", lambda ms: any(m["from_bot"] for m in ms))
    await page.send(ADMIN.key, "dm", "/readonly on")
    messages = await page.until(ADMIN.key, "dm", lambda ms: any(m["from_bot"] for m in ms))
    reply = next(m for m in messages if m["from_bot"])
    shown = reply["text"] or card_text(reply)
    assert "read-only" in shown.lower() and "on" in shown.lower(), shown
    user_reply = next(
        m for m in (await page.transcript(USER.key, "dm"))["messages"] if m["from_bot"]
    )
    assert "admin" in (user_reply["text"] or card_text(user_reply)).lower()

    # Read-only: the write tool is not offered to the model any more.
    await page.send(USER.key, "group", "deploy web now")
    await page.until(USER.key, "group", lambda ms: answered(ms, "nothing to do"))
    offered = {t["function"]["name"] for t in llm_server.requests[-2].body.get("tools", [])}
    assert "deploy" not in offered


async def test_the_page_is_served_and_calls_only_existing_endpoints(sandbox, page):
    async with page.session.get(page.url + "/") as resp:
        assert resp.status == 200 and resp.content_type == "text/html"
        html = await resp.text()
    assert "<script>" in html and "larkgate sandbox" in html
    called = set(re.findall(r"""["'](/api/[a-z_/]*)["']""", html))
    assert called == {
        "/api/config",
        "/api/transcript",
        "/api/messages",
        "/api/click",
        "/api/attachments",
        "/api/open",
        "/api/setup",
    }
    async with page.session.get(page.url + "/api/config") as resp:
        config = await resp.json()
    assert {p["key"] for p in config["people"]} == {ADMIN.key, USER.key}
    assert config["bot"]["model"] == "fake-model"
    assert [c["key"] for c in config["chats"]] == ["dm", "group"]
    assert config["chats"][1]["chat_id"] == GROUP_CHAT_ID
    assert config["upload_limit"] == 20 * 1024 * 1024
    # They exist, and refuse a body that is not JSON (or, for attachments, not a form).
    for path in ("/api/messages", "/api/click", "/api/attachments", "/api/open", "/api/setup"):
        async with page.session.post(page.url + path, data=b"nope") as resp:
            assert resp.status == 400
    async with page.session.get(page.url + "/api/transcript?user=nobody") as resp:
        assert resp.status == 400


def test_dev_settings_point_feishu_at_the_emulator(tmp_path):
    settings = load_settings(llm_base_url="http://127.0.0.1:1/v1", llm_model="m")
    dev = dev_settings(settings, domain="http://127.0.0.1:9", app_secret="s", token="t", key="k")
    assert dev.feishu_domain == "http://127.0.0.1:9"
    assert dev.feishu_verification_token.get_secret_value() == "t"
    assert dev.feishu_encrypt_key.get_secret_value() == "k"
    assert dev.database_url == DEV_DATABASE_URL
    assert ADMIN.open_id in dev.larkgate_admins and dev.feishu_event_mode == "webhook"
    assert dev.missing_for_serve() == []
    chosen = load_settings(llm_base_url="x", llm_model="m", database_url="sqlite:///mine.db")
    mine = dev_settings(chosen, domain="http://127.0.0.1:9", app_secret="s", token="t", key="k")
    assert mine.database_url == "sqlite:///mine.db"
    with pytest.raises(SettingsError, match="LLM_BASE_URL"):
        dev_settings(load_settings(), domain="d", app_secret="s", token="t", key="k")


def test_larkgate_dev_without_a_model_says_what_is_missing(capsys):
    assert main(["dev"]) == 2
    err = capsys.readouterr().err
    assert "LLM_BASE_URL" in err and "LLM_MODEL" in err and "larkgate dev" in err
