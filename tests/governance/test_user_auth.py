"""Per-user authorisation's parts over the emulator and a real database: the paths the
end-to-end tests do not reach (Feishu failing at each step, odd answers, the sweep)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from cryptography.fernet import Fernet
from lark_oapi.api.authen.v1 import GetUserInfoRequest

from bot.engine import ToolError, ToolUse, tool_from_function
from bot.engine.hooks import _CURRENT_RUN
from bot.feishu.client import FeishuClient
from bot.feishu.oauth_callback import CallbackQuery
from bot.governance.user_auth.ask import Asking, ConsentUnavailable
from bot.governance.user_auth.asker_of import NOT_A_TURN, OTHERS_JOINED, asker_of
from bot.governance.user_auth.config import UserAuthConfig
from bot.governance.user_auth.reconsent import Reconsent
from bot.governance.user_auth.service import UserAuth, build_user_auth
from bot.oauth_tokens import UserTokens
from bot.store import Database, upgrade_async
from bot.store.replays import ReplayGuard
from bot.store.user_authorizations import (
    AUTHORISED,
    CANCELLED,
    EXPIRED,
    PENDING,
    REFUSED,
    NewAuthorization,
)
from bot.turn_context import TurnContext

from fakes.feishu_server import FakeFeishu
from support.feishu import feishu_config
from support.turns import look_alike, run_of, turn_context

ALICE = "ou_fake_alice"
KEY = Fernet.generate_key().decode()


def a_turn(*, joined: bool = False, **fields: Any) -> TurnContext:
    """Alice's turn in her direct chat, the runtime's context of it; ``joined``: Carol's
    message joined it."""
    return turn_context(**fields, joined=["ou_fake_carol"] if joined else ())


@pytest.fixture
async def fake() -> AsyncIterator[FakeFeishu]:
    async with FakeFeishu() as server:
        server.workspace.add_user(ALICE, "Alice Wang")
        yield server


async def _user_auth(fake: FakeFeishu, tmp_path, **config: Any) -> AsyncIterator[UserAuth]:
    url = f"sqlite+aiosqlite:///{tmp_path}/auth.db"
    await upgrade_async(url)
    async with Database(url) as db, FeishuClient(feishu_config(fake), timeout=5.0) as client:

        async def name_of(open_id: str) -> str:
            return {ALICE: "Alice Wang"}.get(open_id, open_id)

        values = {"token_key": KEY, "public_url": "https://bot.example.com", **config}
        auth = build_user_auth(
            UserAuthConfig(**values),
            database=db,
            feishu=client,
            feishu_config=feishu_config(fake),
            replays=ReplayGuard(db),
            timezone="UTC",
            owner="test",
            name_of=name_of,
        )
        # The device flow polls at Feishu's interval but never faster than this floor.
        auth.asker._p = replace(auth.asker._p, min_poll_seconds=0.01)
        yield auth


@pytest.fixture
async def auth(fake, tmp_path) -> AsyncIterator[UserAuth]:
    async for built in _user_auth(fake, tmp_path):
        yield built


@pytest.fixture
async def device_auth(fake, tmp_path) -> AsyncIterator[UserAuth]:
    fake.device_interval = 0.01
    async for built in _user_auth(fake, tmp_path, public_url=""):
        yield built


def grant(open_id: str = ALICE, *, access: str = "u-a", expires_in: float = 7200.0) -> UserTokens:
    now = time.time()
    return UserTokens(open_id, access, "ur-a", now + expires_in, now + 86400, "contact:x")


def in_turn(turn: TurnContext | None):
    """Run the body as a tool call of ``turn`` (what the engine sets around a handler)."""
    return _CURRENT_RUN.set(run_of(turn))


async def who(access_token: str) -> str:
    return access_token


# -- who may be acted as ------------------------------------------------------------------


def test_only_a_persons_own_turn_without_anyone_joining_acts_as_them():
    assert asker_of(None) == (None, NOT_A_TURN)
    assert asker_of(run_of(None)) == (None, NOT_A_TURN)
    assert asker_of(run_of(a_turn(sender_open_id=""))) == (None, NOT_A_TURN)
    assert asker_of(run_of(a_turn(joined=True))) == (None, OTHERS_JOINED)
    origin, refusal = asker_of(run_of(a_turn()))
    assert origin is not None and origin.sender_open_id == ALICE and refusal == ""
    # Deps of another type with every field of Alice's turn: nobody's turn, nobody to act as.
    assert asker_of(run_of(look_alike(a_turn()))) == (None, NOT_A_TURN)


async def _my_name() -> str:
    """Tell the person their Feishu name."""
    return "?"


async def test_the_gate_acts_for_no_one_on_deps_that_only_look_like_a_turn(auth, fake):
    """The attacker's look-alike: Alice holds a grant, and deps of another type that copy
    her turn field by field still get nobody's account, from the gate or the source."""
    await auth.tokens.save(ALICE, grant())
    gate = auth.gate(lambda name: ("contact:x",) if name == "my_name" else None)
    my_name = tool_from_function(_my_name, name="my_name", side_effect="read")

    def call(deps: object) -> ToolUse:
        return ToolUse("my_name", {}, "c1", "read", my_name, 1, run_of(deps))

    forged = look_alike(a_turn())
    refused = await gate.pre_tool_use(call(forged))
    assert (refused.allow, refused.reason) == (False, NOT_A_TURN)
    assert (await gate.pre_tool_use(call(a_turn()))).allow  # her real turn: her grant
    token = in_turn(forged)
    try:
        with pytest.raises(ToolError, match="nobody to act as"):
            await auth.source.as_user(["contact:x"], "read", who)
    finally:
        _CURRENT_RUN.reset(token)
    assert fake.requests == []


