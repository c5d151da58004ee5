"""Read-only org mode end to end: admins switch it from the chat or the admin card; write
tools disappear from what the model is sent and are refused at dispatch."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bot.engine import tool_from_function
from bot.store.audit import AuditLog

from e2e.harness import BOT_OPEN_ID, Bot, running_bot, settings_for
from fakes.openai_server import Reply
from support.cards import callback_values
from support.model_calls import is_synthesis

ADMIN = "ou_admin"
MENTION = [("@_user_1", BOT_OPEN_ID, "larkgate")]


class Tools:
    def __init__(self) -> None:
        self.deployed: list[str] = []
        self.release = asyncio.Event()
        self.checking = asyncio.Event()

    def all(self):
        async def deploy(service: str) -> str:
            """Deploy a service to production."""
            self.deployed.append(service)
            return f"{service} deployed"

        async def status(service: str) -> str:
            """Health of a service."""
            self.checking.set()
            await self.release.wait()
            return f"{service}: healthy"

        return [
            tool_from_function(deploy, side_effect="write"),
            tool_from_function(status, side_effect="read"),
        ]


def check_then_deploy(body: dict[str, Any]) -> Reply:
    """Checks the status first, then deploys; echoes the trace when answering."""
    if is_synthesis(body):
        return Reply(content="Result: " + body["messages"][-1]["content"])
    observations = [m for m in body["messages"] if m["role"] == "tool"]
    if not observations:
        return Reply(tool_calls=[("c1", "status", {"service": "api"})])
    if len(observations) == 1:
        return Reply(tool_calls=[("c2", "deploy", {"service": "api"})])
    return Reply(content="done")


# The bot's own tools: scheduled tasks, asking the person, and memory (the bot's own notes,
# reads to read-only mode: nothing outside the bot changes).
SCHEDULE_TOOLS = {
    "schedule_task", "list_scheduled_tasks", "cancel_scheduled_task", "ask_user", "remember",
    "forget",
}  # fmt: skip


def all_offered(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or []}


def offered(body: dict[str, Any]) -> list[str]:
    """The tests' tools offered (the scheduled-task tools aside)."""
    return sorted(all_offered(body) - SCHEDULE_TOOLS)


def card_text(bot: Bot, message_id: str) -> str:
    return json.dumps([m.content for m in bot.replies_to(message_id)], ensure_ascii=False)


async def command(bot: Bot, message_id: str, text: str, **fields: Any) -> str:
    await bot.say(message_id, text, **fields)
    await bot.wait_for(lambda: bool(bot.replies_to(message_id)))
    return card_text(bot, message_id)


def start(tmp_path, feishu, llm_server, tools: Tools, **overrides: Any):
    llm_server.handler = check_then_deploy
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins=ADMIN, **overrides)
    return running_bot(settings, feishu, llm_server, tools=tools.all())


async def test_admin_switches_read_only_and_others_are_refused(tmp_path, feishu, llm_server):
    tools = Tools()
    async with start(tmp_path, feishu, llm_server, tools) as bot:
        refused = await command(bot, "om_r1", "/readonly on")  # from ou_user, not an admin
        assert "Only an admin" in refused
        assert "off" in await command(bot, "om_r2", "/readonly status", sender_open_id=ADMIN)

        on = await command(bot, "om_r3", "/readonly on", sender_open_id=ADMIN, chat_id="oc_ops")
        assert "Read-only mode is now **on**" in on and f"<at id={ADMIN}></at>" in on
        assert "already" in await command(bot, "om_r4", "/readonly on", sender_open_id=ADMIN)
        assert "**on**" in await command(bot, "om_r5", "/readonly status", sender_open_id=ADMIN)
        # In a group, with a mention.
        group = {"chat_type": "group", "chat_id": "oc_team", "mentions": MENTION}
        off = await command(bot, "om_r6", "@_user_1 /readonly off", sender_open_id=ADMIN, **group)
        assert "Read-only mode is now **off**" in off
        usage = await command(bot, "om_r7", "/readonly sideways", sender_open_id=ADMIN)
        assert "Usage" in usage

        audit = await AuditLog(bot.services.database).recent(limit=20)
        actions = [(a.action, a.actor, a.chat_id) for a in reversed(audit)]
        assert actions == [
            ("admin.refused", "ou_user", "oc_dm"),
            ("admin.readonly_status", ADMIN, "oc_dm"),
            ("readonly.on", ADMIN, "oc_ops"),
            ("admin.readonly_unchanged", ADMIN, "oc_dm"),
            ("admin.readonly_status", ADMIN, "oc_dm"),
            ("readonly.off", ADMIN, "oc_team"),
        ]


