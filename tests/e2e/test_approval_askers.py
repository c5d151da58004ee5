"""A joined turn does not borrow its starter's rights: approvals and budgets are everyone's.

In a group conversation everyone shares, a message sent while the bot works joins the
running reply, and the model then serves its sender too. Before, the approval gate and the
budgets looked only at who started the run: Carol's request ran under Bob's "approve for
this person here" grant with no card, the card named only Bob, and only Bob's budget paid.
Each test stages the join the way it happens (Bob's reply is busy with the model when
Carol's message arrives), through the real app, signed and encrypted as Feishu sends it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from bot.store import AuditLog, RunStore, UsageStore

from e2e.harness import BOT_OPEN_ID, Bot, running_bot, settings_for
from e2e.test_approvals import ADMIN, approval_cards, first_card, value_for
from e2e.test_budgets import costing, footer
from fakes.openai_server import Reply
from support.deploy import Deployer, deploying
from support.model_calls import is_synthesis

BOB, CAROL, DAVE = "ou_bob", "ou_carol", "ou_dave"
GROUP = {
    "chat_id": "oc_team",
    "chat_type": "group",
    "mentions": [("@_user_1", BOT_OPEN_ID, "larkgate")],
}
TOKEN = "console-token"


class Held:
    """A model that answers as ``then`` does, but holds its first tool-loop call until
    ``release`` is set (``entered`` is set once it holds it): the moment another message
    joins the reply."""

    def __init__(self, then: Callable[[dict[str, Any]], Reply]) -> None:
        self.then = then
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, body: dict[str, Any]) -> Reply:
        if not is_synthesis(body) and not self.entered.is_set():
            self.entered.set()
            await self.release.wait()
        return self.then(body)


def held_deploy(service: str) -> Held:
    """Deploys ``service`` once, then says what it saw (its first call held)."""
    return Held(deploying([service]))


async def joins(bot: Bot, caplog: Any, model: Held, starter: tuple[str, str], *others):
    """``starter`` (message id, sender) asks; while the model holds the reply, each of
    ``others`` (message id, sender) joins it; then the model goes on."""
    message_id, sender = starter
    await bot.say(message_id, "@_user_1 deploy it", sender_open_id=sender, **GROUP)
    await asyncio.wait_for(model.entered.wait(), 10)
    for other_id, other in others:
        await bot.say(other_id, "@_user_1 yes, please deploy", sender_open_id=other, **GROUP)
        await bot.wait_for(lambda i=other_id: f"message {i} joined conversation" in caplog.text)
    model.release.set()


def card_text(bot: Bot, card: Any) -> str:
    return json.dumps(bot.feishu.message_by_id[card.message_id].content, ensure_ascii=False)


def observations(bot: Bot) -> list[str]:
    return [
        m["content"]
        for request in bot.llm_server.requests
        for m in request.body.get("messages", [])
        if m["role"] == "tool"
    ]


async def test_bobs_grant_does_not_run_a_call_carols_message_joined(
    tmp_path, feishu, llm_server, caplog
):
    caplog.set_level(logging.INFO, logger="bot.runtime.intake.routing")
    deployer = Deployer()
    llm_server.handler = deploying(["api"])
    settings = settings_for(
        tmp_path,
        feishu,
        llm_server,
        larkgate_admins=ADMIN,
        larkgate_group_scope="chat",
        larkgate_console_token=TOKEN,
    )
    async with running_bot(settings, feishu, llm_server, tools=[deployer.tool()]) as bot:
        # Bob alone: "approve for this person here".
        await bot.say("om_1", "@_user_1 deploy api", sender_open_id=BOB, **GROUP)
        card = await first_card(bot, "om_1")
        await bot.click(
            value_for(card, "approve_session"),
            by=ADMIN,
            card_message_id=card.message_id,
            chat_id="oc_team",
        )
        await bot.reply("om_1")
        await bot.settle()
        assert deployer.runs == ["api"]

        # Bob asks again; Carol's message joins his reply before the model calls the tool.
        model = held_deploy("web")
        llm_server.handler = model
        await joins(bot, caplog, model, ("om_2", BOB), ("om_3", CAROL))
        card = await first_card(bot, "om_2")
        assert deployer.runs == ["api"]  # no silent run under Bob's grant
        text = card_text(bot, card)
        assert f"**Requested by** <at id={BOB}></at> and <at id={CAROL}></at>" in text
        # The console and the audit row name them both.
        async with bot.session.get(
            bot.url + "/api/approvals", headers={"Authorization": f"Bearer {TOKEN}"}
        ) as response:
            (listed,) = (await response.json())["approvals"]
        assert (listed["requester"], listed["requesters"]) == (BOB, [BOB, CAROL])
        # Its approvers are the ones allowed for both alike (the admins): Bob may not.
        assert listed["approvers"] == [ADMIN]
        refused = await bot.click(
            value_for(card, "approve"), by=BOB, card_message_id=card.message_id, chat_id="oc_team"
        )
        assert refused["toast"]["type"] != "success"
        await bot.click(
            value_for(card, "approve_session"),
            by=ADMIN,
            card_message_id=card.message_id,
            chat_id="oc_team",
        )
        await bot.reply("om_2")
        await bot.settle()
        assert deployer.runs == ["api", "web"]
        [entry] = await AuditLog(bot.services.database).recent(
            limit=1, action="approval.approved_session"
        )
        assert (entry.detail["requester"], entry.detail["requesters"]) == (BOB, [BOB, CAROL])

        # That card named Carol too: her own request now runs under the grant it gave...
        llm_server.handler = deploying(["db"])
        await bot.say("om_4", "@_user_1 deploy db", sender_open_id=CAROL, **GROUP)
        await bot.reply("om_4")
        await bot.settle()
        assert approval_cards(bot, "om_4") == []
        assert deployer.runs == ["api", "web", "db"]
        # ... and a reply Dave's message joined, who was on no card, asks again for all.
        model = held_deploy("cache")
        llm_server.handler = model
        await joins(bot, caplog, model, ("om_5", CAROL), ("om_6", DAVE))
        card = await first_card(bot, "om_5")
        assert f"<at id={CAROL}></at> and <at id={DAVE}></at>" in card_text(bot, card)
        assert deployer.runs == ["api", "web", "db"]
        await bot.click(
            value_for(card, "deny"), by=ADMIN, card_message_id=card.message_id, chat_id="oc_team"
        )
        await bot.reply("om_5")
        await bot.settle()


async def test_when_each_approves_their_own_a_joined_call_is_refused_with_the_reason(
    tmp_path, feishu, llm_server, caplog
):
    caplog.set_level(logging.INFO, logger="bot.runtime.intake.routing")
    deployer = Deployer()
    model = held_deploy("api")
    llm_server.handler = model
    settings = settings_for(
        tmp_path,
        feishu,
        llm_server,
        larkgate_admins=ADMIN,
        larkgate_approvers="requester",
        larkgate_group_scope="chat",
    )
    async with running_bot(settings, feishu, llm_server, tools=[deployer.tool()]) as bot:
        await joins(bot, caplog, model, ("om_1", BOB), ("om_2", CAROL))
        answer = await bot.reply("om_1")
        await bot.settle()
        assert deployer.runs == []  # the tool never ran
        assert approval_cards(bot, "om_1") == []  # and no card waits for anyone
        (observation,) = observations(bot)
        assert "in a message of their own" in observation
        assert "in a message of their own" in answer  # the model relays why


async def test_a_joined_reply_counts_against_every_askers_budget(
    tmp_path, feishu, llm_server, caplog
):
    caplog.set_level(logging.INFO, logger="bot.runtime.intake.routing")
    cost = costing({"prompt_tokens": 700})
    model = Held(cost)
    llm_server.handler = model
    settings = settings_for(
        tmp_path,
        feishu,
        llm_server,
        larkgate_group_scope="chat",
        larkgate_user_daily_tokens=1000,
        larkgate_group_daily_tokens=5000,
    )
    async with running_bot(settings, feishu, llm_server) as bot:
        await joins(bot, caplog, model, ("om_1", BOB), ("om_2", CAROL))
        await bot.reply("om_1")
        await bot.settle()
        budgets = bot.services.governance.budgets
        used = await UsageStore(bot.services.database).usage(
            budgets.today(), [f"user:{BOB}", f"user:{CAROL}", "group:oc_team"]
        )
        # The run's tokens count for each asker, and once for the group.
        (run,) = await RunStore(bot.services.database).recent()
        assert run.total_tokens >= 700
        assert used == {
            f"user:{BOB}": run.total_tokens,
            f"user:{CAROL}": run.total_tokens,
            "group:oc_team": run.total_tokens,
        }
        line = f"each asker today: at most {run.total_tokens:,}/1,000 tokens"
        assert line in footer(bot, "om_1")
        # So Carol, who never asked alone, has spent her day's budget in Bob's reply.
        calls = len(llm_server.requests)
        await bot.say("om_3", "@_user_1 one more", sender_open_id=CAROL, **GROUP)
        assert "today's budget of 1,000 tokens" in await bot.reply("om_3")
        assert len(llm_server.requests) == calls


async def test_a_message_without_words_is_admitted_before_it_joins_a_reply(
    tmp_path, feishu, llm_server, caplog
):
    # A bare mention in reply to a message (the bot reads the message replied to) has no
    # words of its own: it must still pass the budgets before it joins someone's reply.
    caplog.set_level(logging.INFO, logger="bot.runtime.intake.routing")
    cost = costing({"prompt_tokens": 1200})
    llm_server.handler = cost
    settings = settings_for(
        tmp_path, feishu, llm_server, larkgate_group_scope="chat", larkgate_user_daily_tokens=1000
    )
    async with running_bot(settings, feishu, llm_server) as bot:
        await bot.say("om_0", "@_user_1 hello", sender_open_id=CAROL, **GROUP)
        await bot.reply("om_0")
        await bot.settle()  # Carol's day is spent
        model = Held(cost)
        llm_server.handler = model
        await bot.say("om_1", "@_user_1 summarise the thread", sender_open_id=BOB, **GROUP)
        await asyncio.wait_for(model.entered.wait(), 10)
        await bot.say("om_2", "@_user_1", sender_open_id=CAROL, parent_id="om_0", **GROUP)
        refusal = await bot.reply("om_2")
        assert "today's budget of 1,000 tokens" in refusal
        assert "message om_2 joined conversation" not in caplog.text
        model.release.set()
        await bot.reply("om_1")
        await bot.settle()
