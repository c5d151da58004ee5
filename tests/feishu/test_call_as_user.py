"""``FeishuClient.call_as_user``: one request with a person's user token, through the
same plumbing as the tenant calls (counts, error mapping), never retried, and sent with
the user token even where the endpoint also takes the tenant token."""

from __future__ import annotations

from collections.abc import AsyncIterator

import lark_oapi as lark
import pytest
from lark_oapi.api.authen.v1 import GetUserInfoRequest
from lark_oapi.api.calendar.v4 import PrimaryCalendarRequest
from lark_oapi.api.task.v2 import CreateTaskRequest, InputTask

from bot.feishu import FeishuClient, FeishuTokenInvalid
from bot.feishu.errors import FeishuUserScopeMissing

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config
from support.user_tokens import EmulatorUserTokens


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        yield server


@pytest.fixture
async def client(fake: FakeFeishu) -> AsyncIterator[FeishuClient]:
    async with FeishuClient(feishu_config(fake), timeout=5.0) as feishu:
        yield feishu


async def test_the_user_token_goes_even_where_a_tenant_token_would_do(fake, client) -> None:
    tokens = await EmulatorUserTokens(fake, client, "ou_fake_bob").consent(
        ["calendar:calendar:read"]
    )
    # PrimaryCalendarRequest takes both kinds: the person's own calendar comes back.
    body = await client.call_as_user(
        "calendar.primary", PrimaryCalendarRequest.builder().build(), tokens.access_token
    )
    (entry,) = body["data"]["calendars"]
    assert entry["user_id"] == "ou_fake_bob"
    sent = [r for r in fake.requests if r.path.endswith("/calendars/primary")]
    assert [r.headers["Authorization"] for r in sent] == [f"Bearer {tokens.access_token}"]
    assert fake.token_requests == 0  # no tenant token was fetched for it
    info = await client.call_as_user(
        "authen.user_info", GetUserInfoRequest.builder().build(), tokens.access_token
    )
    assert info["data"]["open_id"] == "ou_fake_bob"
    assert client.call_counts["calendar.primary"] == 1


async def test_refusals_are_raised_once_for_the_caller_to_resolve(fake, client) -> None:
    tokens = await EmulatorUserTokens(fake, client, "ou_fake_alice").consent(["task:task:read"])
    create = CreateTaskRequest.builder().request_body(InputTask({"summary": "x"})).build()
    with pytest.raises(FeishuUserScopeMissing) as missing:
        await client.call_as_user("task.task.create", create, tokens.access_token)
    assert missing.value.scopes == ("task:task:write", "task:task:writeonly")
    fake.expire_user_tokens("ou_fake_alice")
    asked = client.call_counts["authen.user_info"]  # the consent asked once already
    with pytest.raises(FeishuTokenInvalid) as expired:
        await client.call_as_user(
            "authen.user_info", GetUserInfoRequest.builder().build(), tokens.access_token
        )
    assert expired.value.code == 99991677
    # Each refusal was one attempt: nothing here retries a user call.
    assert client.call_counts["task.task.create"] == 1
    assert client.call_counts["authen.user_info"] == asked + 1


async def test_a_request_that_takes_only_the_tenant_token_never_carries_a_user_one(
    fake, client
) -> None:
    tokens = await EmulatorUserTokens(fake, client, "ou_fake_alice").consent(["task:task:read"])
    bot_info = (
        lark.BaseRequest.builder()
        .http_method(lark.HttpMethod.GET)
        .uri("/open-apis/bot/v3/info")
        .token_types({lark.AccessTokenType.TENANT})
        .build()
    )
    with pytest.raises(FeishuTokenInvalid) as refused:
        await client.call_as_user("bot.info", bot_info, tokens.access_token)
    assert refused.value.code == 99991661  # sent without any token
    assert "Authorization" not in fake.requests[-1].headers
    with pytest.raises(ValueError, match="user's access token"):
        await client.call_as_user("bot.info", bot_info, "")
