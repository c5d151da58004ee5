"""The OAuth callback under attack: any change to a genuine state, with or without a genuine
code, is refused with a page, stores nothing, sends nothing to Feishu, and leaves the
person's request pending for them (property-based)."""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from e2e.harness import Bot, running_bot, settings_for
from e2e.test_user_auth import ALICE, CONNECTORS, answer_to, auth_card
from support.user_auth import PUBLIC_URL, TOKEN_KEY, calling, card_link

HOSTILE = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
async def pending(tmp_path, feishu, llm_server) -> AsyncIterator[tuple[Bot, str, str]]:
    """A bot whose turn waits for Alice's consent; her genuine state, and a genuine code
    the emulator issued for it (not yet delivered)."""
    from connectors.config import ConnectorsConfig

    llm_server.handler = calling("my_name")
    feishu.workspace.add_user(ALICE, "Alice Asker")
    values = {"larkgate_token_key": TOKEN_KEY, "larkgate_public_url": PUBLIC_URL}
    async with running_bot(
        settings_for(tmp_path, feishu, llm_server, **values),
        feishu,
        llm_server,
        connectors=ConnectorsConfig({"asme": {}}, explicit=True),
        connector_classes=CONNECTORS,
    ) as bot:
        await bot.say("om_1", "my name?")
        link = card_link((await auth_card(bot, "om_1")).content) + f"&as_user={ALICE}"
        async with (
            aiohttp.ClientSession() as session,
            session.get(link, allow_redirects=False) as consent,
        ):
            back = dict(
                urllib.parse.parse_qsl(urllib.parse.urlsplit(consent.headers["Location"]).query)
            )
        yield bot, back["state"], back["code"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@st.composite
def tampered(draw: st.DrawFn, state: str) -> str:
    body, mac = state.split(".")
    kind = draw(st.sampled_from(["flip", "cut", "append", "other_user", "later", "random"]))
    if kind == "flip":
        index = draw(st.integers(0, len(state) - 1))
        other = draw(st.sampled_from("AaZz09-_."))
        return state[:index] + other + state[index + 1 :]
    if kind == "cut":
        return state[: draw(st.integers(0, len(state) - 1))]
    if kind == "append":
        return state + draw(st.text(min_size=1, max_size=20))
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    if kind == "other_user":  # the same MAC on a payload naming someone else
        payload["u"] = draw(st.sampled_from(["ou_fake_bob", "ou_admin", ""]))
    elif kind == "later":  # the same MAC on a payload that expires later
        payload["e"] += draw(st.integers(1, 10**9))
    else:
        return draw(st.text(max_size=200))
    forged = _b64(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
    return f"{forged}.{mac}"


@HOSTILE
@given(data=st.data(), genuine_code=st.booleans())
async def test_a_tampered_state_is_refused_and_changes_nothing(pending, data, genuine_code):
    bot, state, code = pending
    forged = data.draw(tampered(state))
    assume(forged != state)
    sent = code if genuine_code else data.draw(st.text(min_size=1, max_size=40))
    exchanges = bot.feishu.count("POST", "/authen/v2/oauth/token")
    query = urllib.parse.urlencode({"code": sent, "state": forged})
    async with bot.session.get(f"{bot.url}/feishu/oauth/callback?{query}") as page:
        status, text = page.status, await page.text()
    assert status in (400, 410), (status, forged)
    assert "<script" not in text
    assert len(forged) < 12 or forged not in text  # the page never echoes what it was sent
    assert bot.feishu.count("POST", "/authen/v2/oauth/token") == exchanges
    user_auth = bot.services.user_auth
    assert await user_auth.tokens.grants() == []
    assert len(await user_auth.requests.pending_of(ALICE)) == 1


async def test_the_control_the_genuine_state_and_code_are_accepted(pending: Any):
    bot, state, code = pending
    query = urllib.parse.urlencode({"code": code, "state": state})
    async with bot.session.get(f"{bot.url}/feishu/oauth/callback?{query}") as page:
        assert page.status == 200
    assert "Alice" in await answer_to(bot, "om_1")
    await bot.settle()
    assert [g.open_id for g in await bot.services.user_auth.tokens.grants()] == [ALICE]
