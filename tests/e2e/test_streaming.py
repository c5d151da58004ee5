"""Live answer cards end to end: a real run streamed into the fake Feishu's CardKit."""

from __future__ import annotations

import asyncio
import json

from bot.engine import tool_from_function
from bot.store import RunStore

from e2e.harness import answer_of, running_bot, settings_for
from fakes.openai_server import Reply
from support.model_calls import is_synthesis
from support.waiting import wait_until

ANSWER = (
    "## 结果\n\nThe deployment **succeeded**. 部署成功了。\n\n"
    "```bash\nkubectl get pods\n```\n\n- api: 3/3 ready\n- worker: 2/2 ready\n"
)


def slow_answer(text: str, interval: float = 0.01):
    """A model whose reply (the loop's streamed final reply, the answer) is ``text``."""

    def handler(body):
        return Reply(content=text, chunk_interval=interval, usage={"prompt_tokens": 40})

    return handler


async def test_the_answer_streams_into_one_card_and_ends_exact(bot):
    bot.llm_server.handler = slow_answer(ANSWER, interval=0.04)
    await bot.say("om_s", "how did the deploy go?")
    await bot.reply("om_s")
    await bot.settle()
    (message,) = bot.replies_to("om_s")
    card = bot.feishu.cards[message.card_id]
    assert answer_of(message, bot.feishu) == ANSWER
    assert card.streaming_mode is False
    contents = [op.text for op in card.timeline if op.op == "content" and op.code == 0]
    assert len(contents) >= 2  # it was visible while being written (about once a second)
    assert all(ANSWER.startswith(c.removesuffix("\n```")) for c in contents if c)
    sequences = [op.sequence for op in card.timeline if op.sequence and op.code == 0]
    assert sequences == sorted(set(sequences))
    assert bot.feishu.max_ops_per_second(message.card_id) <= 10
    footer = card.element("footer")["content"]
    assert "tokens" in footer and "fake-model" in footer
    runs = await RunStore(bot.services.database).recent()
    assert runs[0].feishu_calls >= 4  # create, send, updates, final update


async def test_tool_steps_show_on_the_card(tmp_path, feishu, llm_server):
    def shown_running() -> bool:
        return any(
            "⏳ `deploy_status`" in (op.text or "") for card in feishu.cards.values()
            for op in card.timeline if op.code == 0
        )  # fmt: skip

    async def deploy_status(service: str) -> str:
        """Status of a service."""
        await wait_until(shown_running, 10)  # returns once the card shows it running
        return f"{service}: 3/3 ready"

    calls = {"n": 0}

    def handler(body):
        assert not is_synthesis(body)  # the final reply is the answer
        calls["n"] += 1
        if calls["n"] == 1:
            return Reply(tool_calls=[("c1", "deploy_status", {"service": "api"})])
        return Reply(content="All services are ready.")

    llm_server.handler = handler
    tool = tool_from_function(deploy_status, side_effect="read")
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server, tools=[tool]) as bot:
        await bot.say("om_t", "is api up?")
        await bot.reply("om_t")
        await bot.settle()
        (message,) = bot.replies_to("om_t")
        card = feishu.cards[message.card_id]
        steps = card.element("steps")["content"]
        assert "✅ `deploy_status`" in steps and "3/3 ready" in steps
        assert card.element("answer")["content"] == "All services are ready."
        # The card went up saying "Thinking…"; the tool's line came above its status.
        created = card.timeline[0]
        assert created.op == "create" and "_Thinking…_" in created.text
        assert "steps" not in created.text
        (grown,) = [op for op in card.timeline if op.op == "update" and "⏳" in op.text]
        assert json.loads(grown.text)["config"]["streaming_mode"] is True


async def test_stop_closes_the_card_it_started(tmp_path, feishu, llm_server):
    release = asyncio.Event()
    started = asyncio.Event()

    async def slow_tool(x: int) -> str:
        """A slow tool."""
        started.set()
        await release.wait()
        return "never"

    def handler(body):
        if is_synthesis(body):
            return Reply(content="unused")
        return Reply(tool_calls=[("c1", "slow_tool", {"x": 1})])

    llm_server.handler = handler
    settings = settings_for(tmp_path, feishu, llm_server)
    tool = tool_from_function(slow_tool, side_effect="read")
    async with running_bot(settings, feishu, llm_server, tools=[tool]) as bot:
        await bot.say("om_run", "do the slow thing")
        await started.wait()
        await bot.wait_for(lambda: bool(bot.replies_to("om_run")))
        await bot.say("om_halt", "/stop")
        await bot.reply("om_halt")
        await bot.settle()
        (message,) = bot.replies_to("om_run")
        card = feishu.cards[message.card_id]
        assert card.streaming_mode is False
        assert "Stopped" in card.element("answer")["content"]
        assert "⏹️ `slow_tool`" in card.element("steps")["content"]
        release.set()


async def test_without_cardkit_the_answer_still_arrives(tmp_path, feishu, llm_server):
    feishu.fail("POST", r"/cardkit/v1/cards$", 99991672, times=None,
                msg="One of the following scopes is required: [cardkit:card:write]")  # fmt: skip
    llm_server.handler = slow_answer(ANSWER, interval=0.005)
    async with running_bot(settings_for(tmp_path, feishu, llm_server), feishu, llm_server) as bot:
        await bot.say("om_p", "deploy?")
        await bot.wait_for(lambda: bool(bot.replies_to("om_p")))
        await bot.settle(within=15)
        (message,) = bot.replies_to("om_p")
        assert message.card_id is None
        assert answer_of(message, feishu) == ANSWER
