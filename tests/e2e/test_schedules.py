"""Scheduled tasks end to end: the model schedules through its tool (an approval, as for any
write), the clock moves, and the task fires in its chat as a header message with a live
answer under it; once per due time, across a restart; cancelled from the /schedules card;
refused inside a scheduled run; missed beyond the grace."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from bot.schedules import Schedule

from e2e.harness import Bot, running_bot, settings_for
from fakes.openai_server import Reply
from support.cards import callback_values
from support.deploy import Deployer, deploying
from support.model_calls import is_synthesis

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
        if is_synthesis(body):
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


async def test_a_one_off_task_fires_once_in_its_chat(tmp_path, feishu, llm_server, clock, caplog):
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
    # The run's message is the bot's own header, never claimed: the journal has no claim of
    # it to complete, and says nothing about one.
    assert not [r for r in caplog.records if "no longer holds" in r.getMessage()]


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


ADMIN = "ou_admin"


async def add_task(
    bot: Bot, clock: Clock, prompt: str, *, cron: str = "0 * * * *", first_in: float | None = None
):
    """A task of USER's in CHAT straight into the store, as schedule_task makes it; first due
    ``first_in`` seconds from now (a card clicked after it stays within the signed window),
    or at its cron's next time."""
    schedule = Schedule.stored("cron", cron, "UTC")
    first = schedule.next_timestamp_after(clock.now) if first_in is None else clock.now + first_in
    task = await bot.services.schedules.create(
        name=prompt,
        prompt=prompt,
        creator=USER,
        chat_id=CHAT,
        chat_type="p2p",
        thread_id="",
        reply_to="",
        kind="cron",
        expression=cron,
        timezone="UTC",
        next_run_at=first,
        created_in_run="",
        max_per_creator=20,
    )
    bot.services.scheduled_runs.wake()
    return task


async def fire(bot: Bot, clock: Clock, fired: int) -> Any:
    """Move the clock just past the task's due time; its ``fired``-th header once posted."""
    clock.now = (await _task(bot)).next_run_at + 1
    bot.services.scheduled_runs.wake()
    await bot.wait_for(lambda: len(headers(bot)) == fired)
    return headers(bot)[-1]


def deploy_when_fired(body: dict[str, Any]) -> Reply:
    """Deploys api when the fired prompt says so; anything else is answered."""
    question = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
    if "Deploy api" in str(question):
        return deploying(["api"])(body)
    return Reply(content=f"Answer: {question}")


async def test_a_write_in_a_scheduled_run_asks_for_approval_under_its_header(
    tmp_path, feishu, llm_server, clock
):
    deployer = Deployer()
    llm_server.handler = deploy_when_fired
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(
        settings, feishu, llm_server, tools=[deployer.tool()], clock=clock
    ) as bot:
        await add_task(bot, clock, "Deploy api to production", first_in=60)
        header = await fire(bot, clock, 1)
        assert header.chat_id == CHAT
        # The approval card: under the header, in the task's chat; the creator approves
        # (no admins: the requester is the approver).
        await bot.wait_for(
            lambda: any(callback_values(m.content) for m in bot.replies_to(header.message_id))
        )
        (card,) = [m for m in bot.replies_to(header.message_id) if callback_values(m.content)]
        assert card.chat_id == CHAT and "deploy" in json.dumps(card.content)
        assert deployer.runs == []
        await approve_everything(bot, header.message_id)
        await bot.wait_for(lambda: outcome_is(bot, "ok"))
        await bot.settle()
        assert deployer.runs == ["api"]  # once
        (approval,) = await bot.services.governance.audit.recent(action="approval.approved")
        assert approval.actor == USER