def test_reconsent_is_wanted_once_a_run_and_forgotten_past_its_bound():
    marks = Reconsent(remembered=2)
    assert marks.want("r1", ALICE) and not marks.want("r1", ALICE)
    assert marks.wanted("r1", ALICE)
    marks.asked("r1", ALICE)
    assert not marks.wanted("r1", ALICE) and not marks.want("r1", ALICE)
    marks.asked("r9", ALICE)  # never marked: nothing to record
    assert marks.want("r2", ALICE) and marks.want("r3", ALICE)
    assert marks.want("r1", ALICE)  # the oldest mark was let go


def test_the_check_line_names_the_flow_and_what_feishu_must_know():
    code = UserAuthConfig(token_key=KEY, public_url="https://b.example")
    assert "https://b.example/feishu/oauth/callback" in code.describe()
    device = UserAuthConfig(token_key=KEY, public_url="")
    assert device.flow == "device" and device.redirect_uri == ""
    assert "device code" in device.describe() and "LARKGATE_PUBLIC_URL" in device.describe()
    assert KEY not in repr(code)


# -- the token source, inside a tool ---------------------------------------------------------


async def test_as_user_outside_a_turn_is_a_tool_error(auth):
    token = in_turn(None)
    try:
        with pytest.raises(ToolError, match="nobody to act as"):
            await auth.source.as_user(["contact:x"], "read", who)
    finally:
        _CURRENT_RUN.reset(token)


async def test_without_a_grant_the_call_asks_for_a_retry_once_then_for_an_admin(auth):
    token = in_turn(a_turn())
    try:
        with pytest.raises(ToolError, match="Call this tool again"):
            await auth.source.as_user(["contact:x"], "read your profile", who)
        with pytest.raises(ToolError, match="already asked"):
            await auth.source.as_user(["contact:x"], "read your profile", who)
    finally:
        _CURRENT_RUN.reset(token)


async def test_a_grant_without_the_scope_feishu_wants_is_asked_for_again(auth, fake):
    await auth.tokens.save(ALICE, grant())
    fake.fail("GET", "/authen/v1/user_info", 99991679, times=2)

    async def profile(access_token: str) -> str:
        request = GetUserInfoRequest.builder().build()
        body = await auth.grants._oauth._client.call_as_user(
            "authen.user_info", request, access_token
        )
        return str(body["data"]["name"])

    token = in_turn(a_turn())
    try:
        with pytest.raises(ToolError, match="has not granted what is needed"):
            await auth.source.as_user(["contact:x"], "read your profile", profile)
        with pytest.raises(ToolError, match=r"user scopes \(contact:x\)"):
            await auth.source.as_user(["contact:x"], "read your profile", profile)
    finally:
        _CURRENT_RUN.reset(token)


