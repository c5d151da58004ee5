"""A scheduled firing passes every check a message passes (``bot/runtime/intake/admission.py``).

A group task fires as its creator's message in the group would: not after the group was
taken off the allowlist, not after its creator left the group, not after the bot was
removed from it. Then nothing is posted in the group, the task is paused at once (not after
three failures) and its creator is told why in a direct message, once. A hiccup reading the
member list is a failure of that firing only.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from bot.schedules import Schedule

from e2e.harness import Bot, running_bot, settings_for
from e2e.test_schedules import Clock, headers

USER = "ou_user"
GROUP_ID = "oc_team"
CREATORS_DM = f"oc_p2p_{USER}"  # where the emulator puts what is sent to USER's open_id


@pytest.fixture
def clock() -> Clock:
    return Clock(time.time())


@pytest.fixture
def team(feishu) -> Any:
    """The group, with the creator in it (and the bot)."""
    return feishu.workspace.add_chat(GROUP_ID, "Team", members={USER, "ou_other"})


async def add_group_task(bot: Bot, clock: Clock, prompt: str) -> Any:
    schedule = Schedule.stored("cron", "0 * * * *", "UTC")
    task = await bot.services.schedules.create(
        name=prompt,
        prompt=prompt,
        creator=USER,
        chat_id=GROUP_ID,
        chat_type="group",
        thread_id="",
        reply_to="",
        kind="cron",
        expression="0 * * * *",
        timezone="UTC",
        next_run_at=schedule.next_timestamp_after(clock.now),
        created_in_run="",
        max_per_creator=20,
    )
    bot.services.scheduled_runs.wake()
    return task


async def the_task(bot: Bot) -> Any:
    (task,) = await bot.services.schedules.list(creator=USER)
    return task


def told(bot: Bot) -> list[str]:
    return [m.content.get("text", "") for m in bot.feishu.sent if m.chat_id == CREATORS_DM]


def in_group(bot: Bot) -> list[Any]:
    return [m for m in bot.feishu.sent if m.chat_id == GROUP_ID]


async def fires(bot: Bot, clock: Clock, count: int) -> None:
    """The task's next due time passes and it fires (its ``count``-th header)."""
    clock.now = (await the_task(bot)).next_run_at + 1
    bot.services.scheduled_runs.wake()
    await bot.wait_for(lambda: len(headers(bot)) == count)
    await bot.reply(headers(bot)[-1].message_id)

    async def recorded() -> bool:
        return (await the_task(bot)).last_outcome == "ok"

    await bot.wait_for(recorded)  # the firing is over, not left to be taken over
    await bot.settle()


async def refused(bot: Bot, clock: Clock) -> Any:
    """The task's next due time passes; it is refused, and its creator told. The task."""
    clock.now = (await the_task(bot)).next_run_at + 1
    bot.services.scheduled_runs.wake()
    await bot.wait_for(lambda: bool(told(bot)))

    async def paused() -> bool:
        return (await the_task(bot)).state == "paused"

    await bot.wait_for(paused)
    await bot.settle()
    return await the_task(bot)


async def nothing_more_happens(bot: Bot, clock: Clock, posted: int) -> None:
    """Paused: the next due time passes, and nothing is posted, and nobody told again."""
    task = await the_task(bot)
    clock.now = (task.next_run_at or clock.now) + 3600
    bot.services.scheduled_runs.wake()
    await bot.settle()
    assert len(in_group(bot)) == posted
    assert len(told(bot)) == 1


async def test_a_task_fires_no_more_once_its_group_is_off_the_allowlist(
    tmp_path, feishu, llm_server, clock, team
):
    allowed = settings_for(tmp_path, feishu, llm_server, larkgate_group_allowlist=GROUP_ID)
    async with running_bot(allowed, feishu, llm_server, clock=clock) as bot:
        await add_group_task(bot, clock, "Post the open tasks")
        await fires(bot, clock, 1)  # allowed: it runs in the group
        posted = len(in_group(bot))
    # The operator takes the group off the allowlist and restarts the bot.
    elsewhere = settings_for(tmp_path, feishu, llm_server, larkgate_group_allowlist="oc_other")
    async with running_bot(elsewhere, feishu, llm_server, clock=clock) as bot:
        task = await refused(bot, clock)
        assert len(in_group(bot)) == posted  # nothing posted in the group, no header
        assert task.last_outcome == f"not run: group {GROUP_ID} is not on the allowlist"
        assert task.failures == 0  # paused at once, not counted toward three failures
        (text,) = told(bot)
        assert "Post the open tasks" in text and "is paused" in text
        assert "not on the allowlist" in text
        await nothing_more_happens(bot, clock, posted)


async def test_a_task_fires_no_more_once_its_creator_left_the_group(
    tmp_path, feishu, llm_server, clock, team
):
    async with running_bot(
        settings_for(tmp_path, feishu, llm_server), feishu, llm_server, clock=clock
    ) as bot:
        await add_group_task(bot, clock, "Post the open tasks")
        await fires(bot, clock, 1)
        posted = len(in_group(bot))
        team.members.discard(USER)  # the creator leaves the group
        task = await refused(bot, clock)
        assert len(in_group(bot)) == posted
        assert task.last_outcome == "not run: its creator is no longer a member of the group"
        (text,) = told(bot)
        assert "no longer a member of the group" in text
        await nothing_more_happens(bot, clock, posted)


async def test_a_task_fires_no_more_once_the_bot_was_removed_from_its_group(
    tmp_path, feishu, llm_server, clock, team
):
    async with running_bot(
        settings_for(tmp_path, feishu, llm_server), feishu, llm_server, clock=clock
    ) as bot:
        await add_group_task(bot, clock, "Post the open tasks")
        team.bot_is_member = False
        task = await refused(bot, clock)
        assert in_group(bot) == []
        assert task.last_outcome == "not run: the bot is no longer in the group"
        await nothing_more_happens(bot, clock, 0)


async def test_a_member_list_hiccup_fails_that_firing_only(
    tmp_path, feishu, llm_server, clock, team
):
    async with running_bot(
        settings_for(tmp_path, feishu, llm_server), feishu, llm_server, clock=clock
    ) as bot:
        await add_group_task(bot, clock, "Post the open tasks")
        feishu.fail("GET", r"/chats/.+/members$", 99991400, http_status=429)
        clock.now = (await the_task(bot)).next_run_at + 1
        bot.services.scheduled_runs.wake()

        async def failed_once() -> bool:
            return (await the_task(bot)).failures == 1

        await bot.wait_for(failed_once)
        task = await the_task(bot)
        assert task.state == "active" and told(bot) == []
        (said,) = in_group(bot)  # "not run", where the task runs, as for a budget
        assert "not run" in said.content["text"]
        await fires(bot, clock, 1)  # Feishu answers again: it runs