async def test_write_tools_vanish_and_the_mode_survives_a_restart(tmp_path, feishu, llm_server):
    tools = Tools()
    tools.release.set()
    async with start(tmp_path, feishu, llm_server, tools) as bot:
        await command(bot, "om_w1", "/readonly on", sender_open_id=ADMIN)
    async with start(tmp_path, feishu, llm_server, tools) as bot:
        assert "**on**" in await command(bot, "om_w2", "/readonly status", sender_open_id=ADMIN)
        await bot.say("om_w3", "is api healthy? then deploy it")
        await bot.reply("om_w3")
        await bot.settle()
        loop_calls = [r.body for r in llm_server.requests if not is_synthesis(r.body)]
        assert loop_calls and all(
            # Memory is the bot's own notes: it stays (nothing outside the bot changes).
            all_offered(body)
            == {"status", "list_scheduled_tasks", "ask_user", "remember", "forget"}
            for body in loop_calls
        )
        # Even a model that names the write tool anyway cannot run it.
        assert tools.deployed == []
        await command(bot, "om_w4", "/readonly off", sender_open_id=ADMIN)
        llm_server.requests.clear()
        await bot.say("om_w5", "check api")
        await bot.wait_for(lambda: bool(llm_server.requests))
        assert offered(llm_server.requests[0].body) == ["deploy", "status"]


async def test_a_run_in_progress_is_blocked_from_its_next_write(tmp_path, feishu, llm_server):
    tools = Tools()
    async with start(tmp_path, feishu, llm_server, tools) as bot:
        await bot.say("om_p1", "check api, then deploy it")
        await tools.checking.wait()
        # The run was offered the write tool; the admin freezes writes while it checks.
        await command(bot, "om_p2", "/readonly on", sender_open_id=ADMIN, chat_id="oc_admin")
        tools.release.set()
        answer = await bot.reply("om_p1")
        await bot.settle()
        replies = card_text(bot, "om_p1")
    assert tools.deployed == []
    assert "read-only mode" in answer
    # Refused before any approval was asked for.
    assert "Approval ID" not in replies


async def test_the_admin_card_toggles_the_mode(tmp_path, feishu, llm_server):
    tools = Tools()
    async with start(tmp_path, feishu, llm_server, tools) as bot:
        refused = await command(bot, "om_a1", "/admin")
        assert "Only an admin" in refused
        await bot.say("om_a2", "/admin", sender_open_id=ADMIN, chat_id="oc_ops")
        await bot.wait_for(lambda: bool(bot.replies_to("om_a2")))
        (card,) = bot.replies_to("om_a2")
        (value,) = callback_values(card.content)
        assert {k: value[k] for k in ("action", "setting", "value", "version")} == {
            "action": "admin",
            "setting": "read_only",
            "value": "on",
            "version": 0,
        }
        assert len(value["seal"]) == 32  # only a value this bot rendered switches anything

        stranger = await bot.click(value, by="ou_user", card_message_id=card.message_id)
        assert stranger["toast"]["type"] == "error" and "card" not in stranger
        assert "**off**" in await command(bot, "om_a3", "/readonly status", sender_open_id=ADMIN)

        clicked = await bot.click(
            value, by=ADMIN, card_message_id=card.message_id, chat_id="oc_ops"
        )
        assert clicked["toast"]["type"] == "success"
        (toggle_off,) = callback_values(clicked["card"]["data"])
        assert toggle_off["value"] == "off"
        # Announced in the chat where it was switched.
        await bot.wait_for(
            lambda: any(
                m.chat_id == "oc_ops" and "now **on**" in json.dumps(m.content, ensure_ascii=False)
                for m in feishu.sent
                if m.reply_to is None
            )
        )
        # The card was rendered for version 0; the mode is at version 1 now: stale, and the
        # answer shows the current state instead of switching anything.
        again = await bot.click(value, by=ADMIN, card_message_id=card.message_id, chat_id="oc_ops")
        assert again["toast"]["type"] == "warning" and "out of date" in again["toast"]["content"]
        assert callback_values(again["card"]["data"])[0]["value"] == "off"
        assert "**on**" in await command(bot, "om_a4", "/readonly status", sender_open_id=ADMIN)
        audit = await AuditLog(bot.services.database).recent(action="readonly.")
        assert [a.action for a in audit] == ["readonly.on"]
