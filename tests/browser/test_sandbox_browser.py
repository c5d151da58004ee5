"""``larkgate dev``'s chat page in a real browser: a streamed DM answer, an approval card in
the group refused for the ordinary user and approved by the admin, ``/readonly on``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.sandbox.people import ADMIN, USER
from bot.sandbox.runner import Sandbox

from fakes.openai_server import FakeOpenAIServer
from support.deploy import Deployer
from support.env import clear_settings
from support.sandbox import model, running_sandbox


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    clear_settings(monkeypatch, tmp_path, keep=["LARKGATE_UPDATE_SCREENSHOTS"])


@pytest.fixture
async def sandbox(tmp_path, deployer) -> AsyncIterator[tuple[Sandbox, Deployer]]:
    async with FakeOpenAIServer() as llm_server:
        llm_server.handler = model
        async with running_sandbox(tmp_path, llm_server, deployer) as running:
            yield running, deployer


async def send(page: Any, text: str) -> None:
    await page.fill("#text", text)
    await page.click("#send")


async def test_sandbox_dm_approval_and_readonly(sandbox, browser_page, shoot):
    sandbox, deployer = sandbox
    page = browser_page
    await page.goto(sandbox.page_url)
    await page.get_by_text("model: fake-model").wait_for()

    # Bob's DM: the answer streams into a live card, then the card closes.
    await page.select_option("#user", USER.key)
    await page.select_option("#chat", "dm")
    await send(page, "hello there")
    await page.locator(".msg.mine .bubble", has_text="hello there").wait_for()
    streaming = page.locator(".card-body.streaming", has_text="All done")
    await streaming.wait_for()
    await shoot(page, "sandbox-dm-streaming")
    await streaming.wait_for(state="detached")
    answer = page.locator(".card", has_text="All done here: nothing to do.")
    await answer.wait_for()
    await shoot(page, "sandbox-dm")

    # In the group Bob asks for a deploy: an approval card; Bob may not approve it himself.
    await page.select_option("#chat", "group")
    await send(page, "please deploy web")
    approve = page.get_by_role("button", name="Approve", exact=True)
    await approve.wait_for()
    assert "deploy" in await page.locator(".card", has=approve).inner_text()
    await shoot(page, "sandbox-approval")
    await approve.click()
    await page.locator("#toast").wait_for()
    assert deployer.runs == []
    await shoot(page, "sandbox-approval-refused")

    # Alice, the admin, presses Approve: the tool runs and the answer comes.
    await page.select_option("#user", ADMIN.key)
    await approve.wait_for()
    await approve.click()
    await page.locator(".card", has_text="All done here: web deployed.").wait_for()
    await page.locator(".card-header", has_text="Approved").wait_for()
    assert await approve.count() == 0
    assert deployer.runs == ["web"]
    # Mentions show as names, the way Feishu renders them.
    approved = await page.locator(".card", has_text="Approval ID").inner_text()
    assert "<at" not in approved and "@Alice Wang" in approved
    await shoot(page, "sandbox-approved")

    # Alice switches read-only mode on by typing the command in her DM.
    await page.locator("#toast").wait_for(state="hidden")  # (so the screenshot is clean)
    await page.select_option("#chat", "dm")
    await page.get_by_role("button", name="/readonly on", exact=True).click()
    assert await page.input_value("#text") == "/readonly on"
    await page.click("#send")
    reply = page.locator(".msg:not(.mine)", has_text="read-only")
    await reply.wait_for()
    assert "on" in (await reply.inner_text()).lower()
    await shoot(page, "sandbox-readonly")
