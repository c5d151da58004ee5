"""From a signed, encrypted Feishu push to exactly one reply; and every way to refuse."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest

from e2e.harness import BOT_OPEN_ID, ENCRYPT_KEY, VERIFICATION_TOKEN, running_bot, settings_for
from fakes.feishu_push import (
    card_action_event,
    encrypted_body,
    message_event,
    plain_request,
    sign,
    signed_request,
    url_verification,
)


async def test_url_verification_plain_and_encrypted(bot):
    body, headers = plain_request(url_verification("c-plain", VERIFICATION_TOKEN))
    assert await bot.post("/feishu/events", body, headers) == (200, {"challenge": "c-plain"})
    # Encrypted and unsigned, as Feishu sends it once an Encrypt Key is set.
    body = encrypted_body(url_verification("c-enc", VERIFICATION_TOKEN), ENCRYPT_KEY)
    status, answer = await bot.post("/feishu/events", body, {"Content-Type": "application/json"})
    assert (status, answer) == (200, {"challenge": "c-enc"})
    body, headers = plain_request(url_verification("c-bad", "not-the-token"))
    status, _ = await bot.post("/feishu/events", body, headers)
    assert status == 401


async def test_a_direct_message_gets_one_reply(bot):
    assert await bot.say("om_1", "hello bot") == 200
    text = await bot.reply("om_1")
    assert "Answer to: hello bot" in text
    (reply,) = bot.replies_to("om_1")
    assert reply.msg_type == "interactive"
    # The live card went up at once, before the model said anything, and was finished.
    assert reply.card_id is not None
    assert bot.feishu.cards[reply.card_id].streaming_mode is False
    assert reply.uuid and reply.uuid.startswith("lg-")
    assert not reply.reply_in_thread
    await bot.settle()
    entry = await bot.services.ledger.get("om_1")
    assert entry.state == "done"


async def test_redeliveries_and_racing_duplicates_are_answered_once(bot):
    envelope = message_event(
        message_id="om_dup",
        chat_id="oc_dm",
        text="once please",
        verification_token=VERIFICATION_TOKEN,
    )
    # Five deliveries racing each other, each freshly signed like Feishu's retries.
    statuses = await asyncio.gather(*(bot.push(envelope) for _ in range(5)))
    assert statuses == [200] * 5
    await bot.reply("om_dup")
    await bot.settle()
    # Redelivered later (Feishu retries after 15 s, 5 min, ...).
    assert await bot.push(envelope) == 200
    # The delivery was dropped or taken in before its 200; taken in, it is in flight.
    await bot.settle()
    assert len(bot.replies_to("om_dup")) == 1
    assert len(bot.llm_server.requests) == 1  # one streamed call: its final reply


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("bad signature", 401),
        ("missing signature", 401),
        ("replayed timestamp", 401),
        ("wrong token", 401),
        ("not json", 400),
        ("undecryptable", 400),
        ("schema 1.0", 401),
    ],
)
async def test_forged_or_broken_requests_are_refused_and_nothing_runs(bot, case, status, caplog):
    envelope = message_event(
        message_id=f"om_{case}", chat_id="oc_dm", text="x", verification_token=VERIFICATION_TOKEN
    )
    body, headers = signed_request(envelope, encrypt_key=ENCRYPT_KEY)
    if case == "bad signature":
        headers["X-Lark-Signature"] = "0" * 64
    elif case == "missing signature":
        del headers["X-Lark-Signature"]
    elif case == "replayed timestamp":
        body, headers = signed_request(
            envelope, encrypt_key=ENCRYPT_KEY, timestamp=int(time.time()) - 3600
        )
    elif case == "wrong token":
        envelope["header"]["token"] = "forged"
        body, headers = signed_request(envelope, encrypt_key=ENCRYPT_KEY)
    elif case == "not json":
        body = b"\x00\xffgarbage"
        headers = _resign(headers, body)
    elif case == "undecryptable":
        body = json.dumps({"encrypt": "bm90IHJlYWxseSBlbmNyeXB0ZWQ="}).encode()
        headers = _resign(headers, body)
    elif case == "schema 1.0":
        legacy = {"uuid": "u1", "token": "forged", "type": "event_callback", "event": {}}
        body, headers = signed_request(legacy, encrypt_key=ENCRYPT_KEY)
    got, answer = await bot.post("/feishu/events", body, headers)
    assert got == status
    assert answer["msg"]
    assert ENCRYPT_KEY not in caplog.text and VERIFICATION_TOKEN not in caplog.text
    await bot.settle()  # refused before anything was taken in: nothing is in flight
    assert bot.feishu.sent == []
    assert await bot.services.ledger.get(f"om_{case}") is None
    # The server keeps going.
    assert await bot.say("om_after", "still there?") == 200
    await bot.reply("om_after")


def _resign(headers, body):
    headers = dict(headers)
    ts, nonce = headers["X-Lark-Request-Timestamp"], headers["X-Lark-Request-Nonce"]
    headers["X-Lark-Signature"] = sign(ts, nonce, ENCRYPT_KEY, body)
    return headers


async def test_stale_messages_are_dropped(bot, caplog):
    caplog.set_level(logging.INFO, logger="bot")
    old = int((time.time() - 3600) * 1000)
    assert await bot.say("om_old", "from an hour ago", create_time_ms=old) == 200
    await bot.settle()
    assert bot.replies_to("om_old") == []
    assert "stale" in caplog.text


async def test_group_policy_mentions_and_bots(bot):
    group = {"chat_type": "group", "chat_id": "oc_team"}
    mention_bot = [("@_user_1", BOT_OPEN_ID, "larkgate")]
    mention_other = [("@_user_1", "ou_carol", "Carol")]
    await bot.say("om_plain", "no mention", **group)
    await bot.say("om_other", "@_user_1 for carol", mentions=mention_other, **group)
    await bot.say("om_fromabot", "@_user_1 hi", mentions=mention_bot, sender_type="app", **group)
    await bot.say("om_mention", "@_user_1 what is up", mentions=mention_bot, **group)
    text = await bot.reply("om_mention")
    assert "Answer to: what is up" in text  # the bot's own mention is not part of the question
    await bot.settle()
    for ignored in ("om_plain", "om_other", "om_fromabot"):
        assert bot.replies_to(ignored) == []
        assert (await bot.services.ledger.get(ignored)).state == "dropped"


async def test_group_allowlist_and_no_mention_groups(tmp_path, feishu, llm_server):
    settings = settings_for(
        tmp_path,
        feishu,
        llm_server,
        larkgate_group_allowlist="oc_open",
        larkgate_group_require_mention=False,
    )
    async with running_bot(settings, feishu, llm_server) as bot:
        await bot.say("om_a", "anyone?", chat_type="group", chat_id="oc_open")
        await bot.say("om_b", "anyone?", chat_type="group", chat_id="oc_closed")
        await bot.reply("om_a")
        await bot.settle()
        assert bot.replies_to("om_b") == []


async def test_messages_from_a_topic_are_answered_in_it(bot):
    await bot.say(
        "om_t2", "in a topic", chat_type="group", chat_id="oc_topics", root_id="om_t1",
        thread_id="omt_1", mentions=[("@_user_1", BOT_OPEN_ID, "larkgate")],
    )  # fmt: skip
    await bot.reply("om_t2")
    assert bot.replies_to("om_t2")[0].reply_in_thread is True


async def test_other_event_types_are_acknowledged_and_ignored(bot):
    envelope = message_event(
        message_id="om_r", chat_id="oc_dm", text="x", verification_token=VERIFICATION_TOKEN
    )
    envelope["header"]["event_type"] = "im.message.reaction.created_v1"
    assert await bot.push(envelope) == 200
    await bot.settle()
    assert bot.feishu.sent == []


async def test_card_callbacks_are_verified_and_answered(bot):
    envelope = card_action_event(verification_token=VERIFICATION_TOKEN, value={"action": "noop"})
    body, headers = signed_request(envelope, encrypt_key=ENCRYPT_KEY)
    status, answer = await bot.post("/feishu/card", body, headers)
    assert status == 200 and "toast" in answer
    headers["X-Lark-Signature"] = "f" * 64
    status, _ = await bot.post("/feishu/card", body, headers)
    assert status == 401


async def test_healthz_reports_the_database_and_identity(bot):
    await bot.say("om_h", "hi")
    await bot.reply("om_h")
    async with bot.session.get(bot.url + "/healthz") as resp:
        body = await resp.json()
    assert resp.status == 200
    assert body["database"] == "ok"
    assert body["bot_open_id"] == BOT_OPEN_ID
