"""``larkgate dev``: a scheduled task made in the sandbox's group fires there, on the real
clock, and the page shows its header and the answer under it; what the bot sends a person
(a paused task's notice) shows in their DM."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.app import SERVICES
from bot.sandbox.people import ADMIN, USER

from fakes.openai_server import Reply
from support.cards import button_values
from support.env import clear_settings
from support.model_calls import is_synthesis
from support.sandbox import answered, card_text, cards
from support.waiting import wait_until

DUE_IN = 4.0  # seconds after the model asks: the approval is pressed well before


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    clear_settings(monkeypatch, tmp_path)


def reminding(body: dict[str, Any]) -> Reply:
    """Schedules a one-off a few seconds ahead when asked; answers the fired prompt (the
    loop's final reply is the answer)."""
    messages = body["messages"]
    assert not is_synthesis(body)
    last_user = [m["content"] for m in messages if m["role"] == "user"][-1]
    ran = [m["content"] for m in messages if m["role"] == "tool"]
    if "remind" in str(last_user) and not ran:
        at = datetime.fromtimestamp(time.time() + DUE_IN, UTC).isoformat()
        arguments = {"prompt": "Tell the group to stand up", "at": at, "name": "Stand up"}
        return Reply(tool_calls=[("s1", "schedule_task", arguments)])
    if any("Scheduled task " in str(result) for result in ran):
        return Reply(content="I will remind the group.")
    return Reply(content="Time to stand up, everyone!")


def header(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next(
        (m for m in messages if m["from_bot"] and "Scheduled task: Stand up" in m["text"]), None
    )


def fired(messages: list[dict[str, Any]]) -> bool:
    top = header(messages)
    under = [m for m in cards(messages) if top is not None and m["reply_to"] == top["id"]]
    return bool(under) and answered(under, "Time to stand up")


async def test_a_task_made_in_the_group_fires_there(sandbox, page, llm_server):
    llm_server.handler = reminding
    await page.send(ADMIN.key, "group", "remind the group in a moment to stand up")
    messages = await page.until(
        ADMIN.key, "group", lambda ms: any("Approve" in button_values(m["card"]) for m in cards(ms))
    )
    (approval,) = [m for m in cards(messages) if "Approve" in button_values(m["card"])]
    assert "schedule_task" in card_text(approval)
    clicked = await page.click(
        ADMIN.key, approval["id"], button_values(approval["card"])["Approve"]
    )
    assert clicked["toast"]["type"] == "success", clicked
    await page.until(ADMIN.key, "group", lambda ms: answered(ms, "I will remind the group"))

    # On the real clock: the page long-polls until the task fired.
    messages = await page.until(USER.key, "group", fired)
    top = header(messages)
    assert top is not None and top["kind"] == "text" and top["reply_to"] is None
    schedules = sandbox.bot_app[SERVICES].schedules

    async def recorded() -> Any:
        (task,) = await schedules.list(creator=None)
        return task if task.last_outcome else None

    task = await wait_until(recorded, 10.0, every=0.05, failure="the firing was never recorded")
    assert (task.creator, task.last_outcome, task.state) == (ADMIN.open_id, "ok", "done")


async def test_what_the_bot_sends_a_person_shows_in_their_dm(sandbox, page):
    feishu = sandbox.bot_app[SERVICES].feishu
    content = json.dumps({"text": "Your scheduled task is paused."})
    await feishu.send_message("open_id", USER.open_id, msg_type="text", content=content)
    (message,) = (await page.transcript(USER.key, "dm"))["messages"]
    assert message["from_bot"] and message["text"] == "Your scheduled task is paused."
    assert (await page.transcript(ADMIN.key, "dm"))["messages"] == []
