"""The trust holes, tried as an attacker and as a confused user would, through the real app.

Each test reproduces a hole that was open (read-only mode vs. a pending approval, blind
approvals, replayed callbacks, clicks from another card, session grants shared by a whole
group, approvals holding run slots) and checks it stays closed. Deliveries are signed and
encrypted as Feishu sends them; the fake Feishu and the fake model speak the real wire.
"""

from __future__ import annotations

import json
import time
from typing import Any

from bot.store import ApprovalStore, AuditLog, OrgSettingsStore

from e2e.harness import (
    BOT_OPEN_ID,
    ENCRYPT_KEY,
    VERIFICATION_TOKEN,
    Bot,
    running_bot,
    settings_for,
)
from e2e.test_approvals import ADMIN, approval_cards, first_card, header, value_for
from fakes.feishu_push import card_action_event, signed_request
from fakes.openai_server import Reply
from support.cards import callback_values
from support.deploy import deploying

TOKEN = "console-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def start(tmp_path, feishu, llm_server, deployer, *, services=("api",), owner=None, **values):
    llm_server.handler = deploying(list(services))
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins=ADMIN, **values)
    return running_bot(settings, feishu, llm_server, tools=[deployer.tool()], owner=owner)


def tool_observations(llm_server) -> list[str]:
    return [
        m["content"]
        for request in llm_server.requests
        if isinstance(request.body, dict)
        for m in request.body.get("messages", [])
        if m["role"] == "tool"
    ]


def card_text(bot: Bot, card) -> str:
    return json.dumps(bot.feishu.message_by_id[card.message_id].content, ensure_ascii=False)


# -- 1. read-only mode vs. a pending approval ------------------------------------------------


async def test_read_only_on_cancels_a_pending_write_and_the_model_is_told(
    tmp_path, feishu, llm_server, deployer
):
    async with start(tmp_path, feishu, llm_server, deployer) as bot:
        await bot.say("om_1", "deploy api")
        card = await first_card(bot, "om_1")
        approve = value_for(card, "approve")
        await bot.say("om_2", "/readonly on", sender_open_id=ADMIN, chat_id="oc_ops")
        await bot.reply("om_2")
        await bot.wait_for(
            lambda: header(bot.feishu.message_by_id[card.message_id].content) == "Cancelled"
        )
        decision = bot.feishu.message_by_id[card.message_id].content["body"]["elements"]
        assert any(
            e.get("element_id") == "decision" and e["content"].endswith("): read-only mode")
            for e in decision
        )
        await bot.reply("om_1")
        await bot.settle()
        # The approver clicks anyway, on the card as it was: nothing runs.
        late = await bot.click(approve, by=ADMIN, card_message_id=card.message_id)
        assert late["toast"]["type"] == "info" and header(late["card"]["data"]) == "Cancelled"
        await bot.settle()  # nothing was started by it
    assert deployer.runs == []
    assert any("read-only mode" in text for text in tool_observations(llm_server))


async def test_a_click_after_read_only_was_switched_elsewhere_cannot_approve(
    tmp_path, feishu, llm_server, deployer
):
    """The mode switched by another process whose cancellation has not reached this approval
    yet (or raced it): the click itself checks the mode and cancels instead."""
    async with start(tmp_path, feishu, llm_server, deployer) as bot:
        await bot.say("om_3", "deploy api")
        card = await first_card(bot, "om_3")
        await OrgSettingsStore(bot.services.database).set_read_only(True, actor=ADMIN, chat_id=None)
        answer = await bot.click(
            value_for(card, "approve"), by=ADMIN, card_message_id=card.message_id
        )
        assert answer["toast"]["type"] == "warning"
        assert header(answer["card"]["data"]) == "Cancelled"
        await bot.reply("om_3")
        await bot.settle()
    assert deployer.runs == []


