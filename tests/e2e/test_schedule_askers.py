"""A reply that answers several people does not schedule, list or cancel as one of them.

In a group conversation everyone shares (scope ``chat``), Carol's message sent while the
bot answers Bob joins Bob's reply: from then on the reply answers both (``bot.askers``).
A task it scheduled would belong to Bob on Carol's word, and later run as Bob (his budgets,
his approvals, his user token). So it schedules nothing, and says why for the model to
relay; it lists and cancels only what both may.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from bot.engine import Tool, tool_from_function
from bot.runtime.schedules.tools import SEVERAL_ASKERS

from e2e.harness import BOT_OPEN_ID, Bot, running_bot, settings_for
from fakes.openai_server import Reply
from support.cards import callback_values
from support.model_calls import is_synthesis
from support.schedules import daily_task

BOB, CAROL, ADMIN = "ou_bob", "ou_carol", "ou_admin"
GROUP_ID = "oc_team"
MENTION = [("@_user_1", BOT_OPEN_ID, "larkgate")]
GROUP = {"chat_type": "group", "chat_id": GROUP_ID, "mentions": MENTION}


def in_an_hour() -> str:
    """An ``at`` an hour from now, read when a test runs (never at import)."""
    return datetime.fromtimestamp(time.time() + 3600, UTC).isoformat()


class Lookup:
    """A read tool that holds its call until the test lets it go, so a message can join the
    running reply at a known point."""

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.release = asyncio.Event()

    def tool(self) -> Tool:
        async def look_up(topic: str) -> str:
            """Look something up.

            Args:
                topic: What to look up.
            """
            self.called.set()
            await self.release.wait()
            return f"nothing known about {topic}"

        return tool_from_function(look_up, name="look_up", side_effect="read", timeout=30)


def looks_up_then(tool: str, arguments: dict[str, Any]) -> Any:
    """A model that looks something up first, then calls ``tool``, then answers with what
    its tools said."""

    def handler(body: dict[str, Any]) -> Reply:
        observations = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if is_synthesis(body):
            return Reply(content="Result: " + body["messages"][-1]["content"][-800:])
        if not observations:
            return Reply(tool_calls=[("c0", "look_up", {"topic": "stretching"})])
        if len(observations) == 1:
            return Reply(tool_calls=[("c1", tool, arguments)])
        return Reply(content="done: " + " | ".join(observations))

    return handler


def observations(bot: Bot) -> list[str]:
    found: list[str] = []
    for request in bot.llm_server.requests:
        for message in request.body["messages"]:
            if message["role"] == "tool" and message["content"] not in found:
                found.append(message["content"])
    return found


async def carol_joins_bobs_reply(bot: Bot, lookup: Lookup, caplog: Any, round_: str = "") -> None:
    """Bob asks in the group; while his reply looks something up, Carol's message joins it."""
    lookup.called.clear()
    lookup.release.clear()
    bobs, carols = f"om_bob{round_}", f"om_carol{round_}"
    await bot.say(bobs, "@_user_1 remind me to stretch", sender_open_id=BOB, **GROUP)
    await asyncio.wait_for(lookup.called.wait(), 10)
    await bot.say(carols, "@_user_1 me too please", sender_open_id=CAROL, **GROUP)
    await bot.wait_for(lambda: f"message {carols} joined conversation" in caplog.text)
    lookup.release.set()
    await bot.reply(bobs)
    await bot.settle()


async def test_a_reply_carol_joined_schedules_nothing_for_bob(tmp_path, feishu, llm_server, caplog):
    caplog.set_level(logging.INFO, logger="bot.runtime.intake.routing")
    lookup = Lookup()
    llm_server.handler = looks_up_then(
        "schedule_task", {"prompt": "Tell the team to stretch", "at": in_an_hour()}
    )
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server, tools=[lookup.tool()]) as bot:
        await carol_joins_bobs_reply(bot, lookup, caplog)
        # Refused before the approval gate: nobody was asked to approve it.
        assert not any(callback_values(m.content) for m in bot.replies_to("om_bob"))
        assert await bot.services.schedules.list(creator=None) == []
        # The model is told why, and what each person should do instead.
        assert SEVERAL_ASKERS in observations(bot)[-1]
        assert "message of their own" in SEVERAL_ASKERS


async def test_carol_joining_while_the_approval_waits_stores_no_task(
    tmp_path, feishu, llm_server, caplog
):
    """The guard saw Bob alone; Carol joins while the approval card waits; the admin
    approves; still no task is stored (the approval gate, and the tool itself when it runs,
    find two askers: ``tests/test_schedule_tools.py`` holds the tool's own check)."""
    caplog.set_level(logging.INFO, logger="bot.runtime.intake.routing")

    def schedules_at_once(body: dict[str, Any]) -> Reply:
        seen = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if is_synthesis(body):
            return Reply(content="Result: " + body["messages"][-1]["content"][-800:])
        if not seen:
            args = {"prompt": "Tell the team to stretch", "at": in_an_hour()}
            return Reply(tool_calls=[("c0", "schedule_task", args)])
        return Reply(content="done: " + " | ".join(seen))

    llm_server.handler = schedules_at_once
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins=ADMIN)
    async with running_bot(settings, feishu, llm_server) as bot:
        await bot.say("om_bob", "@_user_1 remind me to stretch", sender_open_id=BOB, **GROUP)

        def approval() -> Any:
            for message in bot.replies_to("om_bob"):
                for value in callback_values(message.content):
                    if value.get("decision") == "approve":
                        return message, value
            return None

        await bot.wait_for(lambda: approval() is not None)
        await bot.say("om_carol", "@_user_1 me too please", sender_open_id=CAROL, **GROUP)
        await bot.wait_for(lambda: "message om_carol joined conversation" in caplog.text)
        card, value = approval()
        await bot.click(value, by=ADMIN, card_message_id=card.message_id, chat_id=GROUP_ID)
        await bot.reply("om_bob")
        await bot.settle()
        assert await bot.services.schedules.list(creator=None) == []
        assert not any(seen.startswith("Scheduled task") for seen in observations(bot))


async def add_task(bot: Bot, creator: str, prompt: str) -> Any:
    return await daily_task(
        bot.services.schedules, creator=creator, chat_id=GROUP_ID, prompt=prompt
    )


async def test_a_reply_carol_joined_lists_and_cancels_only_what_both_may(
    tmp_path, feishu, llm_server, caplog
):
    caplog.set_level(logging.INFO, logger="bot.runtime.intake.routing")
    lookup = Lookup()
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server, tools=[lookup.tool()]) as bot:
        bobs = await add_task(bot, BOB, "Water Bob's plants")
        # Listing: Bob's task is Bob's alone to see, so a reply Carol joined lists nothing.
        llm_server.handler = looks_up_then("list_scheduled_tasks", {})
        await carol_joins_bobs_reply(bot, lookup, caplog, "_list")
        listed = observations(bot)[-1]
        assert listed == "No scheduled tasks." and "Water Bob" not in json.dumps(observations(bot))
        # Cancelling: Bob may, Carol may not, so the reply may not (refused before anyone
        # is asked to approve it).
        llm_server.handler = looks_up_then("cancel_scheduled_task", {"task_id": bobs.id})
        await carol_joins_bobs_reply(bot, lookup, caplog, "_cancel")
        assert not any(callback_values(m.content) for m in bot.replies_to("om_bob_cancel"))
        (task,) = await bot.services.schedules.list(creator=BOB)
        assert task.state == "active"
        assert "must hold for each of them" in observations(bot)[-1]
