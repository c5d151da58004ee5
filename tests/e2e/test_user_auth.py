"""Acting as the user, end to end: the authorisation card, the consent through Feishu's
OAuth (the emulator's), the callback that resumes the waiting turn, and every refusal."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from bot.store.audit import AuditLog

from e2e.harness import Bot, running_bot, settings_for, text_of
from e2e.test_approvals import first_card
from e2e.test_budgets import MENTION
from fakes.feishu_server import FakeMessage
from fakes.openai_server import Reply
from support.cards import nodes
from support.model_calls import is_synthesis
from support.user_auth import PUBLIC_URL, TOKEN_KEY, AsMe, calling, card_link, follow

ALICE = "ou_user"  # the sender of message_event's messages
CONNECTORS = {"asme": AsMe}


def auth_cards(bot: Bot, message_id: str) -> list[FakeMessage]:
    return [
        m
        for m in bot.replies_to(message_id)
        # Every state of the card keeps its subtitle.
        if "Act as you in Feishu" in json.dumps(m.content.get("header", {}))
    ]


async def auth_card(bot: Bot, message_id: str) -> FakeMessage:
    await bot.wait_for(lambda: bool(auth_cards(bot, message_id)))
    return auth_cards(bot, message_id)[0]


async def answer_to(bot: Bot, message_id: str, within: float = 15.0) -> str:
    """The text of the live answer card under ``message_id`` once it stopped streaming (an
    authorisation card may have been posted under the same message before it)."""
    await bot.wait_for(lambda: any(m.card_id for m in bot.replies_to(message_id)), within)
    await bot.settle_reply(message_id, within)
    live = next(m for m in bot.replies_to(message_id) if m.card_id)
    return text_of(live, bot.feishu)


def title(message: FakeMessage) -> str:
    return str(message.content["header"]["title"]["content"])


@pytest.fixture
def as_user(tmp_path, feishu, llm_server):
    """Start a bot with per-user authorisation and the AsMe connector."""
    from connectors.config import ConnectorsConfig

    AsMe.calls.clear()
    feishu.workspace.add_user(ALICE, "Alice Asker")

    def start(handler: Any, **overrides: Any):
        llm_server.handler = handler
        values = {
            "larkgate_token_key": TOKEN_KEY,
            "larkgate_public_url": PUBLIC_URL,
            **overrides,
        }
        settings = settings_for(tmp_path, feishu, llm_server, **values)
        return running_bot(
            settings,
            feishu,
            llm_server,
            connectors=ConnectorsConfig({"asme": {}}, explicit=True),
            connector_classes=CONNECTORS,
        )

    return start


async def test_the_card_the_consent_and_the_answer_without_asking_again(as_user, feishu):
    async with as_user(calling("my_name")) as bot:
        await bot.say("om_1", "what is my name in Feishu?")
        card = await auth_card(bot, "om_1")
        assert title(card) == "Authorisation needed"
        text = json.dumps(card.content, ensure_ascii=False)
        assert "contact:user.base:readonly" in text and f"<at id={ALICE}></at>" in text
        assert AsMe.calls == []  # nothing ran as anyone yet
        status, page, _ = await follow(card_link(card.content), bot.url, as_user=ALICE)
        assert status == 200 and "Authorised" in page
        answer = await answer_to(bot, "om_1")
        await bot.settle()
        assert "Alice Asker" in answer
        assert title(feishu.message_by_id[card.message_id]) == "Authorised"
        audit = await AuditLog(bot.services.database).recent(action="user_auth.")
        assert [(a.action, a.actor) for a in audit] == [("user_auth.granted", ALICE)]


def tool_observations(llm_server: Any) -> list[str]:
    """Every tool result the model was sent (the last request holds them all)."""
    found: list[str] = []
    for request in llm_server.requests:
        for message in request.body["messages"]:
            if message["role"] == "tool" and message["content"] not in found:
                found.append(message["content"])
    return found


async def test_a_second_question_uses_the_stored_grant_without_a_card(as_user, feishu):
    async with as_user(calling("my_name")) as bot:
        await bot.say("om_1", "my name?")
        await follow(card_link((await auth_card(bot, "om_1")).content), bot.url, as_user=ALICE)
        await answer_to(bot, "om_1")
        await bot.settle()
        await bot.say("om_2", "and again?")
        assert "Alice Asker" in await answer_to(bot, "om_2")
        await bot.settle()
        assert auth_cards(bot, "om_2") == []
        stored = await bot.services.user_auth.tokens.get(ALICE)
        assert AsMe.calls == [stored.access_token] * 2  # her own token, both times


async def test_someone_elses_consent_is_refused_and_leaves_the_request_to_its_person(
    as_user, feishu
):
    async with as_user(calling("my_name")) as bot:
        await bot.say("om_1", "my name?")
        link = card_link((await auth_card(bot, "om_1")).content)
        status, page, _ = await follow(link, bot.url, as_user="ou_fake_bob")
        assert status == 403 and "someone else" in page
        assert await bot.services.user_auth.tokens.get(ALICE) is None
        assert await bot.services.user_auth.tokens.get("ou_fake_bob") is None
        assert AsMe.calls == []
        # The right person can still authorise with the same card.
        status, _, _ = await follow(link, bot.url, as_user=ALICE)
        assert status == 200
        assert "Alice Asker" in await answer_to(bot, "om_1")
        await bot.settle()


async def test_a_replayed_callback_is_refused_and_changes_nothing(as_user, feishu):
    async with as_user(calling("my_name")) as bot:
        await bot.say("om_1", "my name?")
        card = await auth_card(bot, "om_1")
        _, _, back = await follow(card_link(card.content), bot.url, as_user=ALICE)
        await answer_to(bot, "om_1")
        await bot.settle()
        first = await bot.services.user_auth.tokens.get(ALICE)
        exchanges = feishu.count("POST", "/authen/v2/oauth/token")
        status, page = await _get(bot.url + back[len(PUBLIC_URL) :])
        assert status == 409 and "already used" in page
        assert feishu.count("POST", "/authen/v2/oauth/token") == exchanges  # never sent on
        assert (await bot.services.user_auth.tokens.get(ALICE)).access_token == (first.access_token)


async def test_a_declined_consent_changes_nothing_and_the_card_stays(as_user, feishu):
    async with as_user(calling("my_name")) as bot:
        await bot.say("om_1", "my name?")
        link = card_link((await auth_card(bot, "om_1")).content)
        async with (
            aiohttp.ClientSession() as session,
            session.get(link + "&deny=1", allow_redirects=False) as consent,
        ):
            back = consent.headers["Location"]
        assert "error=access_denied" in back
        status, page = await _get(bot.url + back[len(PUBLIC_URL) :])
        assert status == 200 and "declined" in page
        pending = await bot.services.user_auth.requests.pending_of(ALICE)
        assert len(pending) == 1


async def test_nobody_consents_in_time_so_nothing_is_done_and_the_card_says_so(as_user, feishu):
    async with as_user(calling("my_name"), larkgate_authorization_ttl_seconds=1) as bot:
        await bot.say("om_1", "my name?")
        card = await auth_card(bot, "om_1")
        link = card_link(card.content)
        await answer_to(bot, "om_1")
        await bot.settle()
        assert AsMe.calls == []
        (observation,) = tool_observations(bot.llm_server)
        assert "Alice Asker did not authorise acting as them within 1 second," in observation
        await bot.wait_for(
            lambda: title(feishu.message_by_id[card.message_id]) != "Authorisation needed"
        )
        assert title(feishu.message_by_id[card.message_id]) == "Authorisation expired"
        status, _, _ = await follow(link, bot.url, as_user=ALICE)
        assert status == 410 and await bot.services.user_auth.tokens.get(ALICE) is None


async def test_stop_cancels_the_wait_and_the_card(as_user, feishu):
    async with as_user(calling("my_name")) as bot:
        await bot.say("om_1", "my name?")
        card = await auth_card(bot, "om_1")
        link = card_link(card.content)
        await bot.say("om_2", "/stop")
        await bot.settle()
        await bot.wait_for(
            lambda: title(feishu.message_by_id[card.message_id]) == "Authorisation cancelled"
        )
        status, _, _ = await follow(link, bot.url, as_user=ALICE)
        assert status == 410 and AsMe.calls == []


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as page:
        return page.status, await page.text()


async def consented(bot: Bot, message_id: str, who: str = ALICE) -> None:
    """Answer the card of ``message_id`` as ``who`` and wait for the reply."""
    await follow(card_link((await auth_card(bot, message_id)).content), bot.url, as_user=who)
    await answer_to(bot, message_id)
    await bot.settle()


def refreshes(feishu: Any) -> int:
    return sum(
        1
        for r in feishu.requests
        if r.path.endswith("/authen/v2/oauth/token")
        and (r.json or {}).get("grant_type") == "refresh_token"
    )


async def test_a_token_about_to_expire_is_refreshed_first_without_asking(as_user, feishu):
    feishu.user_token_ttl = 120.0  # inside the five minutes' margin as soon as it is issued
    async with as_user(calling("my_name")) as bot:
        tokens = bot.services.user_auth.tokens
        await bot.say("om_1", "my name?")
        await consented(bot, "om_1")
        assert refreshes(feishu) == 1  # the consent's token was renewed before it was used
        assert AsMe.calls == [(await tokens.get(ALICE)).access_token]
        granted = await tokens.get(ALICE)
        feishu.user_token_ttl = 7200.0
        await bot.say("om_2", "again")
        assert "Alice Asker" in await answer_to(bot, "om_2")
        await bot.settle()
        assert auth_cards(bot, "om_2") == [] and refreshes(feishu) == 2
        renewed = await tokens.get(ALICE)
        assert renewed.access_token != granted.access_token
        assert renewed.refresh_token != granted.refresh_token  # Feishu rotated it
        assert AsMe.calls[-1] == renewed.access_token
        await bot.say("om_3", "and once more")
        await answer_to(bot, "om_3")
        await bot.settle()
        assert refreshes(feishu) == 2  # a fresh token is used as it is


async def test_parallel_calls_needing_a_refresh_refresh_once(as_user, feishu):
    def twice(body: dict[str, Any]) -> Reply:
        if is_synthesis(body):
            return Reply(content="ok")
        if not [m for m in body["messages"] if m["role"] == "tool"]:
            return Reply(tool_calls=[("c1", "my_name", {}), ("c2", "my_name", {})])
        return Reply(content="done")

    async with as_user(calling("my_name")) as bot:
        await bot.say("om_1", "my name?")
        await consented(bot, "om_1")
        assert refreshes(feishu) == 0
        await bot.services.database.transact(_expire_stored, ALICE)  # about to expire
        bot.llm_server.handler = twice
        await bot.say("om_2", "twice, at once")
        await answer_to(bot, "om_2")
        await bot.settle()
        assert refreshes(feishu) == 1  # both calls waited for the one refresh
        renewed = await bot.services.user_auth.tokens.get(ALICE)
        assert AsMe.calls[-2:] == [renewed.access_token] * 2


async def test_a_refresh_feishu_refuses_asks_the_person_again_once(as_user, feishu):
    async with as_user(calling("my_name")) as bot:
        await bot.say("om_1", "my name?")
        await consented(bot, "om_1")
        # The grant is withdrawn on Feishu's side and the access token runs out.
        feishu.revoke_user_grant(ALICE)
        feishu.expire_user_tokens(ALICE)
        await bot.services.database.transact(_expire_stored, ALICE)
        await bot.say("om_2", "again")
        card = await auth_card(bot, "om_2")
        assert await bot.services.user_auth.tokens.get(ALICE) is None  # the dead grant is gone
        await follow(card_link(card.content), bot.url, as_user=ALICE)
        assert "Alice Asker" in await answer_to(bot, "om_2")
        await bot.settle()


async def test_a_token_refused_mid_call_is_refreshed_and_else_asked_for_again(as_user, feishu):
    async with as_user(calling("my_name", times=2)) as bot:
        await bot.say("om_1", "my name?")
        await consented(bot, "om_1")
        feishu.revoke_user_grant(ALICE)  # user_info now refuses the token, refresh too
        await bot.say("om_2", "again")
        card = await auth_card(bot, "om_2")  # the second call asked again
        first = tool_observations(bot.llm_server)[-1]
        assert "Call this tool again: I will ask them to authorise first" in first
        await follow(card_link(card.content), bot.url, as_user=ALICE)
        assert "Alice Asker" in await answer_to(bot, "om_2")
        await bot.settle()


def _expire_stored(connection: Any, open_id: str) -> None:
    from bot.store.models import UserTokenRow, table_of

    table = table_of(UserTokenRow)
    connection.execute(table.update().where(table.c.open_id == open_id).values(expires_at=0.0))


async def test_logout_forgets_the_grant_and_the_next_question_asks_again(as_user, feishu):
    async with as_user(calling("my_name")) as bot:
        await bot.say("om_1", "my name?")
        await consented(bot, "om_1")
        await bot.say("om_2", "/logout")
        assert "no longer act as you" in await bot.reply("om_2")
        assert await bot.services.user_auth.tokens.get(ALICE) is None
        await bot.say("om_3", "/logout")
        assert "nothing to withdraw" in await bot.reply("om_3")
        audit = await AuditLog(bot.services.database).recent(action="user_auth.logout")
        assert [(a.actor, a.target) for a in audit] == [(ALICE, ALICE)]  # once: one grant
        await bot.say("om_4", "my name?")
        await auth_card(bot, "om_4")


@pytest.mark.parametrize("withdrawal", ["logout", "console_revoke"])
async def test_a_consent_in_flight_when_the_grant_is_withdrawn_stores_nothing(
    as_user, feishu, withdrawal
):
    """Issue 32: Alice's callback is exchanging its code with Feishu when she sends
    /logout (or an admin revokes her). The callback then completes: it stores nothing, its
    page does not say authorised, nothing runs as her, and her next question asks again."""
    async with as_user(calling("my_name"), **CONSOLE) as bot:
        await bot.say("om_1", "my name?")
        card = await auth_card(bot, "om_1")
        exchange = feishu.hold("POST", r"/authen/v2/oauth/token$")
        callback = asyncio.ensure_future(follow(card_link(card.content), bot.url, as_user=ALICE))
        await asyncio.wait_for(exchange.arrived.wait(), 10)  # the code is with Feishu now
        if withdrawal == "logout":
            await bot.say("om_2", "/logout")
            await bot.reply("om_2")
        else:
            path = f"/api/authorizations/{ALICE}/revoke"
            await _console(bot, "POST", path, headers=AUTH)
        exchange.release()
        status, page, _ = await callback
        assert status == 410 and "cancelled" in page and "Authorised" not in page
        assert await bot.services.user_auth.tokens.get(ALICE) is None
        await answer_to(bot, "om_1")
        await bot.settle()
        assert AsMe.calls == []
        assert title(feishu.message_by_id[card.message_id]) == "Authorisation cancelled"
        granted = await AuditLog(bot.services.database).recent(action="user_auth.granted")
        assert granted == []
        await bot.say("om_3", "my name?")
        await auth_card(bot, "om_3")
        assert AsMe.calls == []


async def test_login_asks_ahead_and_then_says_it_is_done(as_user, feishu):
    async with as_user(calling("my_name")) as bot:
        await bot.say("om_1", "/login")
        card = await auth_card(bot, "om_1")
        scopes = json.dumps(card.content)
        assert "contact:user.base:readonly" in scopes and "task:task:write" in scopes
        status, _, _ = await follow(card_link(card.content), bot.url, as_user=ALICE)
        assert status == 200
        await bot.wait_for(lambda: title(feishu.message_by_id[card.message_id]) == "Authorised")
        await bot.settle()
        await bot.say("om_2", "/login")
        assert "already authorised" in await bot.reply("om_2")
        await bot.say("om_3", "my name?")
        assert "Alice Asker" in await answer_to(bot, "om_3")
        await bot.settle()
        assert auth_cards(bot, "om_3") == []


async def test_without_a_token_key_nothing_acts_as_anyone(tmp_path, feishu, llm_server):
    from connectors.config import ConnectorsConfig

    llm_server.handler = calling("my_name")
    settings = settings_for(tmp_path, feishu, llm_server)
    connectors = ConnectorsConfig({"asme": {}}, explicit=True)
    async with running_bot(
        settings, feishu, llm_server, connectors=connectors, connector_classes=CONNECTORS
    ) as bot:
        # Offered, so that the model does not answer from the app's own data instead; the
        # tool says per-user authorisation is off, and nothing runs as anyone.
        AsMe.calls.clear()
        await bot.say("om_0", "what is my name in Feishu?")
        await answer_to(bot, "om_0")
        await bot.settle()
        assert AsMe.calls == []
        assert any("per-user authorisation is off" in o for o in tool_observations(llm_server))
        assert auth_cards(bot, "om_0") == []
        await bot.say("om_1", "/login")
        assert "not enabled here" in await bot.reply("om_1")
        status, _ = await _get(bot.url + "/feishu/oauth/callback?code=x&state=y")
        assert status == 404


async def test_help_mentions_login_and_logout(as_user, feishu):
    async with as_user(calling("my_name")) as bot:
        await bot.say("om_1", "/help")
        text = await bot.reply("om_1")
        assert "`/login`" in text and "`/logout`" in text


CONSOLE = {"larkgate_console_token": "console-secret", "larkgate_admins": "ou_admin"}
AUTH = {"Authorization": "Bearer console-secret"}


async def _console(bot: Bot, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    async with bot.session.request(method, bot.url + path, **kwargs) as response:
        text = await response.text()
        return response.status, (json.loads(text) if text.startswith("{") else text)


async def test_an_admin_revokes_a_grant_from_the_console_and_it_is_audited(as_user, feishu):
    async with as_user(calling("my_name"), **CONSOLE) as bot:
        await bot.say("om_1", "my name?")
        await consented(bot, "om_1")
        assert (await _console(bot, "GET", "/api/authorizations"))[0] == 401
        status, listed = await _console(bot, "GET", "/api/authorizations", headers=AUTH)
        assert status == 200
        (grant,) = listed["authorizations"]
        assert grant["open_id"] == ALICE and "contact:user.base:readonly" in grant["scopes"]
        refused = await _console(bot, "POST", f"/api/authorizations/{ALICE}/revoke")
        assert refused[0] == 401 and await bot.services.user_auth.tokens.get(ALICE) is not None
        status, body = await _console(
            bot, "POST", f"/api/authorizations/{ALICE}/revoke", headers=AUTH
        )
        assert (status, body["outcome"]) == (200, "revoked")
        assert await bot.services.user_auth.tokens.get(ALICE) is None
        again = await _console(bot, "POST", f"/api/authorizations/{ALICE}/revoke", headers=AUTH)
        assert again[0] == 404
        audit = await AuditLog(bot.services.database).recent(action="user_auth.revoked")
        assert [(a.actor, a.target, a.detail) for a in audit] == [
            ("ou_admin", ALICE, {"via": "console"})
        ]


async def test_the_console_revokes_only_as_an_admin(as_user, feishu):
    async with as_user(calling("my_name"), larkgate_console_token="console-secret") as bot:
        status, body = await _console(
            bot, "POST", f"/api/authorizations/{ALICE}/revoke", headers=AUTH
        )
        assert status == 403 and "LARKGATE_ADMINS" in body["error"]


async def test_no_token_reaches_the_logs_the_model_the_chat_or_the_console(as_user, feishu, caplog):
    caplog.set_level(logging.DEBUG)
    feishu.user_token_ttl = 120.0  # so that a refresh happens too
    async with as_user(calling("my_name"), **CONSOLE) as bot:
        await bot.say("om_1", "my name?")
        await consented(bot, "om_1")
        await bot.say("om_2", "again")
        await answer_to(bot, "om_2")
        await bot.settle()
        secrets = {
            *feishu.user_grants,  # every access token issued
            *feishu._refresh_grants,  # every refresh token
            *feishu.oauth_codes,  # every authorization code
            TOKEN_KEY,
        }
        assert len(secrets) >= 6 and AsMe.calls
        shown = [caplog.text]
        shown += [json.dumps(r.body) for r in bot.llm_server.requests]
        shown += [json.dumps(m.content) for m in feishu.sent]
        shown += [json.dumps(c.card) for c in feishu.cards.values()]
        for path in ("/api/runs", "/api/authorizations", "/api/audit"):
            shown.append(json.dumps((await _console(bot, "GET", path, headers=AUTH))[1]))
        for run in (await _console(bot, "GET", "/api/runs", headers=AUTH))[1]["runs"]:
            events = f"/api/runs/{run['id']}/events"
            shown.append(str(await _console(bot, "GET", events, headers=AUTH)))
        everything = "\n".join(shown)
        leaked = [s for s in secrets if s in everything]
        assert leaked == []


BOB = "ou_fake_bob"  # Bob Li in the emulator's directory
GROUP = {"chat_type": "group", "chat_id": "oc_team", "mentions": MENTION}


async def test_a_group_members_turn_never_uses_another_members_grant(as_user, feishu):
    async with as_user(calling("my_name")) as bot:
        await bot.say("om_1", "my name?")
        await consented(bot, "om_1")
        alices = list(AsMe.calls)
        await bot.say("om_2", "@_user_1 what is my name?", sender_open_id=BOB, **GROUP)
        card = await auth_card(bot, "om_2")
        assert f"<at id={BOB}></at>" in json.dumps(card.content)
        assert AsMe.calls == alices  # nothing ran on Alice's grant for Bob
        await follow(card_link(card.content), bot.url, as_user=BOB)
        assert "Bob Li" in await answer_to(bot, "om_2")
        await bot.settle()
        bobs = await bot.services.user_auth.tokens.get(BOB)
        assert AsMe.calls[-1] == bobs.access_token


async def test_a_turn_someone_else_joined_no_longer_acts_as_its_starter(as_user, feishu):
    async with as_user(calling("my_name")) as bot:
        await bot.say("om_1", "@_user_1 what is my name?", **GROUP)
        card = await auth_card(bot, "om_1")  # Alice's run waits for her consent
        await bot.say("om_2", "@_user_1 and tell me mine", sender_open_id=BOB, **GROUP)
        await bot.wait_for(lambda: bool(bot.services.workers.active_runs))
        await follow(card_link(card.content), bot.url, as_user=ALICE)
        await answer_to(bot, "om_1")
        await bot.settle()
        assert AsMe.calls == []  # Alice's grant exists, and was not used
        assert await bot.services.user_auth.tokens.get(ALICE) is not None
        assert "someone else's message joined this reply" in tool_observations(bot.llm_server)[0]


async def test_an_approval_for_a_write_as_the_user_says_as_whom(as_user, feishu):
    async with as_user(calling("note_as_me", {"text": "hello"})) as bot:
        await bot.say("om_1", "note hello as me")
        approval = await first_card(bot, "om_1")
        facts = json.dumps(approval.content, ensure_ascii=False)
        assert f"`note_as_me` as <at id={ALICE}></at>" in facts
        assert "own Feishu account" in facts
        assert auth_cards(bot, "om_1") == []  # nobody is asked to consent before the approval
        (value,) = [
            b["value"]
            for n in nodes(approval.content)
            for b in n.get("behaviors") or []
            if b.get("value", {}).get("decision") == "approve"
        ]
        await bot.click(value, by=ALICE, card_message_id=approval.message_id)
        await follow(card_link((await auth_card(bot, "om_1")).content), bot.url, as_user=ALICE)
        assert "noted 'hello' as Alice Asker" in await answer_to(bot, "om_1")
        await bot.settle()


def _replicas_of(tmp_path, feishu, llm_server) -> Callable[[str], Any]:
    """Processes of one deployment (same database), with the tool that acts as the asker
    and a model that calls it: ``start(owner)`` runs one."""
    from connectors.config import ConnectorsConfig

    llm_server.handler = calling("my_name")
    feishu.workspace.add_user(ALICE, "Alice Asker")
    settings = settings_for(
        tmp_path, feishu, llm_server, larkgate_token_key=TOKEN_KEY, larkgate_public_url=PUBLIC_URL
    )
    connectors = ConnectorsConfig({"asme": {}}, explicit=True)

    def start(owner: str) -> Any:
        return running_bot(
            settings,
            feishu,
            llm_server,
            owner=owner,
            connectors=connectors,
            connector_classes=CONNECTORS,
        )

    return start


async def test_a_callback_on_another_replica_resumes_the_waiting_turn(tmp_path, feishu, llm_server):
    start = _replicas_of(tmp_path, feishu, llm_server)
    async with (
        start("replica-a") as a,
        start("replica-b") as b,
    ):
        await a.say("om_1", "my name?")
        card = await auth_card(a, "om_1")
        status, _, _ = await follow(card_link(card.content), b.url, as_user=ALICE)
        assert status == 200
        assert "Alice Asker" in await answer_to(a, "om_1")
        await a.settle()
        assert title(feishu.message_by_id[card.message_id]) == "Authorised"


async def test_a_consent_asked_before_a_restart_resumes_the_saved_run(tmp_path, feishu, llm_server):
    """The card's link, followed after the process that posted it stopped, completes the
    request; the process that resumed the run waits for that request (no second card) and
    goes on from where the run was."""
    start = _replicas_of(tmp_path, feishu, llm_server)
    async with start("first") as first:
        await first.say("om_1", "my name?")
        card = await auth_card(first, "om_1")
    calls = len(llm_server.requests)
    async with start("second") as second:
        await second.wait_for(lambda: len(second.services.user_auth.waits) == 1, within=30)
        status, _, _ = await follow(card_link(card.content), second.url, as_user=ALICE)
        assert status == 200
        assert "Alice Asker" in await answer_to(second, "om_1")
        await second.settle()
        assert title(feishu.message_by_id[card.message_id]) == "Authorised"
        cards = [m for m in feishu.sent if m.reply_to == "om_1" and not m.card_id]
        assert [m.message_id for m in cards] == [card.message_id]  # asked once
        assert len(llm_server.requests) - calls == 1  # not asked to start over


@pytest.fixture
def device(as_user, feishu):
    """A bot without a public URL: consent by device code."""
    feishu.device_interval = 0.05  # the bot still polls at most once a second

    def start(handler: Any, **overrides: Any):
        return as_user(handler, larkgate_public_url="", **overrides)

    return start


async def test_without_a_public_url_the_device_flow_resumes_the_turn(device, feishu):
    async with device(calling("my_name")) as bot:
        await bot.say("om_1", "my name?")
        card = await auth_card(bot, "om_1")
        text = json.dumps(card.content, ensure_ascii=False)
        (code,) = [c.user_code for c in feishu.device_codes.values()]
        assert f"confirm the code **{code}**" in text
        link = card_link(card.content)
        assert link.endswith(f"/oauth/v1/device/verify?user_code={code}")
        status, _ = await _get(link + f"&as_user={ALICE}")
        assert status == 200
        assert "Alice Asker" in await answer_to(bot, "om_1")
        await bot.settle()
        assert title(feishu.message_by_id[card.message_id]) == "Authorised"
        status, _ = await _get(bot.url + "/feishu/oauth/callback?code=x&state=y")
        assert status == 404  # no callback to attack without a public URL


async def test_a_device_code_confirmed_by_someone_else_is_refused(device, feishu):
    async with device(calling("my_name")) as bot:
        await bot.say("om_1", "my name?")
        card = await auth_card(bot, "om_1")
        await _get(card_link(card.content) + f"&as_user={BOB}")
        await answer_to(bot, "om_1")
        await bot.settle()
        assert AsMe.calls == []
        assert await bot.services.user_auth.tokens.get(ALICE) is None
        assert await bot.services.user_auth.tokens.get(BOB) is None
        assert "someone else confirmed the code" in tool_observations(bot.llm_server)[0]
        assert title(feishu.message_by_id[card.message_id]) == "Authorisation refused"


async def test_a_device_code_declined_on_feishus_page_is_refused(device, feishu):
    async with device(calling("my_name")) as bot:
        await bot.say("om_1", "my name?")
        card = await auth_card(bot, "om_1")
        await _get(card_link(card.content) + "&deny=1")
        await answer_to(bot, "om_1")
        await bot.settle()
        assert "declined on Feishu's page" in tool_observations(bot.llm_server)[0]
        assert AsMe.calls == []


async def test_a_grant_feishu_narrows_is_refused_once_with_what_an_admin_must_add(as_user, feishu):
    feishu.withheld_scopes = {"contact:user.base:readonly"}  # the app may not ask for it
    async with as_user(calling("my_name", times=2)) as bot:
        await bot.say("om_1", "my name?")
        await follow(card_link((await auth_card(bot, "om_1")).content), bot.url, as_user=ALICE)
        await answer_to(bot, "om_1")
        await bot.settle()
        assert AsMe.calls == []
        loop = [r for r in bot.llm_server.requests if not is_synthesis(r.body)]
        last = loop[-1].body["messages"]
        results = [m["content"] for m in last if m["role"] == "tool"]
        assert len(results) == 2  # the model tried twice
        assert all("leaves out contact:user.base:readonly" in r for r in results)
        assert "developer console" in results[0]
        assert len(auth_cards(bot, "om_1")) == 1  # the model's retry showed no second card


async def test_a_stopping_bot_leaves_an_open_request_open_for_a_later_consent(
    as_user, feishu, tmp_path
):
    from bot.store import Database
    from bot.store.user_authorizations import PENDING, UserAuthorizationStore

    # The stop lands while Feishu is still answering the card's post (the window where a
    # stop used to leave a posted card unlinked, so a later consent could not rewrite it).
    feishu.slow("POST", r"/open-apis/im/v1/messages/om_1/reply$", 0.5, times=1)
    async with as_user(calling("my_name")) as bot:
        await bot.say("om_1", "/login")
        await bot.wait_for(lambda: any(r.path.endswith("/om_1/reply") for r in feishu.requests))
    card = auth_cards(bot, "om_1")[0]
    from e2e import harness

    url = harness.DATABASE_URL or f"sqlite+aiosqlite:///{tmp_path}/bot.db"
    async with Database(url) as database:
        (request,) = await UserAuthorizationStore(database).pending_of(ALICE)
        assert request.state == PENDING and request.card_message_id == card.message_id


async def test_a_scheduled_task_acts_only_as_its_creator(tmp_path, feishu, llm_server):
    from connectors.config import ConnectorsConfig

    from e2e.test_schedules import Clock, headers

    clock = Clock(time.time())
    llm_server.handler = calling("my_name")
    feishu.workspace.add_user(ALICE, "Alice Asker")
    # Both in the group: a firing runs only while its creator is a member.
    feishu.workspace.add_chat("oc_team", "Team", members={ALICE, BOB})
    values = {"larkgate_token_key": TOKEN_KEY, "larkgate_public_url": PUBLIC_URL}
    async with running_bot(
        settings_for(tmp_path, feishu, llm_server, **values),
        feishu,
        llm_server,
        connectors=ConnectorsConfig({"asme": {}}, explicit=True),
        connector_classes=CONNECTORS,
        clock=clock,
    ) as bot:
        await bot.say("om_1", "@_user_1 my name?", **GROUP)  # Alice, in the group
        await consented(bot, "om_1")
        alices = list(AsMe.calls)
        task = await bot.services.schedules.create(
            name="Who am I",
            prompt="What is my name in Feishu?",
            creator=BOB,
            chat_id="oc_team",
            chat_type="group",
            thread_id="",
            reply_to="",
            kind="cron",
            expression="0 * * * *",
            timezone="UTC",
            next_run_at=clock.now + 60,
            created_in_run="",
            max_per_creator=20,
        )
        clock.now = task.next_run_at + 1
        bot.services.scheduled_runs.wake()
        await bot.wait_for(lambda: len(headers(bot)) == 1)
        header = headers(bot)[0]
        card = await auth_card(bot, header.message_id)
        assert f"<at id={BOB}></at>" in json.dumps(card.content)  # Bob is asked, not Alice
        assert AsMe.calls == alices