async def test_the_console_cannot_approve_a_write_in_read_only_mode(
    tmp_path, feishu, llm_server, deployer
):
    async with start(tmp_path, feishu, llm_server, deployer, larkgate_console_token=TOKEN) as bot:
        await bot.say("om_4", "deploy api")
        card = await first_card(bot, "om_4")
        approval_id = value_for(card, "approve")["approval_id"]
        await OrgSettingsStore(bot.services.database).set_read_only(True, actor=ADMIN, chat_id=None)
        async with bot.session.post(
            f"{bot.url}/api/approvals/{approval_id}/approve", headers=AUTH
        ) as resp:
            assert resp.status == 409
            body = await resp.json()
        assert body["outcome"] == "read_only" and body["approval"]["state"] == "cancelled"
        await bot.reply("om_4")
        await bot.settle()
    assert deployer.runs == []


async def test_read_only_is_checked_again_when_an_approved_call_would_run(
    tmp_path, feishu, llm_server, deployer
):
    """An approval decided elsewhere just as the mode went on (here: both written straight to
    the database, in the order no check in between could catch): the call does not run."""
    async with start(tmp_path, feishu, llm_server, deployer) as bot:
        await bot.say("om_5", "deploy api")
        card = await first_card(bot, "om_5")
        approval_id = value_for(card, "approve")["approval_id"]
        database = bot.services.database
        await OrgSettingsStore(database).set_read_only(True, actor=ADMIN, chat_id=None)
        decided = await ApprovalStore(database).decide(approval_id, "approve", actor=ADMIN)
        assert decided.changed  # the store itself does not know the mode
        await bot.reply("om_5")
        await bot.settle()
    assert deployer.runs == []
    assert any("read-only mode" in text for text in tool_observations(llm_server))


# -- 2. the approver sees what they approve ----------------------------------------------------


async def test_the_whole_call_is_on_the_card_in_the_console_and_in_the_audit_log(
    tmp_path, feishu, llm_server, deployer
):
    hidden_tail = "; DROP TABLE users"
    service = "x" * 1_600 + hidden_tail
    async with start(
        tmp_path, feishu, llm_server, deployer, services=[service], larkgate_console_token=TOKEN
    ) as bot:
        await bot.say("om_6", "deploy it")
        card = await first_card(bot, "om_6")
        assert hidden_tail in card_text(bot, card)
        assert "not shown" not in card_text(bot, card)
        async with bot.session.get(f"{bot.url}/api/approvals", headers=AUTH) as resp:
            [pending] = (await resp.json())["approvals"]
        assert json.loads(pending["arguments"]) == {"service": service}
        await bot.click(value_for(card, "approve"), by=ADMIN, card_message_id=card.message_id)
        await bot.reply("om_6")
        await bot.settle()
        [entry] = await AuditLog(bot.services.database).recent(action="approval.")
        assert json.loads(entry.detail["arguments"]) == {"service": service}
    assert deployer.runs == [service]  # exactly what was shown


# A 60,000-character call is slow to show on a busy machine under coverage.
LONG_CALL_SECONDS = 30.0


async def test_a_call_too_long_for_any_card_is_never_approved_blind(
    tmp_path, feishu, llm_server, deployer
):
    service = "y" * 60_000 + "; DROP TABLE users"
    async with start(tmp_path, feishu, llm_server, deployer, services=[service]) as bot:
        await bot.say("om_7", "deploy it")
        card = await first_card(bot, "om_7", within=LONG_CALL_SECONDS)
        text = card_text(bot, card)
        assert "characters are not shown" in text and "cannot be approved" in text
        assert "DROP TABLE" not in text
        assert [v["decision"] for v in callback_values(card.content)] == ["deny"]
        # The approve value, typed in by hand, is refused too.
        approve = {**value_for(card, "deny"), "decision": "approve"}
        refused = await bot.click(approve, by=ADMIN, card_message_id=card.message_id)
        assert refused["toast"]["type"] == "error" and "cannot be" in refused["toast"]["content"]
        await bot.click(value_for(card, "deny"), by=ADMIN, card_message_id=card.message_id)
        await bot.reply("om_7", within=LONG_CALL_SECONDS)
        await bot.settle(within=LONG_CALL_SECONDS)
    assert deployer.runs == []


