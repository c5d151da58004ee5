"""Something shows at once: the live card goes up before the model has said anything.

A slow model (a local one takes a minute before its first token) must not leave the chat
silent. Every test here holds the model's first call until the card is out, so the order
is what the test waits on: the card exists while no model call has been answered yet.
Then the card ends in every path with its streaming turned off (DESIGN §5).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from bot.sandbox.emulator.cardkit import FakeCard
from bot.store import ConversationStore

from e2e.harness import Bot, answer_of, answering, running_bot, settings_for, text_of
from fakes.openai_server import Reply
from support.plan_model import PlanModel, StepScript, Weather, plan_of
from support.schedules import daily_task

THINKING = "_Thinking…_"


class HeldModel:
    """A model that answers nothing until ``release`` is set: ``entered`` is set when its
    first call arrived. Then ``answer`` (a handler) answers every call."""

    def __init__(self, answer: Any = answering) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.answered = 0
        self._answer = answer

    async def __call__(self, body: dict[str, Any]) -> Reply:
        self.entered.set()
        await self.release.wait()
        self.answered += 1
        reply = self._answer(body)
        return await reply if asyncio.iscoroutine(reply) else reply


def cards_under(bot: Bot, message_id: str) -> list[FakeCard]:
    return [bot.feishu.cards[m.card_id] for m in bot.replies_to(message_id) if m.card_id]


async def status_card(bot: Bot, message_id: str, model: HeldModel) -> FakeCard:
    """The card under ``message_id`` once it is in the chat, while the model still holds."""
    await asyncio.wait_for(model.entered.wait(), 10)
    await bot.wait_for(lambda: bool(cards_under(bot, message_id)))
    (card,) = cards_under(bot, message_id)
    assert model.answered == 0  # the card came first
    assert card.streaming_mode is True
    assert card.element("answer")["content"] == THINKING
    assert card.summary == "Thinking…"  # the chat list's preview says so too
    return card


async def test_a_plain_question_shows_the_card_before_the_model_answers(
    tmp_path, feishu, llm_server
):
    model = HeldModel()
    llm_server.handler = model
    async with running_bot(settings_for(tmp_path, feishu, llm_server), feishu, llm_server) as bot:
        await bot.say("om_q", "what is the capital of France?")
        card = await status_card(bot, "om_q", model)
        model.release.set()
        await bot.settle_reply("om_q")
        await bot.settle()
        # The answer replaced the status line; no steps element was ever needed.
        (message,) = bot.replies_to("om_q")
        assert answer_of(message, feishu).startswith("Answer to")
        assert card.element("steps") is None
        assert card.streaming_mode is False
        assert [op.op for op in card.timeline[:2]] == ["create", "send"]


async def test_plan_mode_shows_the_card_before_the_planner_answers(tmp_path, feishu, llm_server):
    weather = Weather(held=False)
    plans = plan_of(("s1", "Weather in Paris", ()))
    steps = {"Weather in Paris": StepScript.calling(("weather", {"city": "Paris"}))}
    model = HeldModel(PlanModel(plans=[plans], steps=steps))
    llm_server.handler = model
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server, tools=[weather.tool()]) as bot:
        await bot.say("om_plan", "/plan What is the weather in Paris?")
        card = await status_card(bot, "om_plan", model)
        model.release.set()
        await bot.settle_reply("om_plan")
        await bot.settle()
        # Then the plan's checklist came above the status, and the answer under it.
        assert "✅ 1." in card.element("steps")["content"]
        assert "Paris" in card.element("answer")["content"]
        assert card.streaming_mode is False


async def test_a_scheduled_run_shows_the_card_before_the_model_answers(
    tmp_path, feishu, llm_server
):
    model = HeldModel(lambda body: Reply(content="Time to stretch."))
    llm_server.handler = model
    async with running_bot(settings_for(tmp_path, feishu, llm_server), feishu, llm_server) as bot:
        await daily_task(
            bot.services.schedules,
            creator="ou_user",
            chat_id="oc_dm",
            chat_type="p2p",
            prompt="Tell me to stretch",
            next_run_at=time.time() - 1,  # due now, within the grace for a late firing
        )
        bot.services.scheduled_runs.wake()
        await asyncio.wait_for(model.entered.wait(), 10)
        await bot.wait_for(lambda: bool(_headers(bot)))
        (header,) = _headers(bot)
        card = await status_card(bot, header.message_id, model)
        model.release.set()
        await bot.settle_reply(header.message_id)
        await bot.settle()
        assert card.element("answer")["content"] == "Time to stretch."
        assert card.streaming_mode is False


async def test_an_error_before_any_text_ends_the_card_with_the_error(tmp_path, feishu, llm_server):
    model = HeldModel(lambda body: Reply.error(503, "the model is overloaded"))
    llm_server.handler = model
    async with running_bot(settings_for(tmp_path, feishu, llm_server), feishu, llm_server) as bot:
        await bot.say("om_err", "hello?")
        card = await status_card(bot, "om_err", model)
        model.release.set()
        await bot.settle_reply("om_err", within=60)
        await bot.settle(within=60)
        assert card.streaming_mode is False
        assert card.element("answer")["content"].startswith("Sorry")  # the error, said


async def test_a_turn_that_raises_leaves_its_card_interrupted_not_thinking(
    tmp_path, feishu, llm_server, monkeypatch
):
    async def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the database went away")

    llm_server.handler = answering
    async with running_bot(settings_for(tmp_path, feishu, llm_server), feishu, llm_server) as bot:
        # The card is asked for first; then reading the conversation fails.
        monkeypatch.setattr(ConversationStore, "load", unreachable)
        await bot.say("om_boom", "hello")
        await bot.wait_for(lambda: bool(bot.replies_to("om_boom")))
        first = bot.replies_to("om_boom")[0]
        await bot.wait_for(lambda: "_Interrupted._" in text_of(first, feishu))
        await bot.settle_reply("om_boom")  # no card of it is left streaming
        assert llm_server.requests == []


def _headers(bot: Bot) -> list[Any]:
    return [
        m
        for m in bot.feishu.sent
        if m.msg_type == "text" and "Scheduled task" in json.dumps(m.content, ensure_ascii=False)
    ]
