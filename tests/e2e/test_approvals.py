"""Approval cards end to end: a write tool waits for a human's click on a real card callback."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.store.approvals import ApprovalStore, NewApproval
from bot.store.audit import AuditLog

from e2e.harness import Bot, running_bot, settings_for
from fakes.feishu_server import FakeMessage
from support.cards import callback_values
from support.deploy import deploying

ADMIN = "ou_admin"
USER = "ou_user"  # the sender of message_event's messages


def approval_cards(bot: Bot, message_id: str) -> list[FakeMessage]:
    return [
        m
        for m in bot.replies_to(message_id)
        if callback_values(m.content) or "Approval" in str(m.content.get("header"))
    ]


def value_for(card: FakeMessage, decision: str) -> dict[str, Any]:
    (value,) = [v for v in callback_values(card.content) if v["decision"] == decision]
    return value


def header(card: dict[str, Any]) -> str:
    return str(card.get("header", {}).get("title", {}).get("content", ""))


async def first_card(
    bot: Bot, message_id: str, within: float = 10.0, *, app: str = ""
) -> FakeMessage:
    """The first approval card under ``message_id``, once a click on it can be checked
    (``app``: the [apps.NAME] that posted it, "" the default app).

    Feishu shows a card before the bot has its message id back and stored; a click in
    those milliseconds is refused as "not from its card" (no human clicks that fast, a
    test does), so a card with buttons is returned once its approval is linked to it."""
    await bot.wait_for(lambda: bool(approval_cards(bot, message_id)), within)
    card = approval_cards(bot, message_id)[0]
    ids = {v["approval_id"] for v in callback_values(card.content) if "approval_id" in v}
    store = ApprovalStore(bot.services.database, app=app)

    async def linked() -> bool:
        for approval_id in ids:
            record = await store.get(approval_id)
            if record is None or record.card_message_id != card.message_id:
                return False
        return True

    await bot.wait_for(linked, within)
    return card


def answer_text(bot: Bot, message_id: str) -> str:
    live = [m for m in bot.replies_to(message_id) if m.card_id]
    card = bot.feishu.cards[live[0].card_id].card
    return "".join(
        e.get("content", "") for e in card["body"]["elements"] if e["element_id"] == "answer"
    )


@pytest.fixture
def governed(tmp_path, feishu, llm_server, deployer):
    """Start a bot with one write tool and an admin; yields an async context factory."""

    def start(services: list[str] | None = None, **overrides: Any):
        llm_server.handler = deploying(services or ["api"])
        values = {"larkgate_admins": ADMIN, **overrides}
        settings = settings_for(tmp_path, feishu, llm_server, **values)
        return running_bot(settings, feishu, llm_server, tools=[deployer.tool()])

    return start


async def test_approve_runs_the_tool_and_resolves_the_card(governed, deployer, feishu):
    feishu.workspace.add_user(ADMIN, "Ada Admin")
    async with governed() as bot:
        await bot.say("om_1", "deploy api please")
        card = await first_card(bot, "om_1")
        assert card.msg_type == "interactive" and header(card.content) == "Approval needed"
        text = json.dumps(card.content, ensure_ascii=False)
        assert "deploy" in text and '\\"service\\": \\"api\\"' in text
        assert f"<at id={USER}></at>" in text and f"<at id={ADMIN}></at>" in text
        assert card.reply_to == "om_1"
        assert deployer.runs == []
        # The live answer card says the call is waiting.
        await bot.wait_for(lambda: any(m.card_id for m in bot.replies_to("om_1")))
        live = next(m for m in bot.replies_to("om_1") if m.card_id)

        def steps() -> str:  # the card went up saying "Thinking…"; the steps came after
            element = feishu.cards[live.card_id].element("steps")
            return element["content"] if element else ""

        await bot.wait_for(lambda: "approval" in steps().lower() or "⏸" in steps())

        answer = await bot.click(
            value_for(card, "approve"), by=ADMIN, card_message_id=card.message_id
        )
        assert answer["toast"]["type"] == "success"
        resolved = answer["card"]["data"]
        assert header(resolved) == "Approved" and not callback_values(resolved)
        assert f"<at id={ADMIN}></at>" in json.dumps(resolved)
        await bot.reply("om_1")
        await bot.settle()
        assert deployer.runs == ["api"]
        assert "api deployed" in answer_text(bot, "om_1")
        audit = await AuditLog(bot.services.database).recent(action="approval.")
        assert [(a.action, a.actor) for a in audit] == [("approval.approved", ADMIN)]


async def test_deny_tells_the_model_who_denied(governed, deployer, feishu):
    feishu.workspace.add_user(ADMIN, "Ada Admin")
    async with governed() as bot:
        await bot.say("om_2", "deploy api")
        card = await first_card(bot, "om_2")
        answer = await bot.click(value_for(card, "deny"), by=ADMIN, card_message_id=card.message_id)
        assert header(answer["card"]["data"]) == "Denied"
        await bot.reply("om_2")
        await bot.settle()
    assert deployer.runs == []
    assert "denied by Ada Admin" in answer_text(bot, "om_2")


async def test_expiry_counts_as_deny_and_the_card_says_so(governed, deployer):
    async with governed(larkgate_approval_ttl_seconds=1) as bot:
        await bot.say("om_3", "deploy api")
        card = await first_card(bot, "om_3")
        approve = value_for(card, "approve")  # the card is rewritten below
        await bot.reply("om_3", within=15)
        await bot.settle()
        assert deployer.runs == []
        assert "approval expired" in answer_text(bot, "om_3")
        assert header(feishu_message(bot, card).content) == "Expired"
        assert not callback_values(feishu_message(bot, card).content)
        # A late click changes nothing.
        late = await bot.click(approve, by=ADMIN, card_message_id=card.message_id)
        assert late["toast"]["type"] == "info" and header(late["card"]["data"]) == "Expired"
        audit = await AuditLog(bot.services.database).recent(action="approval.")
        assert [a.action for a in audit] == ["approval.expired"]
    assert deployer.runs == []


def feishu_message(bot: Bot, card: FakeMessage) -> FakeMessage:
    return bot.feishu.message_by_id[card.message_id]


async def test_only_approvers_decide(governed, deployer):
    async with governed() as bot:
        await bot.say("om_4", "deploy api")
        card = await first_card(bot, "om_4")
        # The requester is not an approver while admins are configured.
        refused = await bot.click(
            value_for(card, "approve"), by=USER, card_message_id=card.message_id
        )
        assert refused["toast"]["type"] == "error" and "card" not in refused
        stranger = await bot.click(
            value_for(card, "approve"), by="ou_x", card_message_id=card.message_id
        )
        assert stranger["toast"]["type"] == "error"
        # A click is decided before it is answered: the approval is still pending, so the
        # waiting tool cannot have been released (and it runs once, below, when approved).
        approval_id = value_for(card, "approve")["approval_id"]
        record = await ApprovalStore(bot.services.database).get(approval_id)
        assert record is not None and record.state == "pending"
        assert deployer.runs == []
        await bot.click(value_for(card, "approve"), by=ADMIN, card_message_id=card.message_id)
        await bot.reply("om_4")
        await bot.settle()
    assert deployer.runs == ["api"]


async def test_without_admins_the_requester_approves(governed, deployer):
    async with governed(larkgate_admins="") as bot:
        await bot.say("om_5", "deploy api")
        card = await first_card(bot, "om_5")
        answer = await bot.click(
            value_for(card, "approve"), by=USER, card_message_id=card.message_id
        )
        assert answer["toast"]["type"] == "success"
        await bot.reply("om_5")
        await bot.settle()
    assert deployer.runs == ["api"]


async def test_double_click_and_redelivered_callback_change_nothing(governed, deployer):
    async with governed() as bot:
        await bot.say("om_6", "deploy api")
        card = await first_card(bot, "om_6")
        value = value_for(card, "approve")
        first = await bot.click(value, by=ADMIN, card_message_id=card.message_id, event_id="ev_1")
        again = await bot.click(value, by=ADMIN, card_message_id=card.message_id, event_id="ev_1")
        deny = await bot.click(value_for(card, "deny"), by=ADMIN, card_message_id=card.message_id)
        assert first["toast"]["type"] == "success"
        # The same delivery again (same event id) is recognised and not acted on at all.
        assert again["toast"] == {"type": "info", "content": "This click was already handled."}
        assert "card" not in again
        assert deny["toast"]["type"] == "info" and header(deny["card"]["data"]) == "Approved"
        await bot.reply("om_6")
        await bot.settle()
        audit = await AuditLog(bot.services.database).recent(action="approval.")
        assert len(audit) == 1
    assert deployer.runs == ["api"]


async def test_approve_for_this_conversation_covers_the_next_calls(governed, deployer):
    async with governed(services=["api", "web", "db"]) as bot:
        await bot.say("om_7", "deploy everything")
        card = await first_card(bot, "om_7")
        answer = await bot.click(
            value_for(card, "approve_session"), by=ADMIN, card_message_id=card.message_id
        )
        assert header(answer["card"]["data"]) == "Approved for this person here"
        await bot.reply("om_7")
        await bot.settle()
        assert deployer.runs == ["api", "web", "db"]
        assert len(approval_cards(bot, "om_7")) == 1
        # /reset starts a new conversation: the grant does not carry over.
        await bot.say("om_8", "/reset")
        await bot.reply("om_8")
        bot.llm_server.handler = deploying(["cache"])
        await bot.say("om_9", "deploy cache")
        card = await first_card(bot, "om_9")
        await bot.click(value_for(card, "deny"), by=ADMIN, card_message_id=card.message_id)
        await bot.reply("om_9")
        await bot.settle()
    assert deployer.runs == ["api", "web", "db"]


async def test_stop_while_waiting_cancels_the_approval(governed, deployer):
    async with governed() as bot:
        await bot.say("om_10", "deploy api")
        card = await first_card(bot, "om_10")
        approve = value_for(card, "approve")  # the card is rewritten below
        await bot.say("om_11", "/stop")
        await bot.reply("om_11")
        await bot.settle()
        await bot.wait_for(lambda: header(feishu_message(bot, card).content) == "Cancelled")
        assert not callback_values(feishu_message(bot, card).content)
        late = await bot.click(approve, by=ADMIN, card_message_id=card.message_id)
        assert late["toast"]["type"] == "info"
        audit = await AuditLog(bot.services.database).recent(action="approval.")
        assert [a.action for a in audit] == ["approval.cancelled"]
    assert deployer.runs == []


async def test_stop_while_the_card_is_being_posted_leaves_no_live_buttons(
    governed, deployer, feishu
):
    # /stop lands while Feishu is still answering the card's post: the post finishes, and
    # the card is rewritten as cancelled instead of offering buttons nobody can rewrite.
    feishu.slow("POST", r"/om_12/reply$", 0.5, times=1, body_regex="approval-")
    async with governed() as bot:
        await bot.say("om_12", "deploy api")
        await bot.wait_for(
            lambda: any(b"approval-" in r.body for r in feishu.requests if r.method == "POST")
        )
        await bot.say("om_13", "/stop")
        await bot.reply("om_13")
        cards = lambda: [m for m in bot.replies_to("om_12") if not m.card_id]  # noqa: E731
        await bot.wait_for(lambda: [header(m.content) for m in cards()] == ["Cancelled"])
        await bot.settle()
        assert not callback_values(cards()[0].content)
        audit = await AuditLog(bot.services.database).recent(action="approval.")
        assert [a.action for a in audit] == ["approval.cancelled"]
    assert deployer.runs == []


async def test_a_stale_card_is_closed_after_a_restart(tmp_path, feishu, llm_server, deployer):
    """An approval left pending by a process that died is cancelled and its card rewritten."""
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins=ADMIN)
    async with running_bot(settings, feishu, llm_server, tools=[deployer.tool()]) as bot:
        # The state a crash leaves behind: a pending approval whose process is gone.
        await bot.say("om_dead", "/help")
        await bot.reply("om_dead")
        sent = await bot.services.feishu.reply_message(
            "om_dead", msg_type="interactive", content=json.dumps(_placeholder_card())
        )
        store = ApprovalStore(bot.services.database)
        record = await store.create(
            NewApproval(
                run_id="run_dead",
                scope_key="p2p:oc_dm",
                generation=1,
                chat_id="oc_dm",
                message_id="om_dead",
                thread_id="",
                tool="deploy",
                connector=None,
                arguments='{"service": "api"}',
                reason=None,
                requester=USER,
                approvers=(ADMIN,),
                owner="a-process-that-died",
                ttl_seconds=600,
            )
        )
        await store.set_card(record.id, sent.message_id)
    # The next start sweeps it.
    async with running_bot(settings, feishu, llm_server, tools=[deployer.tool()]) as bot:
        await bot.wait_for(
            lambda: header(feishu.message_by_id[sent.message_id].content) == "Cancelled"
        )
        click = await bot.click(
            {"action": "approval", "decision": "approve", "approval_id": record.id},
            by=ADMIN,
            card_message_id=sent.message_id,
        )
        assert click["toast"]["type"] == "info"
        assert header(click["card"]["data"]) == "Cancelled"
        final = await ApprovalStore(bot.services.database).get(record.id)
        assert final is not None and final.state == "cancelled"
    assert deployer.runs == []


def _placeholder_card() -> dict[str, Any]:
    return {
        "schema": "2.0",
        "config": {"update_multi": True},
        "body": {"elements": [{"tag": "markdown", "element_id": "x", "content": "pending"}]},
    }


async def test_a_decision_made_through_another_process_resolves_the_wait(
    tmp_path, feishu, llm_server, deployer
):
    llm_server.handler = deploying(["api"])
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins=ADMIN)
    tools = [deployer.tool()]
    async with (
        running_bot(settings, feishu, llm_server, tools=tools, owner="process-a") as a,
        running_bot(settings, feishu, llm_server, tools=tools, owner="process-b") as b,
    ):
        await a.say("om_12", "deploy api")
        card = await first_card(a, "om_12")
        answer = await b.click(
            value_for(card, "approve"), by=ADMIN, card_message_id=card.message_id
        )
        assert answer["toast"]["type"] == "success"
        await a.reply("om_12")
        await a.settle()
    assert deployer.runs == ["api"]