async def test_with_the_console_a_long_call_links_it_and_can_be_approved(
    tmp_path, feishu, llm_server, deployer
):
    service = "z" * 60_000
    async with start(
        tmp_path,
        feishu,
        llm_server,
        deployer,
        services=[service],
        larkgate_console_token=TOKEN,
        larkgate_public_url="https://bot.example.com/",
    ) as bot:
        await bot.say("om_8", "deploy it")
        card = await first_card(bot, "om_8", within=LONG_CALL_SECONDS)
        text = card_text(bot, card)
        assert "[web console](https://bot.example.com/console)" in text
        answer = await bot.click(
            value_for(card, "approve"), by=ADMIN, card_message_id=card.message_id
        )
        assert answer["toast"]["type"] == "success"
        await bot.reply("om_8", within=LONG_CALL_SECONDS)
        await bot.settle(within=LONG_CALL_SECONDS)
    assert deployer.runs == [service]


# -- 3. replayed and misplaced callbacks ---------------------------------------------------


async def test_the_exact_bytes_of_an_earlier_toggle_replayed_change_nothing(
    tmp_path, feishu, llm_server, deployer
):
    async with (
        start(tmp_path, feishu, llm_server, deployer, owner="a") as a,
        start(tmp_path, feishu, llm_server, deployer, owner="b") as b,
    ):
        await a.say("om_9", "/admin", sender_open_id=ADMIN, chat_id="oc_ops")
        await a.wait_for(lambda: bool(a.replies_to("om_9")))
        [toggle_on] = callback_values(a.replies_to("om_9")[0].content)
        body, headers = signed_request(
            card_action_event(
                verification_token=VERIFICATION_TOKEN,
                value=toggle_on,
                operator_open_id=ADMIN,
                open_message_id=a.replies_to("om_9")[0].message_id,
                open_chat_id="oc_ops",
            ),
            encrypt_key=ENCRYPT_KEY,
        )
        status, first = await a.post("/feishu/card", body, headers)
        assert status == 200 and first["toast"]["type"] == "success"
        org = OrgSettingsStore(a.services.database)
        assert (await org.read_only()).on
        # The admin turns it off again; the captured click is replayed, here and elsewhere.
        await a.say("om_10", "/readonly off", sender_open_id=ADMIN, chat_id="oc_ops")
        await a.reply("om_10")
        for bot in (a, b):
            status, replayed = await bot.post("/feishu/card", body, headers)
            assert status == 200 and replayed["toast"]["content"] == (
                "This click was already handled."
            )
        assert not (await org.read_only()).on
        audit = await AuditLog(a.services.database).recent(action="readonly.")
        assert [e.action for e in audit] == ["readonly.off", "readonly.on"]


async def test_a_toggle_value_this_bot_did_not_write_changes_nothing(
    tmp_path, feishu, llm_server, deployer
):
    async with start(tmp_path, feishu, llm_server, deployer) as bot:
        for forged in (
            {"action": "admin", "setting": "read_only", "value": "on"},
            {"action": "admin", "setting": "read_only", "value": "on", "version": 0},
            {
                "action": "admin",
                "setting": "read_only",
                "value": "on",
                "version": 0,
                "seal": "0" * 32,
            },
        ):
            answer = await bot.click(forged, by=ADMIN, chat_id="oc_ops")
            assert answer["toast"]["type"] == "error"
        assert not (await OrgSettingsStore(bot.services.database).read_only()).on


async def test_an_approval_is_decided_only_from_its_own_card_in_its_own_chat(
    tmp_path, feishu, llm_server, deployer
):
    async with start(tmp_path, feishu, llm_server, deployer) as bot:
        await bot.say("om_11", "deploy api")
        card = await first_card(bot, "om_11")
        approve = value_for(card, "approve")
        for where in (
            {"card_message_id": "om_some_other_card"},
            {"card_message_id": card.message_id, "chat_id": "oc_elsewhere"},
        ):
            answer = await bot.click(approve, by=ADMIN, **where)
            assert answer["toast"]["type"] == "error" and "card" not in answer
        record = await ApprovalStore(bot.services.database).get(approve["approval_id"])
        assert record.state == "pending"
        ok = await bot.click(approve, by=ADMIN, card_message_id=card.message_id)
        assert ok["toast"]["type"] == "success"
        await bot.reply("om_11")
        await bot.settle()
    assert deployer.runs == ["api"]


