"""Charts into the conversation, through the running bot: the model calls feishu_send_chart,
an approver approves, and the PNG lands as a reply in the asker's topic; in read-only mode
nothing is uploaded or posted."""

from __future__ import annotations

import io
import json
from typing import Any

from PIL import Image

from connectors.config import ConnectorsConfig

from e2e.harness import BOT_OPEN_ID, Bot, running_bot, settings_for
from e2e.test_approvals import first_card, value_for
from fakes.feishu_server import FakeMessage
from fakes.openai_server import Reply
from support.model_calls import is_synthesis

ADMIN = "ou_admin"
CHART = {
    "title": "Orders by region",
    "kind": "bar",
    "labels": ["East", "North", "South"],
    "series": [{"name": "orders", "values": [120, 80, 45]}],
}
TOPIC = {
    "chat_type": "group",
    "chat_id": "oc_team",
    "root_id": "om_topic_root",
    "thread_id": "omt_team",
    "mentions": [("@_user_1", BOT_OPEN_ID, "larkgate")],
}


def charting(body: dict[str, Any]) -> Reply:
    """A model that picks the chart tool, calls it once, then says what it saw."""
    if is_synthesis(body):
        return Reply(content="Result: " + body["messages"][-1]["content"])
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice["function"]["name"] == "select_tools":
        return Reply(tool_calls=[("sel", "select_tools", {"tools": ["feishu_send_chart"]})])
    if not any(m["role"] == "tool" for m in body["messages"]):
        return Reply(tool_calls=[("c1", "feishu_send_chart", CHART)])
    return Reply(content="done")


def start(tmp_path, feishu, llm_server):
    llm_server.handler = charting
    settings = settings_for(tmp_path, feishu, llm_server, larkgate_admins=ADMIN)
    # Only the Feishu connector: its tools, the chart tool among them, over the fake Feishu.
    connectors = ConnectorsConfig(sections={"feishu": {}}, explicit=True)
    return running_bot(settings, feishu, llm_server, connectors=connectors)


def images(bot: Bot) -> list[FakeMessage]:
    return [m for m in bot.feishu.sent if m.msg_type == "image"]


def observations(llm_server: Any) -> list[str]:
    return [
        m["content"] for r in llm_server.requests for m in r.body["messages"] if m["role"] == "tool"
    ]


async def test_an_approved_chart_is_posted_in_the_askers_topic(tmp_path, feishu, llm_server):
    feishu.workspace.add_user(ADMIN, "Ada Admin")
    feishu.add_message("om_chart", chat_id="oc_team", chat_type="group", thread_id="omt_team")
    async with start(tmp_path, feishu, llm_server) as bot:
        await bot.say("om_chart", "@_user_1 chart orders by region", **TOPIC)
        card = await first_card(bot, "om_chart")
        assert "feishu_send_chart" in json.dumps(card.content, ensure_ascii=False)
        assert images(bot) == [] and feishu.uploaded_images == {}  # nothing before approval

        approve = value_for(card, "approve")
        await bot.click(approve, by=ADMIN, card_message_id=card.message_id, chat_id="oc_team")
        await bot.reply("om_chart")
        await bot.settle()

    (image,) = images(bot)
    assert image.reply_to == "om_chart" and image.chat_id == "oc_team"
    assert image.reply_in_thread and image.thread_id == "omt_team"
    upload = feishu.uploaded_images[image.content["image_key"]]
    assert upload.data.startswith(b"\x89PNG\r\n\x1a\n")
    assert Image.open(io.BytesIO(upload.data)).size == (1200, 675)
    assert any('Sent the bar chart "Orders by region"' in o for o in observations(llm_server))


async def test_read_only_mode_blocks_the_chart(tmp_path, feishu, llm_server):
    async with start(tmp_path, feishu, llm_server) as bot:
        await bot.say("om_ro", "/readonly on", sender_open_id=ADMIN)
        await bot.wait_for(lambda: bool(bot.replies_to("om_ro")))
        # The write tools are not offered any more; a model that calls one anyway is refused.
        await bot.say("om_ro_chart", "chart orders by region")
        await bot.reply("om_ro_chart")
        await bot.settle()

    assert images(bot) == [] and feishu.uploaded_images == {}
    # The read tools alone are few enough to be offered without a selection call.
    offered = {t["function"]["name"] for r in llm_server.requests for t in r.body.get("tools", [])}
    assert offered and not offered & {"feishu_send_chart", "feishu_send_file"}
    (refusal,) = observations(llm_server)
    assert "unknown tool 'feishu_send_chart'" in refusal
