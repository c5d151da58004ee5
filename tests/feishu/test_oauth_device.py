"""The device authorization grant through the real HTTP fake: a code, polling until the
person answers, and every way it ends."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from bot.feishu import FeishuClient, FeishuError
from bot.feishu.oauth import FeishuOAuth
from bot.feishu.oauth_device import (
    DeviceFlowEnded,
    DevicePending,
    FeishuDeviceFlow,
    _device_answer,
    _flat,
)
from bot.oauth_tokens import UserTokens
from bot.sandbox.emulator import device as fake_device

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        yield server


@pytest.fixture
async def flow(fake: FakeFeishu) -> AsyncIterator[FeishuDeviceFlow]:
    async with FeishuClient(feishu_config(fake), timeout=5.0) as client:
        oauth = FeishuOAuth(client, feishu_config(fake))
        yield FeishuDeviceFlow(oauth, domain=fake.domain)


async def test_start_asks_for_a_code_the_way_larksuites_plugin_does(fake, flow):
    started = await flow.start(["task:task:read"])
    (call,) = [r for r in fake.requests if r.path == fake_device.DEVICE_AUTHORIZATION_PATH]
    assert call.headers["Content-Type"] == "application/x-www-form-urlencoded"
    basic = base64.b64encode(f"{fake.app_id}:{fake.app_secret}".encode()).decode()
    assert call.headers["Authorization"] == f"Basic {basic}"
    assert call.body.decode() == "client_id=cli_test&scope=task%3Atask%3Aread+offline_access"
    assert started.verification_url.endswith(f"?user_code={started.user_code}")
    assert (started.expires_in, started.interval) == (240.0, 5.0)
    assert started.device_code not in repr(started)  # a bearer secret until redeemed


async def test_polling_waits_then_returns_the_consenting_persons_tokens(fake, flow):
    started = await flow.start(["task:task:read"])
    assert await flow.poll(started.device_code, now=time.time()) == DevicePending()
    # The person opens the page as a browser would.
    async with (
        aiohttp.ClientSession() as session,
        session.get(started.verification_url + "&as_user=ou_fake_bob") as page,
    ):
        assert page.status == 200
    tokens = await flow.poll(started.device_code, now=time.time())
    assert isinstance(tokens, UserTokens)
    assert tokens.open_id == "ou_fake_bob"  # the caller checks it is who asked
    assert tokens.scopes == {"task:task:read", "offline_access"}
    with pytest.raises(DeviceFlowEnded) as spent:  # one redemption per code
        await flow.poll(started.device_code, now=time.time())
    assert spent.value.reason == "expired"


async def test_a_refusal_and_an_expiry_end_the_flow(fake, flow):
    refused = await flow.start([])
    fake.deny_device(refused.user_code)
    with pytest.raises(DeviceFlowEnded) as denied:
        await flow.poll(refused.device_code, now=time.time())
    assert denied.value.reason == "denied"
    fake.device_ttl = 0.0
    lapsed = await flow.start([])
    with pytest.raises(DeviceFlowEnded) as expired:
        await flow.poll(lapsed.device_code, now=time.time())
    assert expired.value.reason == "expired"


async def test_slow_down_is_reported(fake, flow):
    fake.device_enforce_interval = True
    started = await flow.start([])
    assert await flow.poll(started.device_code, now=time.time()) == DevicePending()
    assert await flow.poll(started.device_code, now=time.time()) == DevicePending(slow_down=True)


async def test_a_wrong_app_secret_is_a_feishu_error(fake, flow):
    fake.app_secret = "rotated"
    with pytest.raises(FeishuError, match="client authentication failed"):
        await flow.start([])


@pytest.mark.parametrize(
    ("answer", "read"),
    [
        ({"data": {"device_code": "d", "user_code": "u"}}, {"code": 0, "device_code": "d"}),
        ({"code": 0, "device_code": "d"}, {"code": 0, "device_code": "d"}),
        ({"error": "invalid_scope"}, {"code": 20001, "msg": "invalid_scope"}),
        ({"code": 20068, "error": "x", "error_description": "why"}, {"code": 20068, "msg": "why"}),
    ],
)
def test_accounts_answers_with_or_without_a_code_or_data(answer, read):
    flat = json.loads(_flat(json.dumps(answer).encode()))
    assert {k: flat[k] for k in read} == read


@pytest.mark.parametrize("content", [b"", b"<html>502</html>", b"[1]", b'{"error": {"nested": 1}}'])
def test_odd_answers_are_left_for_the_envelope_to_refuse(content):
    assert _device_answer(content) in (content, _flat(content))