async def test_feishu_silent_about_a_grant_is_a_tool_error_not_a_crash(auth, fake):
    await auth.tokens.save(ALICE, grant(expires_in=10))  # needs a refresh
    fake.fail("POST", "/authen/v2/oauth/token", 0, http_status=502, raw_body="<html>bad</html>")
    token = in_turn(a_turn())
    try:
        with pytest.raises(ToolError, match="Feishu did not answer"):
            await auth.source.as_user(["contact:x"], "read", who)
    finally:
        _CURRENT_RUN.reset(token)


# -- grants ----------------------------------------------------------------------------------


async def test_a_grant_sealed_with_another_key_is_dropped_so_the_person_is_asked(
    auth, fake, tmp_path
):
    from bot.store.user_tokens import TokenCipher, UserTokenStore

    other = UserTokenStore(
        auth.tokens._db, TokenCipher.from_setting(Fernet.generate_key().decode())
    )
    await other.save(ALICE, grant())
    assert await auth.grants.usable(ALICE, ["contact:x"]) is None
    assert await other.get(ALICE) is None  # deleted, not left to fail again
    await other.save(ALICE, grant(expires_in=10))
    assert await auth.grants.after_refusal(ALICE, "u-a") is None


async def test_after_a_refusal_a_token_someone_renewed_meanwhile_is_used_as_it_is(auth):
    await auth.tokens.save(ALICE, grant(access="u-new"))
    fresh = await auth.grants.after_refusal(ALICE, "u-old")
    assert fresh is not None and fresh.access_token == "u-new"
    assert await auth.grants.after_refusal("ou_nobody", "u-old") is None


async def test_a_refused_refresh_deletes_the_grant_but_not_a_consent_given_meanwhile(
    auth, fake, monkeypatch
):
    # Feishu refuses the refresh token (revoked): the grant goes, so the person is asked.
    await auth.tokens.save(ALICE, grant(expires_in=10))
    fake.fail("POST", "/authen/v2/oauth/token", 20064)
    assert await auth.grants.usable(ALICE, []) is None
    assert await auth.tokens.get(ALICE) is None
    # The same refusal while the person consents again (another replica stores it before
    # the refusal arrives): their new consent stays.
    await auth.tokens.save(ALICE, grant(expires_in=10))
    refuse = auth.grants._oauth.refresh

    async def consent_then_refuse(refresh_token: str, *, open_id: str) -> UserTokens:
        await auth.tokens.save(ALICE, grant(access="u-consented"))
        return await refuse(refresh_token, open_id=open_id)

    monkeypatch.setattr(auth.grants._oauth, "refresh", consent_then_refuse)
    assert await auth.grants.usable(ALICE, []) is None
    kept = await auth.tokens.get(ALICE)
    assert kept is not None and kept.access_token == "u-consented"


# -- asking ------------------------------------------------------------------------------------


ASKING = Asking(ALICE, "oc_1", "om_1")


async def test_a_card_feishu_refuses_to_post_cancels_the_request(auth, fake):
    fake.fail("POST", r"/messages/om_1/reply$", 230002)
    record = await auth.asker.ask(ASKING, ["contact:x"], "read")
    assert record.state == CANCELLED and "could not be sent" in (record.note or "")


async def test_login_says_when_the_card_could_not_be_sent(auth, fake):
    fake.fail("POST", r"/messages/om_1/reply$", 230002)
    outcome = await auth.login(ASKING, ["contact:x"])
    assert outcome.kind == "no_card"
    assert (await auth.login(ASKING, [])).kind == "no_tools"


async def test_login_while_feishu_cannot_refresh_says_so(auth, fake):
    await auth.tokens.save(ALICE, grant(expires_in=10))
    fake.fail("POST", "/authen/v2/oauth/token", 0, http_status=502, raw_body="<html>")
    outcome = await auth.login(ASKING, ["contact:x"])
    assert outcome.kind == "unavailable" and "Feishu did not answer" in outcome.detail


async def test_a_device_flow_feishu_will_not_start_is_said_plainly(device_auth, fake):
    fake.app_secret = "rotated"  # the accounts host refuses the app
    with pytest.raises(ConsentUnavailable, match="did not start a device authorization"):
        await device_auth.asker.ask(ASKING, ["contact:x"], "read")
    outcome = await device_auth.login(ASKING, ["contact:x"])
    assert outcome.kind == "unavailable" and "device authorization" in outcome.detail