async def test_read_only_mode_holds_in_a_scheduled_run(tmp_path, feishu, llm_server, clock):
    deployer = Deployer()
    llm_server.handler = deploy_when_fired
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins=ADMIN)
    async with running_bot(
        settings, feishu, llm_server, tools=[deployer.tool()], clock=clock
    ) as bot:
        await bot.say("om_ro", "/readonly on", sender_open_id=ADMIN)
        await bot.wait_for(lambda: bool(bot.replies_to("om_ro")))
        assert (await bot.services.governance.org.read_only()).on
        await add_task(bot, clock, "Deploy api to production")
        asked_before = len(llm_server.requests)
        header = await fire(bot, clock, 1)
        await bot.reply(header.message_id)
        await bot.settle()
        fired = [r.body for r in llm_server.requests[asked_before:] if r.body.get("tools")]
        assert fired, "the scheduled run asked the model nothing with tools"
        offered = {t["function"]["name"] for body in fired for t in body["tools"]}
        assert "deploy" not in offered and "list_scheduled_tasks" in offered
        assert deployer.runs == []
        assert not any(callback_values(m.content) for m in bot.replies_to(header.message_id))


def failing_when_fired(body: dict[str, Any]) -> Reply:
    """The model refuses the fired prompt's every request (a 400 is not retried)."""
    question = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
    if "Post the digest" in str(question):
        return Reply.error(400, "the model refused the request")
    return Reply(content=f"Answer: {question}")


async def test_three_failed_firings_in_a_row_pause_the_task_and_tell_its_creator(
    tmp_path, feishu, llm_server, clock
):
    llm_server.handler = failing_when_fired
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_console_token="t")
    async with running_bot(settings, feishu, llm_server, clock=clock) as bot:
        await add_task(bot, clock, "Post the digest")
        for failed in (1, 2, 3):
            header = await fire(bot, clock, failed)
            await bot.wait_for(lambda n=failed: failures_are(bot, n))
            # The card under the header says what failed.
            assert "language model is not reachable" in await bot.reply(header.message_id)
        task = await _task(bot)
        assert task.state == "paused" and task.next_run_at is not None
        assert task.last_outcome.startswith("failed: the run ended: error")
        dm = f"oc_p2p_{USER}"
        await bot.wait_for(lambda: any(m.chat_id == dm for m in bot.feishu.sent))
        (told,) = [m for m in bot.feishu.sent if m.chat_id == dm]
        assert "paused" in told.content["text"] and "Post the digest" in told.content["text"]
        # Paused: the next due time passes and nothing fires.
        clock.now = task.next_run_at + 1
        bot.services.scheduled_runs.wake()
        await bot.settle()
        assert len(headers(bot)) == 3
        # The console shows it paused, with the last outcome.
        async with bot.session.get(
            bot.url + "/api/schedules", headers={"Authorization": "Bearer t"}
        ) as resp:
            (listed,) = (await resp.json())["schedules"]
        assert listed["state"] == "paused" and listed["last_outcome"] == task.last_outcome


async def failures_are(bot: Bot, count: int) -> bool:
    return (await _task(bot)).failures == count


async def test_a_task_without_a_time_zone_is_read_in_its_creators_feishu_zone(
    tmp_path, feishu, llm_server, clock
):
    feishu.workspace.add_user(USER, "Ada", time_zone="America/New_York")
    llm_server.handler = scheduling(prompt="Morning digest", cron="0 9 * * 1-5")
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_timezone="Asia/Shanghai")
    async with running_bot(settings, feishu, llm_server, clock=clock) as bot:
        await schedule(bot)
        task = await _task(bot)
    assert task.timezone == "America/New_York"
    due = datetime.fromtimestamp(task.next_run_at, UTC).astimezone(ZoneInfo("America/New_York"))
    assert (due.hour, due.minute) == (9, 0) and due.isoweekday() <= 5


async def test_without_a_known_zone_the_bots_zone_is_used(tmp_path, feishu, llm_server, clock):
    llm_server.handler = scheduling(prompt="Morning digest", cron="0 9 * * *")
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_timezone="Europe/Berlin")
    async with running_bot(settings, feishu, llm_server, clock=clock) as bot:
        await schedule(bot)  # no such person in the directory: no zone from Feishu
        assert (await _task(bot)).timezone == "Europe/Berlin"
