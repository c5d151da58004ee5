"""Scheduled tasks end to end: the model schedules through its tool (an approval, as for any
write), the clock moves, and the task fires in its chat as a header message with a live
answer under it; once per due time, across a restart; cancelled from the /schedules card;
refused inside a scheduled run; missed beyond the grace."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from e2e.harness import Bot, running_bot, settings_for
from fakes.openai_server import Reply
from support.cards import callback_values

USER = "ou_user"
CHAT = "oc_dm"


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat()


def scheduling(**arguments: Any):
    """A model that schedules a task when asked, and answers a fired task's prompt."""

    def handler(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        if body.get("stream"):
            question = messages[-1]["content"].split("\n\n")[0].removeprefix("Question: ")
            return Reply(content=f"Answer: {question}")
        question = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        tool_results = [m["content"] for m in messages if m["role"] == "tool"]
        if "remind me" in str(question) and not tool_results:
            return Reply(tool_calls=[("s1", "schedule_task", arguments)])
        if tool_results:
            return Reply(content=f"Done: {tool_results[-1]}")
        return Reply(content=f"Fired: {question}")

    return handler


def headers(bot: Bot) -> list[Any]:
    return [
        m
        for m in bot.feishu.sent
        if m.msg_type == "text" and "Scheduled task" in str(m.content.get("text", ""))
    ]


async def approve_everything(bot: Bot, message_id: str) -> None:
    """Press Approve on the approval card under ``message_id`` (the requester approves)."""

    def card():
        for message in bot.replies_to(message_id):
            for value in callback_values(message.content):
                if value.get("decision") == "approve":
                    return message, value
        return None

    await bot.wait_for(lambda: card() is not None)
    message, value = card()
    await bot.click(value, by=USER, card_message_id=message.message_id, chat_id=CHAT)


async def schedule(bot: Bot, message_id: str = "om_ask") -> None:
    await bot.say(message_id, "remind me to stretch")
    await approve_everything(bot, message_id)
    await bot.reply(message_id)
    await bot.settle()


@pytest.fixture
def clock() -> Clock:
    return Clock(time.time())


async def test_a_one_off_task_fires_once_in_its_chat(tmp_path, feishu, llm_server, clock):
    llm_server.handler = scheduling(prompt="Tell me to stretch", at=iso(clock.now + 3600))
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server, clock=clock) as bot:
        await schedule(bot)
        results = [
            m["content"]
            for r in llm_server.requests
            for m in r.body["messages"]
            if m["role"] == "tool"
        ]
        assert any(result.startswith("Scheduled task ") for result in results)
        (task,) = await bot.services.schedules.list(creator=USER)
        assert task.creator == USER and task.chat_id == CHAT
        assert headers(bot) == []

        clock.now += 3601
        bot.services.scheduled_runs.wake()
        await bot.wait_for(lambda: bool(headers(bot)))
        (header,) = headers(bot)
        assert header.chat_id == CHAT
        await bot.wait_for(lambda: bool(bot.replies_to(header.message_id)))
        answer = await bot.reply(header.message_id)
        assert "Tell me to stretch" in answer

        clock.now += 3600
        bot.services.scheduled_runs.wake()
        await bot.settle()
        assert len(headers(bot)) == 1  # a one-off fires once
        await bot.wait_for(lambda: outcome_is(bot, "ok"))
        assert (await _task(bot)).state == "done"


async def test_a_cron_task_fires_on_each_due_time_and_across_a_restart(
    tmp_path, feishu, llm_server, clock
):
    llm_server.handler = scheduling(prompt="Post the open tasks", cron="0 * * * *", timezone="UTC")
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server, clock=clock) as bot:
        await schedule(bot)
        for fired in (1, 2):
            clock.now = (await _task(bot)).next_run_at + 1  # just past the due hour
            bot.services.scheduled_runs.wake()
            await bot.wait_for(lambda n=fired: len(headers(bot)) == n)
            await bot.reply(headers(bot)[-1].message_id)
            await bot.settle()
    # The bot stops and starts again: the task is still there and fires on its next hour.
    async with running_bot(settings, feishu, llm_server, clock=clock) as bot:
        clock.now = (await _task(bot)).next_run_at + 1
        bot.services.scheduled_runs.wake()
        await bot.wait_for(lambda: len(headers(bot)) == 3)
        await bot.reply(headers(bot)[-1].message_id)
        (task,) = await bot.services.schedules.list(creator=USER)
        assert task.state == "active" and task.failures == 0


async def test_a_misfire_beyond_the_grace_is_recorded_and_the_next_time_kept(
    tmp_path, feishu, llm_server, clock
):
    llm_server.handler = scheduling(prompt="Daily report", cron="0 9 * * *", timezone="UTC")
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server, clock=clock) as bot:
        await schedule(bot)
        (task,) = await bot.services.schedules.list(creator=USER)
    # Down for longer than the grace (10 minutes) past the due time.
    clock.now = task.next_run_at + 3600
    async with running_bot(settings, feishu, llm_server, clock=clock) as bot:
        bot.services.scheduled_runs.wake()

        async def recorded() -> bool:
            return (await _task(bot)).last_outcome == "missed"

        await bot.wait_for(recorded)
        missed = await _task(bot)
        assert missed.last_outcome == "missed"
        assert missed.next_run_at == task.next_run_at + 86400
        assert headers(bot) == []


async def outcome_is(bot: Bot, outcome: str) -> bool:
    return (await _task(bot)).last_outcome == outcome


async def _task(bot: Bot):
    (task,) = await bot.services.schedules.list(creator=USER)
    return task


async def test_schedules_card_cancels_and_only_for_the_creator(tmp_path, feishu, llm_server, clock):
    llm_server.handler = scheduling(prompt="Weekly sync notes", cron="0 10 * * 1")
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server, clock=clock) as bot:
        await schedule(bot)
        await bot.say("om_list", "/schedules")
        await bot.wait_for(lambda: bool(bot.replies_to("om_list")))
        card = bot.replies_to("om_list")[0]
        assert "Weekly sync notes" in json.dumps(card.content, ensure_ascii=False)
        (value,) = [v for v in callback_values(card.content) if v.get("op") == "cancel"]

        stranger = await bot.click(value, by="ou_stranger", card_message_id=card.message_id)
        assert stranger["toast"]["type"] == "error"
        assert (await _task(bot)).state == "active"

        answer = await bot.click(
            value, by=USER, card_message_id=card.message_id, event_id="evt_cancel_2"
        )
        assert answer["toast"]["type"] == "success"
        assert (await bot.services.schedules.list(creator=USER)) == []
        (entry,) = await bot.services.governance.audit.recent(action="schedule.")
        assert (entry.action, entry.actor, entry.detail["via"]) == (
            "schedule.cancelled",
            USER,
            "card",
        )


async def test_a_scheduled_run_cannot_schedule_tasks(tmp_path, feishu, llm_server, clock):
    # The fired prompt itself says "remind me": the model tries to schedule from inside it.
    llm_server.handler = scheduling(prompt="remind me again tomorrow", at=iso(clock.now + 3600))
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server, clock=clock) as bot:
        await schedule(bot)
        clock.now += 3601
        bot.services.scheduled_runs.wake()
        await bot.wait_for(lambda: bool(headers(bot)))
        answer = await bot.reply(headers(bot)[0].message_id)
        assert "cannot schedule" in answer
        # Refused before the approval gate: nobody was asked to approve it.
        assert not any(
            callback_values(m.content) for m in bot.replies_to(headers(bot)[0].message_id)
        )
        assert len(await bot.services.schedules.list(creator=USER)) == 1