async def test_the_device_poll_rides_out_a_hiccup_and_slows_down_when_told(device_auth, fake):
    fake.device_enforce_interval = True
    fake.fail("POST", "/authen/v2/oauth/token", 0, http_status=502, raw_body="<html>", times=1)
    asking = asyncio.ensure_future(device_auth.asker.ask(ASKING, ["contact:x"], "read"))
    await _wait(lambda: fake.device_codes)
    (code,) = fake.device_codes.values()
    fake.approve_device(code.user_code, ALICE)
    record = await asyncio.wait_for(asking, 15)
    assert record.state == AUTHORISED
    assert (await device_auth.tokens.get(ALICE)) is not None


async def test_a_device_poll_feishu_refuses_outright_ends_the_request(device_auth, fake):
    fake.fail("POST", "/authen/v2/oauth/token", 20002, times=1)
    record = await device_auth.asker.ask(ASKING, ["contact:x"], "read")
    assert record.state == REFUSED and "Feishu refused it" in (record.note or "")


async def test_a_device_code_that_runs_out_expires_the_request(device_auth, fake):
    fake.device_ttl = 0.05
    record = await device_auth.asker.ask(ASKING, ["contact:x"], "read")
    assert record.state == EXPIRED


# -- the sweep and the callback's odd cases -------------------------------------------------


async def test_the_sweep_closes_what_nobody_closed_and_rewrites_its_card(auth, fake):
    request = await auth.requests.create(
        NewAuthorization("r1", ALICE, "oc_1", "om_1", "", ("contact:x",), "read", "code", "", 0.0)
    )
    await auth.requests.set_card(request.id, "om_card")
    fake.add_message("om_card", chat_id="oc_1", msg_type="interactive", content={"x": 1})
    sweep = asyncio.ensure_future(auth.sweep(interval=0.01))
    try:
        await _wait(lambda: fake.count("PATCH", "/messages/om_card$"))
    finally:
        sweep.cancel()
    assert (await auth.requests.get("r1")).state == EXPIRED


async def test_callbacks_for_no_request_or_an_ended_one_store_nothing(auth):
    issued = auth.callback._signer.issue(
        open_id=ALICE, chat_id="oc_1", now=time.time(), ttl_seconds=60
    )
    page = await auth.callback(CallbackQuery(code="c", state=issued.state))
    assert page.status == 400  # a state we signed, but no such request
    await auth.requests.create(
        NewAuthorization(
            issued.claims.nonce, ALICE, "oc_1", "om_1", "", (), "read", "code", "", time.time() + 60
        )
    )
    assert (await auth.callback(CallbackQuery(code="", state=issued.state))).status == 400
    await auth.consents.close(issued.claims.nonce, CANCELLED, "withdrawn")
    assert (await auth.callback(CallbackQuery(code="c", state=issued.state))).status == 410
    assert await auth.tokens.grants() == []


async def test_a_code_feishu_refuses_is_a_page_saying_to_retry(auth):
    issued = auth.callback._signer.issue(
        open_id=ALICE, chat_id="oc_1", now=time.time(), ttl_seconds=60
    )
    await auth.requests.create(
        NewAuthorization(
            issued.claims.nonce, ALICE, "oc_1", "om_1", "", (), "read", "code", "", time.time() + 60
        )
    )
    page = await auth.callback(CallbackQuery(code="not-a-code", state=issued.state))
    assert page.status == 502 and "Press the button" in page.message
    assert (await auth.requests.get(issued.claims.nonce)).state == PENDING


async def test_the_watcher_notices_a_request_ended_elsewhere(auth):
    request = await auth.requests.create(
        NewAuthorization("r2", ALICE, "oc_1", "om_1", "", (), "read", "code", "", time.time() + 60)
    )
    future = auth.waits.register(request.id)
    watcher = asyncio.ensure_future(auth.waits.watch())
    try:
        await auth.requests.close("r2", REFUSED, "elsewhere")  # another replica, no resolve()
        record = await asyncio.wait_for(future, 5)
    finally:
        watcher.cancel()
    assert record.state == REFUSED and len(auth.waits) == 1
    auth.waits.discard("r2")
    assert len(auth.waits) == 0


async def _wait(condition: Any, within: float = 5.0) -> None:
    from support.waiting import wait_until

    await wait_until(condition, within)