# -- 5. "approve for this conversation" in a conversation everyone shares --------------------


async def test_a_session_grant_covers_its_requester_only(tmp_path, feishu, llm_server, deployer):
    group = {
        "chat_id": "oc_team",
        "chat_type": "group",
        "mentions": [("@_user_1", BOT_OPEN_ID, "larkgate")],
    }
    async with start(
        tmp_path, feishu, llm_server, deployer, services=["api"], larkgate_group_scope="chat"
    ) as bot:
        await bot.say("om_12", "@_user_1 deploy api", sender_open_id="ou_bob", **group)
        card = await first_card(bot, "om_12")
        granted = await bot.click(
            value_for(card, "approve_session"),
            by=ADMIN,
            card_message_id=card.message_id,
            chat_id="oc_team",
        )
        assert granted["toast"]["type"] == "success"
        await bot.reply("om_12")
        await bot.settle()
        assert deployer.runs == ["api"]
        # Carol, in the same shared conversation, with other arguments: her own card.
        llm_server.handler = deploying(["database --force"])
        await bot.say("om_13", "@_user_1 deploy the database", sender_open_id="ou_carol", **group)
        carols = await first_card(bot, "om_13")
        assert "ou_carol" in card_text(bot, carols)
        assert deployer.runs == ["api"]
        await bot.click(
            value_for(carols, "deny"),
            by=ADMIN,
            card_message_id=carols.message_id,
            chat_id="oc_team",
        )
        await bot.reply("om_13")
        # Bob again: his grant still holds for him.
        llm_server.handler = deploying(["web"])
        await bot.say("om_14", "@_user_1 deploy web", sender_open_id="ou_bob", **group)
        await bot.reply("om_14")
        await bot.settle()
        assert approval_cards(bot, "om_14") == []
    assert deployer.runs == ["api", "web"]


# -- 6. approvals do not hold run slots ---------------------------------------------------------


async def test_fifty_pending_approvals_do_not_stop_other_questions(
    tmp_path, feishu, llm_server, deployer
):
    waiting = 50

    def model(body: dict[str, Any]) -> Reply:
        last = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        if "deploy" in last and not any(m["role"] == "tool" for m in body["messages"]):
            return Reply(tool_calls=[("c0", "deploy", {"service": "api"})])
        return Reply(content="the answer")

    settings = settings_for(
        tmp_path, feishu, llm_server, larkgate_admins=ADMIN, larkgate_max_concurrent_runs=8
    )
    llm_server.handler = model
    async with running_bot(settings, feishu, llm_server, tools=[deployer.tool()]) as bot:
        for n in range(waiting):
            await bot.say(f"om_w{n}", "deploy api", chat_id=f"oc_dm{n}", sender_open_id=f"ou_{n}")
        await bot.wait_for(lambda: len(bot.services.governance.waits) == waiting, within=30)
        asked = time.monotonic()
        await bot.say("om_q", "what time is it?", chat_id="oc_other", sender_open_id="ou_q")
        answer = await bot.reply("om_q", within=10)
        elapsed = time.monotonic() - asked
        assert "the answer" in answer
        print(f"\nanswered in {elapsed * 1000:.0f} ms with {waiting} approvals pending")
        assert deployer.runs == []
        # Approving one lets its run go on (it queues for a slot like any run).
        [card] = approval_cards(bot, "om_w7")
        await bot.click(
            value_for(card, "approve"),
            by=ADMIN,
            card_message_id=card.message_id,
            chat_id="oc_dm7",
        )
        await bot.reply("om_w7")
        await bot.wait_for(lambda: deployer.runs == ["api"])
