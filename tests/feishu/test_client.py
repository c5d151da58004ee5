"""FeishuClient against the fake Feishu server, through the real lark-oapi SDK."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import AsyncIterator

import pytest

from bot.config import FeishuConfig
from bot.feishu import (
    BotInfo,
    FeishuCardInvalid,
    FeishuClient,
    FeishuEditWindowClosed,
    FeishuError,
    FeishuMessageGone,
    FeishuRateLimited,
    FeishuScopeMissing,
    FeishuSequenceError,
    FeishuStreamingClosed,
    FeishuTokenInvalid,
    FeishuTooLarge,
    FeishuTransportError,
    TenantTokenManager,
)

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config
from support.waiting import wait_until

REPLY = r"/reply$"
TEXT = json.dumps({"text": "hello"})


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        yield server


@pytest.fixture
async def client(fake: FakeFeishu) -> AsyncIterator[FeishuClient]:
    async with FeishuClient(feishu_config(fake), timeout=5.0) as feishu:
        yield feishu


def bearer_tokens(fake: FakeFeishu) -> list[str]:
    return [
        r.headers["Authorization"].removeprefix("Bearer ")
        for r in fake.requests
        if "Authorization" in r.headers
    ]


# -- tokens -----------------------------------------------------------------------------


async def test_one_token_fetch_serves_many_concurrent_calls(fake, client):
    results = await asyncio.gather(
        *(client.send_message("chat_id", "oc_1", msg_type="text", content=TEXT) for _ in range(12))
    )

    assert fake.token_requests == 1
    assert len({m.message_id for m in results}) == 12
    assert len(set(bearer_tokens(fake))) == 1
    assert client.call_counts == {"auth.tenant_token": 1, "im.message.create": 12}
    token_request = fake.requests[0]
    assert token_request.json == {"app_id": "cli_test", "app_secret": "secret"}
    # The SDK never fetches a token on its own: it was not even given the secret.
    assert client.sdk.config.app_secret is None


async def test_token_is_refreshed_before_it_expires(fake):
    now = [1000.0]
    async with FeishuClient(feishu_config(fake), clock=lambda: now[0]) as client:
        await client.bot_info()
        now[0] += 7200 - 300 - 1  # still outside the 5-minute margin
        await client.bot_info()
        assert fake.token_requests == 1
        now[0] += 2  # inside it
        await client.bot_info()
        assert fake.token_requests == 2
        assert client.tokens.fetches == 2


async def test_revoked_token_is_refetched_once_and_the_call_retried(fake, client):
    await client.bot_info()
    fake.revoke_tokens()

    sent = await asyncio.gather(
        *(client.reply_message("om_user", msg_type="text", content=TEXT) for _ in range(4))
    )

    assert len(sent) == 4
    assert fake.token_requests == 2  # one refetch for the whole burst
    assert client.call_counts["im.message.reply"] == 8
    assert client.error_counts[("im.message.reply", 99991663)] == 4
    tokens = bearer_tokens(fake)
    assert tokens[0] != tokens[-1]


async def test_token_refused_twice_gives_up(fake, client):
    fake.fail("POST", REPLY, 99991663, times=2)

    with pytest.raises(FeishuTokenInvalid) as caught:
        await client.reply_message("om_user", msg_type="text", content=TEXT)

    assert caught.value.code == 99991663
    assert fake.token_requests == 2
    assert client.call_counts["im.message.reply"] == 2


async def test_bad_secret_is_a_clear_error_without_the_secret(fake, caplog):
    caplog.set_level(logging.DEBUG)
    wrong = "wrong-secret-7f3a9c"
    async with FeishuClient(feishu_config(fake, app_secret=wrong)) as client:
        with pytest.raises(FeishuError) as caught:
            await client.bot_info()

    error = caught.value
    assert type(error) is FeishuError
    assert error.code == 10014
    assert "FEISHU_APP_SECRET" in str(error)
    assert "app secret invalid" in str(error)
    assert wrong not in str(error)
    assert wrong not in repr(error.__cause__) + repr(error.__context__)
    assert wrong not in caplog.text
    assert client.error_counts[("auth.tenant_token", 10014)] == 1
    assert fake.count("GET", "/bot/v3/info") == 0


async def test_token_manager_single_flight_survives_a_cancelled_waiter():
    release = asyncio.Event()
    calls = 0

    async def fetch() -> tuple[str, float]:
        nonlocal calls
        calls += 1
        await release.wait()
        return f"t-{calls}", 7200

    tokens = TenantTokenManager(fetch)
    first = asyncio.create_task(tokens.get())
    second = asyncio.create_task(tokens.get())
    await wait_until(lambda: calls == 1)  # the fetch is under way, both waiting on it
    first.cancel()
    release.set()

    assert await second == "t-1"
    assert first.cancelled()
    assert calls == 1
    tokens.invalidate("t-old")  # not the current token: ignored
    assert await tokens.get() == "t-1"
    tokens.invalidate("t-1")
    assert await tokens.get() == "t-2"


async def test_token_manager_fetch_failure_reaches_every_waiter_then_retries():
    outcomes: list[Exception | tuple[str, float]] = [RuntimeError("down"), ("t-ok", 60)]

    async def fetch() -> tuple[str, float]:
        await asyncio.sleep(0.01)
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    tokens = TenantTokenManager(fetch)
    results = await asyncio.gather(tokens.get(), tokens.get(), return_exceptions=True)

    assert [type(r) for r in results] == [RuntimeError, RuntimeError]
    assert await tokens.get() == "t-ok"


async def test_token_fetch_does_not_block_the_event_loop(fake, client):
    fake.slow("POST", "tenant_access_token", 0.3)
    gaps: list[float] = []

    async def tick() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    try:
        # The fake runs on this very loop: a blocking fetch would deadlock, not just stall.
        info = await asyncio.wait_for(client.bot_info(), 3)
    finally:
        ticker.cancel()

    assert info.open_id == "ou_bot"
    assert len(gaps) >= 15
    assert max(gaps) < 0.15


# -- calls --------------------------------------------------------------------------------


async def test_bot_info(fake, client):
    assert await client.bot_info() == BotInfo(open_id="ou_bot", app_name="larkgate")
    request = fake.requests[-1]
    assert (request.method, request.path) == ("GET", "/open-apis/bot/v3/info")
    assert request.headers["Authorization"].startswith("Bearer t-")
    assert client.call_counts["bot.info"] == 1


async def test_reply_twice_with_one_uuid_makes_one_message(fake, client):
    fake.add_message("om_user", chat_id="oc_42", chat_type="group")

    first = await client.reply_message("om_user", msg_type="text", content=TEXT, uuid="u-1")
    again = await client.reply_message("om_user", msg_type="text", content=TEXT, uuid="u-1")

    assert first == again
    assert first.chat_id == "oc_42"
    assert first.root_id == "om_user"
    assert first.thread_id is None
    assert len(fake.sent) == 1
    message = fake.sent[0]
    assert (message.reply_to, message.uuid, message.content) == (
        "om_user",
        "u-1",
        {"text": "hello"},
    )
    assert [r.json["uuid"] for r in fake.requests if r.path.endswith("/reply")] == ["u-1", "u-1"]
    assert "reply_in_thread" not in fake.requests[-1].json


async def test_reply_in_thread_is_passed(fake, client):
    fake.add_message("om_root", chat_id="oc_42", chat_type="group")

    sent = await client.reply_message(
        "om_root", msg_type="text", content=TEXT, reply_in_thread=True
    )

    assert fake.requests[-1].json["reply_in_thread"] is True
    assert fake.sent[0].reply_in_thread is True
    assert sent.thread_id is not None and sent.thread_id.startswith("omt_")
    assert sent.root_id == "om_root"


async def test_send_and_patch_a_card(fake, client):
    card = {"schema": "2.0", "body": {"elements": [{"tag": "markdown", "content": "v1"}]}}
    sent = await client.send_message(
        "open_id", "ou_user", msg_type="interactive", content=json.dumps(card), uuid="c-1"
    )
    card["body"]["elements"][0]["content"] = "v2"
    await client.patch_message(sent.message_id, json.dumps(card))

    assert fake.requests[-2].query == {"receive_id_type": "open_id"}
    message = fake.message_by_id[sent.message_id]
    assert message.content["body"]["elements"][0]["content"] == "v2"
    assert message.history[0]["body"]["elements"][0]["content"] == "v1"
    assert client.call_counts["im.message.patch"] == 1


# -- errors -------------------------------------------------------------------------------

MAPPED = [
    (230020, FeishuRateLimited),
    (230025, FeishuTooLarge),
    (230099, FeishuCardInvalid),
    (11310, FeishuCardInvalid),
    (230011, FeishuMessageGone),
    (231003, FeishuMessageGone),
    (230110, FeishuMessageGone),
    (230031, FeishuEditWindowClosed),
    (300317, FeishuSequenceError),
    (300309, FeishuStreamingClosed),
    (200850, FeishuStreamingClosed),
    (123456, FeishuError),
]


async def test_each_error_code_raises_its_exception(fake, client):
    for code, expected in MAPPED:
        fake.fail("POST", REPLY, code)
        with pytest.raises(FeishuError) as caught:
            await client.reply_message("om_user", msg_type="text", content=TEXT)
        error = caught.value
        assert type(error) is expected, code
        assert (error.code, error.endpoint, error.http_status) == (code, "im.message.reply", 400)
        assert error.log_id is not None and error.log_id.startswith("fake-log-")
        assert client.error_counts[("im.message.reply", code)] == 1
    # Nothing was retried: one attempt per error, and no message was sent.
    assert client.call_counts["im.message.reply"] == len(MAPPED)
    assert fake.sent == []


async def test_missing_scope_lists_the_scopes(fake, client):
    fake.fail("POST", REPLY, 99991672)
    with pytest.raises(FeishuScopeMissing) as caught:
        await client.reply_message("om_user", msg_type="text", content=TEXT)
    assert caught.value.scopes == ("im:message", "im:message:send_as_bot")

    violations = [{"type": "action_scope_required", "subject": "im:chat:readonly"}]
    fake.fail(
        "GET", "bot/v3", 99991672, msg="Access denied.", error={"permission_violations": violations}
    )
    with pytest.raises(FeishuScopeMissing) as caught:
        await client.bot_info()
    assert caught.value.scopes == ("im:chat:readonly",)


async def test_http_429_is_rate_limited_with_retry_after(fake, client):
    fake.fail("POST", "/im/v1/messages$", 99991400, http_status=429)
    with pytest.raises(FeishuRateLimited) as caught:
        await client.send_message("chat_id", "oc_1", msg_type="text", content=TEXT)
    assert caught.value.retry_after == 1.0
    assert caught.value.retryable
    assert caught.value.http_status == 429


async def test_gateway_html_page_is_a_transport_error(fake):
    page = "<html><body><h1>502 Bad Gateway</h1></body></html>"
    async with FeishuClient(feishu_config(fake)) as client:
        sent = await client.reply_message("om_user", msg_type="text", content=TEXT)
        assert sent.message_id in fake.message_by_id

        fake.fail("POST", REPLY, 502, http_status=502, raw_body=page)
        with pytest.raises(FeishuTransportError) as caught:
            await client.reply_message("om_user", msg_type="text", content=TEXT)
        assert caught.value.retryable and caught.value.code is None

        fake.fail("GET", "bot/v3", 502, http_status=502, raw_body=page)
        with pytest.raises(FeishuTransportError) as caught:
            await client.bot_info()
        assert caught.value.http_status == 502

    assert client.error_counts[("im.message.reply", None)] == 1
    assert client.error_counts[("bot.info", None)] == 1


async def test_timeout_and_refused_connection_are_transport_errors(fake):
    fake.slow("POST", REPLY, 2.0)
    async with FeishuClient(feishu_config(fake), timeout=0.2) as client:
        with pytest.raises(FeishuTransportError):
            await client.reply_message("om_user", msg_type="text", content=TEXT)

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = FeishuConfig("cli_test", "secret", "vt", "ek", f"http://127.0.0.1:{port}")
    async with FeishuClient(config, timeout=1.0) as client:
        with pytest.raises(FeishuTransportError) as caught:
            await client.bot_info()
    assert caught.value.endpoint == "auth.tenant_token"
    assert client.call_counts == {"auth.tenant_token": 1}


async def test_logs_carry_code_and_log_id_but_no_secret_or_token(fake, caplog):
    caplog.set_level(logging.DEBUG)
    async with FeishuClient(feishu_config(fake)) as client:
        logging.getLogger("Lark").setLevel(logging.DEBUG)  # the SDK's own lines too
        assert logging.getLogger("Lark").handlers == []
        await client.bot_info()
        fake.revoke_tokens()
        await client.reply_message("om_user", msg_type="text", content=TEXT)
        fake.fail("POST", REPLY, 230020)
        with pytest.raises(FeishuRateLimited):
            await client.reply_message("om_user", msg_type="text", content=TEXT)

    assert "code=230020" in caplog.text
    assert "log_id=fake-log-" in caplog.text
    secrets_seen = {fake.app_secret, *bearer_tokens(fake)}
    assert len(secrets_seen) == 3  # the secret and two tokens
    for secret in secrets_seen:
        assert secret not in caplog.text


async def test_one_pooled_connection_serves_every_call(fake):
    async with FeishuClient(feishu_config(fake)) as client:
        for _ in range(3):
            await client.bot_info()
    peers = {r.peer for r in fake.requests}
    assert len(fake.requests) == 4
    assert len(peers) == 1
    assert all(r.headers["User-Agent"].startswith("oapi-sdk-python/") for r in fake.requests)
