"""The web console in a real browser: sign in, watch a live run's tool call and streaming
answer, approve the pending approval, switch read-only mode, cancel a scheduled task."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.harness import BOT_OPEN_ID, Bot, running_bot, settings_for
from fakes.feishu_server import FakeFeishu
from fakes.openai_server import FakeOpenAIServer, Reply
from support.deploy import Deployer
from support.model_calls import is_synthesis
from support.waiting import wait_until

TOKEN = "console-browser-token"
ADMIN = "ou_admin"
USER = "ou_user"  # the sender of the harness's messages
ANSWER = "Deployed api to production; the tool said: api deployed."


def deploying(body: dict[str, Any]) -> Reply:
    """Calls ``deploy`` once, then streams its answer slowly enough to watch."""
    assert not is_synthesis(body)  # the final reply is the answer
    if not any(m["role"] == "tool" for m in body["messages"]):
        return Reply(tool_calls=[("c1", "deploy", {"service": "api"})], usage={"prompt_tokens": 5})
    return Reply(content=ANSWER, chunk_size=3, chunk_interval=0.05, usage={"prompt_tokens": 9})


@pytest.fixture
async def bot(tmp_path, deployer) -> AsyncIterator[tuple[Bot, Deployer]]:
    async with FakeFeishu(bot_open_id=BOT_OPEN_ID) as feishu, FakeOpenAIServer() as llm_server:
        llm_server.handler = deploying
        settings = settings_for(
            tmp_path, feishu, llm_server, larkgate_console_token=TOKEN, larkgate_admins=ADMIN
        )
        async with running_bot(settings, feishu, llm_server, tools=[deployer.tool()]) as running:
            yield running, deployer


async def pending_approvals(bot: Bot) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {TOKEN}"}

    async def approvals() -> list[dict[str, Any]]:
        async with bot.session.get(bot.url + "/api/approvals", headers=headers) as resp:
            return (await resp.json())["approvals"]

    return await wait_until(approvals, 15.0, every=0.02, failure="no approval was asked for")


async def test_console_sign_in_watch_approve_and_read_only(bot, browser_page, shoot):
    bot, deployer = bot
    page = browser_page
    await page.goto(bot.url + "/console")
    await page.locator("#signin-form").wait_for()
    await shoot(page, "console-signin")

    # A wrong token is refused and the sign-in form stays.
    await page.fill("#token", "wrong")
    await page.click("#signin-form button[type=submit]")
    await page.get_by_text("The token was refused.").wait_for()
    assert await page.locator("#app").is_hidden()

    # A user asks for a deploy: the write tool waits for an admin's approval.
    await bot.say("om_1", "deploy api please")
    (approval,) = await pending_approvals(bot)
    assert approval["tool"] == "deploy" and deployer.runs == []

    await page.fill("#token", TOKEN)
    await page.click("#signin-form button[type=submit]")
    await page.locator("#app").wait_for()
    live_row = page.locator("tr.run", has_text="● running")
    await live_row.wait_for()
    await page.locator("#approvals button.approve").wait_for()
    assert USER in await page.locator("#approvals").inner_text()
    await shoot(page, "console-runs")

    # The live run: its tool-call card shows the call waiting, with its arguments.
    await live_row.click()
    card = page.locator('details.step[data-call="c1"]')
    await card.wait_for()
    assert (await card.locator("summary").inner_text()).startswith("deploy")
    assert await card.locator(".state").inner_text() == "running…"
    await card.locator("summary").click()  # open it: the arguments
    assert '"service": "api"' in await card.locator("pre").first.inner_text()
    await shoot(page, "console-run-live")

    # Approve from the console: the tool runs, then the answer streams in.
    await page.click("#approvals button.approve")
    await page.get_by_text("Nothing waits for a decision.").wait_for()
    await card.locator(".state.ok").wait_for()
    await page.locator("#answer:not(:empty)").wait_for()  # (the page's CSP forbids eval)
    await shoot(page, "console-run-streaming")
    await page.locator("#done:not(:empty)").wait_for()
    assert await page.locator("#answer").inner_text() == ANSWER
    assert (await page.locator("#done").inner_text()).startswith("completed")
    assert "api deployed" in await card.locator(".result pre").inner_text()
    assert deployer.runs == ["api"]
    await page.click("#refresh-runs")
    await page.locator("tr.run.current", has_text="completed").wait_for()
    await shoot(page, "console-run-done")

    # Read-only mode, switched as the admin, shows who switched it and is audited.
    assert not (await bot.services.governance.org.read_only()).on
    await page.check("#readonly")
    await page.get_by_text(f"Last switched by {ADMIN}").wait_for()
    await page.locator("#audit tr", has_text="readonly.on").wait_for()
    assert (await bot.services.governance.org.read_only()).on
    await shoot(page, "console-readonly")

    # A scheduled task is listed with its schedule in words; Cancel (confirmed) ends it.
    task = await bot.services.schedules.create(
        name="Morning digest",
        prompt="Post the open tasks",
        creator=USER,
        chat_id="oc_team",
        chat_type="group",
        thread_id="",
        reply_to="",
        kind="cron",
        expression="0 9 * * 1-5",
        timezone="UTC",
        next_run_at=time.time() + 86_400,
        created_in_run="",
        max_per_creator=20,
    )
    await page.click("#refresh-schedules")
    row = page.locator(f'#schedules tr[data-task="{task.id}"]')
    await row.get_by_text("every weekday at 09:00 (UTC)").wait_for()
    page.once("dialog", lambda dialog: dialog.accept())
    await row.locator("button", has_text="Cancel").click()
    await page.get_by_text("No scheduled tasks.").wait_for()
    await page.locator("#audit tr", has_text="schedule.cancelled").wait_for()
    assert (await bot.services.schedules.get(task.id)).state == "cancelled"

    # Without LARKGATE_TOKEN_KEY, the console says per-user authorisation is off.
    await page.get_by_text("Per-user authorisation is off").wait_for()


async def test_console_revokes_a_persons_authorisation(tmp_path, browser_page, shoot):
    from bot.oauth_tokens import UserTokens

    from support.user_auth import TOKEN_KEY

    page = browser_page
    async with FakeFeishu(bot_open_id=BOT_OPEN_ID) as feishu, FakeOpenAIServer() as llm_server:
        settings = settings_for(
            tmp_path,
            feishu,
            llm_server,
            larkgate_console_token=TOKEN,
            larkgate_admins=ADMIN,
            larkgate_token_key=TOKEN_KEY,
        )
        async with running_bot(settings, feishu, llm_server) as bot:
            now = time.time()
            granted = UserTokens(
                USER, "u-secret", "ur-secret", now + 7200, now + 86400, "task:read"
            )
            await bot.services.user_auth.tokens.save(USER, granted)
            await page.goto(bot.url + "/console")
            await page.fill("#token", TOKEN)
            await page.click("#signin-form button[type=submit]")
            row = page.locator(f'#authorizations tr[data-person="{USER}"]')
            await row.get_by_text("task:read").wait_for()
            assert "u-secret" not in await page.content()  # never sent to the console
            await shoot(page, "console-authorizations")
            page.once("dialog", lambda dialog: dialog.accept())
            await row.locator("button", has_text="Revoke").click()
            await page.get_by_text("Nobody has let the bot act as them.").wait_for()
            await page.locator("#audit tr", has_text="user_auth.revoked").wait_for()
            assert await bot.services.user_auth.tokens.get(USER) is None


async def test_console_shows_a_plan_as_a_checklist_with_each_steps_calls(
    tmp_path, browser_page, shoot
):
    from support.plan_model import PlanModel, StepScript, Weather, plan_of

    cities = ("Paris", "London", "Tokyo")
    weather = Weather(held=True)
    model = PlanModel(
        plans=[
            plan_of(
                *((f"s{i}", f"Weather in {c}", ()) for i, c in enumerate(cities, 1)),
                ("s4", "Compare the three", ("s1", "s2", "s3")),
            )
        ],
        steps={f"Weather in {c}": StepScript.calling(("weather", {"city": c})) for c in cities},
    )
    async with FakeFeishu(bot_open_id=BOT_OPEN_ID) as feishu, FakeOpenAIServer() as llm_server:
        llm_server.handler = model
        settings = settings_for(tmp_path, feishu, llm_server, larkgate_console_token=TOKEN)
        async with running_bot(settings, feishu, llm_server, tools=[weather.tool()]) as bot:
            await bot.say("om_1", "/plan What is the weather in Paris, London and Tokyo?")
            await wait_until(lambda: weather.running == 3, 15.0, every=0.02)
            page = browser_page
            await page.goto(bot.url + "/console")
            await page.fill("#token", TOKEN)
            await page.click("#signin-form button[type=submit]")
            await page.locator("tr.run", has_text="● running").click()
            steps = page.locator("#plan li.plan-step")
            await page.locator("#plan li.plan-step.state-pending").wait_for()
            assert await steps.count() == 4
            assert await page.locator("#plan li.state-running").count() == 3
            assert await page.locator("#plan .phase").inner_text() == "Running the plan"
            paris = page.locator('#plan li[data-step="s1"]')
            assert "Weather in Paris" in await paris.locator(".task").inner_text()
            # Each tool call sits under its step.
            await paris.locator("details.step summary", has_text="weather").wait_for()
            combine = page.locator('#plan li[data-step="s4"]')
            assert "(after s1, s2, s3)" in await combine.locator(".deps").inner_text()
            await shoot(page, "console-plan-running")
            weather.release.set()
            await page.locator("#done:not(:empty)").wait_for()
            assert await page.locator("#plan li.state-completed").count() == 4
            assert await page.locator("#plan .phase").inner_text() == "Plan finished"
            assert "Paris: sunny" in await page.locator("#answer").inner_text()
            assert await page.locator("#steps details").count() == 0  # none outside a step
            await shoot(page, "console-plan-done")
