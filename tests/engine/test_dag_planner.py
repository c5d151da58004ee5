"""DAGPlanner: what it asks the model, and a plan or a PlanError from what comes back;
DAGAgent answering with ReAct when there is no usable plan."""

from __future__ import annotations

import logging
from datetime import date

import pytest

from bot.engine import (
    DAGAgent,
    DAGPlanner,
    DoneEvent,
    LLMResponse,
    Message,
    PhaseEvent,
    PlanError,
    RunEvent,
    ToolRegistry,
    Usage,
)
from bot.engine.testing import ScriptedLLM

from engine.dag_support import DagScript, plan_of
from engine.support import make_tool

TOOLS = ToolRegistry(
    [
        make_tool("weather", description="Current weather of a city.\nMore text."),
        make_tool("stock_price", description="Latest price of a ticker."),
    ]
)


def planner_for(script: DagScript) -> DAGPlanner:
    return DAGPlanner(script.llm(), TOOLS, today=lambda: date(2026, 3, 14))


async def test_the_prompt_has_the_date_the_tools_the_language_rule_and_the_goal():
    script = DagScript(plans=[plan_of(("a", "今天北京天气", []))])
    planner = planner_for(script)
    planned = await planner.plan("北京和上海的天气", history=[Message("user", "earlier question")])
    assert planned.plan.ids() == ("a",)
    assert planned.usage == Usage(20, 10, 30)
    prompt = planner.llm.calls[0].messages[0].content  # type: ignore[attr-defined]
    assert "Today is 2026-03-14." in prompt
    assert "- weather: Current weather of a city." in prompt
    assert "More text" not in prompt  # one line per tool
    assert "- stock_price: Latest price of a ticker." in prompt
    assert "language of the goal" in prompt
    assert "At most 10 steps" in prompt
    assert "Goal: 北京和上海的天气" in prompt
    assert "user: earlier question" in prompt


async def test_a_replan_is_told_what_was_learned():
    script = DagScript(plans=[plan_of(("a", "t", []))])
    planner = planner_for(script)
    await planner.plan("goal", learned="[a completed] found 42")
    prompt = planner.llm.calls[0].messages[0].content  # type: ignore[attr-defined]
    assert "[a completed] found 42" in prompt
    assert "still missing" in prompt


async def test_the_plan_is_validated_and_hints_checked_against_the_tools():
    plan = plan_of(("a", "t", ["ghost"]))
    plan["steps"][0]["tool_hint"] = "weather"
    planned = await planner_for(DagScript(plans=[plan])).plan("goal")
    step = planned.plan.steps[0]
    assert step.dependencies == () and step.tool_hint == "weather"


async def test_a_cyclic_plan_is_a_plan_error_with_the_usage_spent():
    script = DagScript(plans=[plan_of(("a", "t", ["b"]), ("b", "u", ["a"]))])
    with pytest.raises(PlanError, match="cycle") as raised:
        await planner_for(script).plan("goal")
    assert raised.value.usage == Usage(20, 10, 30)


async def test_garbage_output_is_a_plan_error_after_the_structured_levels_are_tried():
    llm = ScriptedLLM(["I would rather chat about the weather."] * 10)
    with pytest.raises(PlanError, match="no plan") as raised:
        await DAGPlanner(llm, TOOLS).plan("goal")
    # native, then json_mode and plain text with one reformat retry each
    assert len(llm.calls) == 5
    assert raised.value.usage.total_tokens == 5 * 15


async def test_a_provider_that_raises_is_a_plan_error():
    class Broken(ScriptedLLM):
        async def chat(self, *args: object, **kwargs: object) -> LLMResponse:
            raise RuntimeError("boom")

    with pytest.raises(PlanError, match="RuntimeError"):
        await DAGPlanner(Broken(), TOOLS).plan("goal")


async def test_garbage_falls_back_to_react_with_a_warning(caplog: pytest.LogCaptureFixture):
    script = DagScript(plans=["not a plan at all"], react=["the react answer"])
    agent = DAGAgent(script.llm(), TOOLS)
    events: list[RunEvent] = []
    with caplog.at_level(logging.WARNING, logger="bot.engine.dag.agent"):
        result = await agent.run("goal", on_event=events.append)
    assert "no usable plan" in caplog.text and "ReAct" in caplog.text
    assert result.status == "completed"
    assert result.answer == "the react answer"
    assert result.plan is None
    # The planner's five failed attempts count, beside the ReAct turn.
    assert result.usage.total_tokens == 5 * 15 + 15
    phases = [(e.phase, e.detail) for e in events if isinstance(e, PhaseEvent)]
    assert phases == [
        ("planning", None),
        ("executing", "no usable plan: answering without one"),
        ("done", "answered without a plan"),
    ]
    assert isinstance(events[-1], DoneEvent) and isinstance(events[-2], PhaseEvent)
    assert events[-1].usage == result.usage
