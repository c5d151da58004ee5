"""Plan mode end to end: ``/plan`` and ``LARKGATE_MODE`` through the real app, signed and
encrypted events in, the plan's checklist and then the answer on the live card out.

The fake model plans, runs each step and judges (``support.plan_model``); the ``weather``
tool can be held, so a test sees the steps running at once on the card before it lets
them finish.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from bot.runtime import texts
from bot.sandbox.emulator.cardkit import FakeCard
from bot.store import ApprovalStore, CallLogStore, Database, RunStore

from e2e.harness import Bot, running_bot, settings_for
from e2e.test_console import TOKEN, events_stream, live_run, read_events
from support.cards import callback_values
from support.plan_model import PlanModel, StepScript, Weather, plan_of

ADMIN = "ou_admin"
CITIES = ("Paris", "London", "Tokyo")
THREE_CITIES = plan_of(
    *((f"s{i}", f"Weather in {city}", ()) for i, city in enumerate(CITIES, 1)),
    ("s4", "Compare the three", ("s1", "s2", "s3")),
)
LOOKUPS = {f"Weather in {city}": StepScript.calling(("weather", {"city": city})) for city in CITIES}


@pytest.fixture
def weather() -> Weather:
    return Weather(held=True)


@pytest.fixture
def start(tmp_path, feishu, llm_server, weather, deployer):
    """Start a bot with ``model`` answering; yields an async context."""

    def start_with(model: PlanModel, clock: Callable[[], float] = time.time, **overrides: Any):
        llm_server.handler = model
        values = {"larkgate_admins": ADMIN, **overrides}
        settings = settings_for(tmp_path, feishu, llm_server, **values)
        tools = [weather.tool(), deployer.tool()]
        return running_bot(settings, feishu, llm_server, tools=tools, clock=clock)

    return start_with


def live_card(bot: Bot, message_id: str) -> FakeCard | None:
    live = [m for m in bot.replies_to(message_id) if m.card_id]
    return bot.feishu.cards[live[0].card_id] if live else None


def checklist(bot: Bot, message_id: str) -> str:
    card = live_card(bot, message_id)
    element = card.element("steps") if card is not None else None
    return element["content"] if element else ""


def answer(bot: Bot, message_id: str) -> str:
    card = live_card(bot, message_id)
    assert card is not None
    return card.element("answer")["content"]


def lines(text: str) -> list[str]:
    return text.splitlines()[1:]  # under the head line


async def shows(bot: Bot, message_id: str, *needles: str, within: float = 10.0) -> str:
    await bot.wait_for(
        lambda: all(needle in checklist(bot, message_id) for needle in needles), within
    )
    return checklist(bot, message_id)


async def test_plan_shows_the_checklist_as_steps_run_then_the_answer(start, weather):
    model = PlanModel(plans=[THREE_CITIES], steps=LOOKUPS)
    async with start(model) as bot:
        await bot.say("om_1", "/plan What is the weather in Paris, London and Tokyo?")
        # The three lookups run at the same time, the comparison waits for them.
        await bot.wait_for(lambda: weather.running == 3)
        running = await shows(bot, "om_1", "⏳ 1.", "⏳ 2.", "⏳ 3.", "⬜ 4.")
        assert "🗂️ **Plan** · 0/4 done" in running
        assert "`weather`" in running and "Compare the three · pending" in running
        weather.release.set()
        await bot.reply("om_1")
        await bot.settle()
        done = checklist(bot, "om_1")
        assert done.startswith("🗂️ **Plan** · 4/4 done")
        assert [line[:4] for line in lines(done)] == ["✅ 1.", "✅ 2.", "✅ 3.", "✅ 4."]
        text = answer(bot, "om_1")
        for city in CITIES:
            assert f"Weather in {city}: {city}: sunny, 21 °C" in text
        card = live_card(bot, "om_1")
        assert card is not None and card.streaming_mode is False
        footer = card.element("footer")["content"]
        assert "tokens" in footer and " s" in footer and "fake-model" in footer
        # What the card went through: the checklist with the lookups running, then one
        # last update with every step done and the answer under it.
        shown = [op for op in card.timeline if op.op in ("content", "update") and op.code == 0]
        assert any("⏳ 3." in (op.text or "") for op in shown)
        last = json.loads(shown[-1].text or "{}")
        elements = {e["element_id"]: e["content"] for e in last["body"]["elements"]}
        assert elements["steps"] == done and elements["answer"] == text
        # The checklist rode the card's cadence: fewer card operations than plan events.
        (run,) = await RunStore(bot.services.database).recent()
        ops = [op for op in card.timeline if op.op in ("content", "update", "settings")]
        plan_events = 4 * 3 + 4  # each step pending, running, done; four phases
        assert len(ops) < plan_events
        assert run.status == "completed" and run.feishu_calls <= 2 + len(ops)
        # Every step's tool call is in the call log under the turn's run.
        logged = await CallLogStore(bot.services.database).for_run(run.id)
        assert [entry.tool for entry in logged] == ["weather"] * 3
    assert sorted(weather.asked) == sorted(CITIES) and weather.most_at_once == 3
    assert model.seen[0] == "plan" and model.seen[-2:] == ["judge", "synthesis"]
    assert model.planned_goals == ["What is the weather in Paris, London and Tokyo?"]


async def test_plan_alone_says_how_to_use_it_and_help_lists_it(start):
    model = PlanModel(plans=[THREE_CITIES])
    async with start(model) as bot:
        await bot.say("om_1", "/plan")
        assert await bot.reply("om_1") == texts.PLAN_USAGE
        await bot.say("om_2", "/help")
        assert "/plan <question>" in await bot.reply("om_2")
        await bot.settle()
    assert model.seen == []


async def test_auto_mode_answers_a_short_question_without_a_plan_and_a_list_with_one(
    start, weather
):
    weather.release.set()
    model = PlanModel(plans=[THREE_CITIES], steps=LOOKUPS)
    async with start(model, larkgate_mode="auto") as bot:
        await bot.say("om_1", "What is the weather in Paris?")
        await bot.reply("om_1")
        await bot.settle()
        # The rule chose ReAct: not one call more than ReAct makes (no plan, no choice).
        assert model.seen == ["react"]  # its final reply is the answer
        assert checklist(bot, "om_1") == ""
        model.seen.clear()
        await bot.say("om_2", "What is the weather in Paris, London and Tokyo?")
        await bot.reply("om_2")
        await bot.settle()
        assert model.seen[0] == "plan" and "mode" not in model.seen
        assert checklist(bot, "om_2").startswith("🗂️ **Plan** · 4/4 done")


async def test_dag_mode_plans_every_question(start, weather):
    weather.release.set()
    model = PlanModel(plans=[THREE_CITIES], steps=LOOKUPS)
    async with start(model, larkgate_mode="dag") as bot:
        await bot.say("om_1", "weather?")
        await bot.reply("om_1")
        await bot.settle()
    assert model.seen[0] == "plan" and "react" not in model.seen


async def test_an_approval_waits_in_its_step_while_the_others_finish(start, weather, deployer):
    weather.release.set()
    plan = plan_of(
        ("s1", "Deploy api", ()), ("s2", "Weather in Paris", ()), ("s3", "Weather in London", ())
    )
    steps = {**LOOKUPS, "Deploy api": StepScript.calling(("deploy", {"service": "api"}))}
    model = PlanModel(plans=[plan], steps=steps)
    async with start(model) as bot:
        bot.feishu.workspace.add_user(ADMIN, "Ada Admin")
        await bot.say("om_1", "/plan deploy api and tell me the weather in Paris and London")
        waiting = await shows(
            bot, "om_1", "⏸️ 1. Deploy api · waiting for approval", "✅ 2.", "✅ 3."
        )
        assert "`deploy`" in waiting and deployer.runs == []
        assert sorted(weather.asked) == ["London", "Paris"]
        card = next(m for m in bot.replies_to("om_1") if callback_values(m.content))
        (value,) = [v for v in callback_values(card.content) if v["decision"] == "approve"]
        await bot.click(value, by=ADMIN, card_message_id=card.message_id)
        await bot.reply("om_1")
        await bot.settle()
        assert deployer.runs == ["api"]
        assert [line[:4] for line in lines(checklist(bot, "om_1"))] == ["✅ 1.", "✅ 2.", "✅ 3."]
        assert "api deployed" in answer(bot, "om_1")


async def test_a_step_waiting_at_shutdown_ends_its_approval(start, weather, deployer):
    """A plan's step is not saved (its plan's state is not), so a shutdown ends its wait as
    a stop does: the approval is cancelled and its card says so, instead of staying
    clickable for a run that starts over after the restart."""
    weather.release.set()
    plan = plan_of(("s1", "Deploy api", ()))
    steps = {"Deploy api": StepScript.calling(("deploy", {"service": "api"}))}
    async with start(PlanModel(plans=[plan], steps=steps)) as bot:
        await bot.say("om_1", "/plan deploy api")
        await shows(bot, "om_1", "⏸️ 1. Deploy api · waiting for approval")
        card = next(m for m in bot.replies_to("om_1") if callback_values(m.content))
        (value,) = [v for v in callback_values(card.content) if v["decision"] == "approve"]
        url = bot.services.database.url
    async with Database(url) as db:
        record = await ApprovalStore(db).get(value["approval_id"])
    assert record is not None and record.state == "cancelled"
    assert deployer.runs == []


async def test_read_only_mode_blocks_a_write_in_a_step(start, weather, deployer):
    plan = plan_of(("s1", "Check then deploy api", ()), ("s2", "Weather in London", ()))
    steps = {
        **LOOKUPS,
        "Check then deploy api": StepScript(
            turns=[[("weather", {"city": "Paris"})], [("deploy", {"service": "api"})]]
        ),
    }
    model = PlanModel(plans=[plan], steps=steps)
    async with start(model) as bot:
        await bot.say("om_1", "/plan check the weather, then deploy api; and London's weather")
        await bot.wait_for(lambda: weather.running == 2)
        # The org goes read-only while the steps work: the write that follows is refused.
        await bot.say("om_ro", "/readonly on", sender_open_id=ADMIN, chat_id="oc_admin")
        await bot.wait_for(lambda: bool(bot.replies_to("om_ro")))
        weather.release.set()
        await bot.reply("om_1")
        await bot.settle()
        assert deployer.runs == []
        shown = checklist(bot, "om_1")
        assert "✅ 1. Check then deploy api · done" in shown and "⛔ `deploy` blocked" in shown
        assert "read-only" in answer(bot, "om_1").lower()
    assert not any(callback_values(message.content) for message in bot.feishu.sent)


async def test_stop_during_a_plan_stops_the_steps_and_skips_the_rest(start, weather):
    model = PlanModel(plans=[THREE_CITIES], steps=LOOKUPS)
    async with start(model) as bot:
        await bot.say("om_1", "/plan What is the weather in Paris, London and Tokyo?")
        await bot.wait_for(lambda: weather.running == 3)
        await shows(bot, "om_1", "⏳ 1.")
        await bot.say("om_stop", "/stop")
        assert await bot.reply("om_stop") == texts.STOPPED
        await bot.settle()
        shown = checklist(bot, "om_1")
        assert [line[:4] for line in lines(shown)] == ["⏹️ 1", "⏹️ 2", "⏹️ 3", "⏭️ 4"]
        assert "stopped by /stop" in shown
        assert answer(bot, "om_1") == texts.STOPPED_CARD
        (run,) = await RunStore(bot.services.database).recent()
        assert run.status == "cancelled"
    assert weather.running == 0
    assert "synthesis" not in model.seen and "judge" not in model.seen


async def test_a_follow_up_during_a_plan_replans_with_it(start, weather, caplog):
    caplog.set_level(logging.INFO, logger="bot.runtime.intake.routing")
    first = plan_of(("s1", "Weather in Paris", ()), ("s2", "Weather in London", ()))
    second = plan_of(("t1", "Weather in Tokyo", ()))
    model = PlanModel(plans=[first, second], steps=LOOKUPS)
    async with start(model) as bot:
        await bot.say("om_1", "/plan weather in Paris and London")
        await bot.wait_for(lambda: weather.running == 2)
        await bot.say("om_2", "and Tokyo too, please")
        await bot.wait_for(lambda: "message om_2 joined conversation" in caplog.text)
        weather.release.set()
        await bot.reply("om_1")
        await bot.settle()
        shown = checklist(bot, "om_1")
        assert shown.startswith("🗂️ **Plan 2** · 1/1 done")
        assert "_Re-planned (plan 1: 2 of 2 done)._" in shown
        assert "✅ 1. Weather in Tokyo" in shown
        assert bot.replies_to("om_2") == []  # answered by the same reply
        text = answer(bot, "om_1")
        assert all(f"{city}: sunny" in text for city in CITIES)
    assert model.seen.count("plan") == 2 and model.seen.count("judge") == 1
    assert "and Tokyo too, please" in model.planned_goals[1]
    assert sorted(weather.asked) == sorted(CITIES)


async def test_a_step_runs_on_the_model_its_hint_names(start, weather, tmp_path):
    weather.release.set()
    plan = plan_of(
        ("s1", "Weather in Paris", ()),
        ("s2", "Compare the three", ("s1",)),
        hints={"s1": "fast", "s2": "reasoning"},
    )
    model = PlanModel(plans=[plan], steps=LOOKUPS)
    config = tmp_path / "larkgate.toml"
    config.write_text('[models.fast]\nmodel = "fake-small"\n')
    async with start(model, larkgate_config=config) as bot:
        await bot.say("om_1", "/plan the weather in Paris, compared")
        await bot.reply("om_1")
        await bot.settle()
        judged = [
            r.body for r in bot.llm_server.requests if "judge_plan" in str(r.body.get("tools"))
        ]
    # "fast" is configured; "reasoning" is not, so that step runs on the main model.
    assert model.step_models == {
        "Weather in Paris": "fake-small",
        "Compare the three": "fake-model",
    }
    assert [body["model"] for body in judged] == ["fake-small"]


async def test_garbage_from_the_planner_answers_without_a_plan(start, weather):
    weather.release.set()
    model = PlanModel(plans=["I would rather not plan today."])
    async with start(model) as bot:
        await bot.say("om_1", "/plan what's up?")
        await bot.reply("om_1")
        await bot.settle()
        assert checklist(bot, "om_1") == "_No usable plan came: answering directly._"
        assert answer(bot, "om_1").startswith("Answer to:")
        (run,) = await RunStore(bot.services.database).recent()
        assert run.status == "completed"
    assert "react" in model.seen


async def test_the_console_streams_the_plan_over_sse(start, weather):
    model = PlanModel(plans=[THREE_CITIES], steps=LOOKUPS)
    async with start(model, larkgate_console_token=TOKEN) as bot:
        await bot.say("om_1", "/plan What is the weather in Paris, London and Tokyo?")
        run_id = await live_run(bot)
        async with events_stream(bot, run_id) as resp:
            head = await read_events(resp, 1)
            await bot.wait_for(lambda: weather.running == 3)
            weather.release.set()
            events = head + await read_events(resp)
        await bot.settle()
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    phases = [e["data"]["phase"] for e in events if e["type"] == "phase"]
    assert phases == ["planning", "executing", "analysing", "done"]
    states: dict[str, list[str]] = {}
    for e in events:
        if e["type"] == "plan_step":
            states.setdefault(e["data"]["step_id"], []).append(e["data"]["state"])
    assert states == {s: ["pending", "running", "completed"] for s in ("s1", "s2", "s3", "s4")}
    combine = next(
        e["data"] for e in events if e["type"] == "plan_step" and e["data"]["step_id"] == "s4"
    )
    assert combine["dependencies"] == ["s1", "s2", "s3"] and combine["task"] == "Compare the three"
    calls = [e["data"] for e in events if e["type"] == "step" and e["data"]["phase"] == "started"]
    assert sorted((c["plan_step"], c["arguments"]["city"]) for c in calls) == [
        ("s1", "Paris"), ("s2", "London"), ("s3", "Tokyo")
    ]  # fmt: skip
    types = [e["type"] for e in events]
    assert types.index("answer") > max(i for i, t in enumerate(types) if t == "plan_step")
    assert types[-1] == "done" and events[-1]["data"]["status"] == "completed"
    assert events[-1]["data"]["tool_calls"] == 3


async def test_a_scheduled_run_follows_the_mode_and_shows_its_plan(start, weather):
    weather.release.set()
    now = [time.time()]
    model = PlanModel(plans=[THREE_CITIES], steps=LOOKUPS)
    async with start(model, clock=lambda: now[0], larkgate_mode="dag") as bot:
        await bot.services.schedules.create(
            name="Morning weather",
            prompt="The weather in Paris, London and Tokyo",
            creator="ou_user",
            chat_id="oc_dm",
            chat_type="p2p",
            thread_id="",
            reply_to="",
            kind="cron",
            expression="0 9 * * *",
            timezone="UTC",
            next_run_at=now[0] + 60,
            created_in_run="",
            max_per_creator=20,
        )
        now[0] += 61
        bot.services.scheduled_runs.wake()
        await bot.wait_for(lambda: any("Scheduled task" in str(m.content) for m in bot.feishu.sent))
        header = next(m for m in bot.feishu.sent if "Scheduled task" in str(m.content))
        await bot.reply(header.message_id)
        await bot.settle()
        assert checklist(bot, header.message_id).startswith("🗂️ **Plan** · 4/4 done")
    assert model.planned_goals == ["The weather in Paris, London and Tokyo"]


async def test_stop_while_a_step_waits_for_an_approval_cancels_it(start, weather, deployer):
    weather.release.set()
    plan = plan_of(("s1", "Deploy api", ()), ("s2", "Weather in Paris", ()))
    steps = {**LOOKUPS, "Deploy api": StepScript.calling(("deploy", {"service": "api"}))}
    model = PlanModel(plans=[plan], steps=steps)
    async with start(model) as bot:
        await bot.say("om_1", "/plan deploy api and tell me the weather in Paris")
        await shows(bot, "om_1", "⏸️ 1. Deploy api · waiting for approval", "✅ 2.")
        card = next(m for m in bot.replies_to("om_1") if callback_values(m.content))
        await bot.say("om_stop", "/stop")
        assert await bot.reply("om_stop") == texts.STOPPED
        await bot.settle()

        def card_header() -> str:
            content = bot.feishu.message_by_id[card.message_id].content
            return str(content.get("header", {}).get("title", {}).get("content", ""))

        await bot.wait_for(lambda: card_header() == "Cancelled")
        assert not callback_values(bot.feishu.message_by_id[card.message_id].content)
        assert "⏹️ 1. Deploy api · stopped" in checklist(bot, "om_1")
    assert deployer.runs == []
