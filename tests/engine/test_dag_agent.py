"""DAGAgent as the bot drives it: events in order, an honest result, stop, re-plans on a
low verdict and on a follow-up message, the streamed answer, and auto mode."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable

import pytest

from bot.engine import (
    AnswerEvent,
    DAGAgent,
    DAGSettings,
    DoneEvent,
    InterruptQueue,
    PhaseEvent,
    PlanStepEvent,
    ReActAgent,
    ReActOptions,
    RunEvent,
    StepEvent,
    Usage,
)

from engine.dag_support import DagScript, StepPlay, plan_of
from engine.support import make_tool
from support.waiting import wait_until

GUARD = 5.0
LOW = {"achieved": False, "confidence": 0.3, "reasoning": "B is missing"}
HIGH = {"achieved": True, "confidence": 0.9, "reasoning": "all there"}


async def until(condition: Callable[[], bool]) -> None:
    await wait_until(condition, GUARD, every=0)


def lookups(*tasks: str) -> dict[str, StepPlay]:
    return {t: StepPlay([("lookup", {"x": i})], f"found {t}") for i, t in enumerate(tasks)}


def three_steps() -> dict[str, object]:
    return plan_of(("a", "A", []), ("b", "B", []), ("c", "C", ["a", "b"]))


# -- the drop-in -------------------------------------------------------------------------


def test_run_takes_exactly_react_agents_arguments():
    react = inspect.signature(ReActAgent.run).parameters
    dag = inspect.signature(DAGAgent.run).parameters
    assert [(p.name, p.kind, p.default) for p in dag.values()] == [
        (p.name, p.kind, p.default) for p in react.values()
    ]
    stream = inspect.signature(DAGAgent.stream_answer).parameters
    assert list(stream) == list(inspect.signature(ReActAgent.stream_answer).parameters)


def test_react_options_are_react_agents_keyword_options():
    react = set(inspect.signature(ReActAgent.__init__).parameters) - {"self", "llm", "tools"}
    assert set(ReActOptions.__annotations__) == react - {"hooks"}


async def test_the_result_is_filled_honestly():
    script = DagScript(plans=[three_steps()], steps=lookups("A", "B"))
    llm = script.llm(model="main-model")
    agent = DAGAgent(llm, [make_tool("lookup")])
    assert agent.llm is llm
    result = await agent.run("goal", run_id="run-7")
    assert (result.status, result.error, result.run_id) == ("completed", None, "run-7")
    assert result.model == "main-model" and result.tools == ("lookup",)
    # planner 1 call, steps a and b two each, c one, the analyser one: 30 + 5 * 15 + 30
    assert result.usage == Usage(90, 45, 135)
    assert result.iterations == 5
    assert [(s.index, s.tool, s.plan_step) for s in result.steps] == [
        (0, "lookup", "a"),
        (1, "lookup", "b"),
    ]
    assert result.answer == "result of C"  # the plan's last step
    plan = result.plan
    assert plan is not None and len(plan.rounds) == 1
    assert [s.state for s in plan.steps] == ["completed"] * 3
    assert plan.verdict is not None and plan.verdict.confidence == 0.9
    assert plan.as_dict()["rounds"][0]["steps"][2]["dependencies"] == ["a", "b"]


async def test_events_come_in_order():
    script = DagScript(plans=[three_steps()], steps=lookups("A", "B"))
    events: list[RunEvent] = []
    await DAGAgent(script.llm(), [make_tool("lookup")]).run("goal", on_event=events.append)
    phases = [e.phase for e in events if isinstance(e, PhaseEvent)]
    assert phases == ["planning", "executing", "analysing", "done"]
    kinds = [e.type for e in events]
    assert kinds[0] == "phase" and kinds[-2:] == ["phase", "done"]
    assert kinds[1:4] == ["plan_step"] * 3  # the checklist, before anything runs
    for step_id in "abc":
        mine = [e.state for e in events if isinstance(e, PlanStepEvent) and e.step_id == step_id]
        assert mine == ["pending", "running", "completed"]
    index = {id(e): i for i, e in enumerate(events)}
    for step_id in "ab":
        running = next(
            e
            for e in events
            if isinstance(e, PlanStepEvent) and (e.step_id, e.state) == (step_id, "running")
        )
        done = next(
            e
            for e in events
            if isinstance(e, PlanStepEvent) and (e.step_id, e.state) == (step_id, "completed")
        )
        calls = [e for e in events if isinstance(e, StepEvent) and e.plan_step == step_id]
        assert all(index[id(running)] < index[id(c)] < index[id(done)] for c in calls)
    analysing = next(e for e in events if isinstance(e, PhaseEvent) and e.phase == "analysing")
    last_step = max(index[id(e)] for e in events if isinstance(e, PlanStepEvent))
    assert last_step < index[id(analysing)]
    assert not any(isinstance(e, AnswerEvent) for e in events)
    done_events = [e for e in events if isinstance(e, DoneEvent)]
    assert len(done_events) == 1 and done_events[0].tool_calls == 2


async def test_the_answer_is_synthesised_from_the_steps_results():
    script = DagScript(plans=[three_steps()], steps=lookups("A", "B"))
    llm = script.llm()
    agent = DAGAgent(llm, [make_tool("lookup")])
    result = await agent.run("the goal")
    events: list[RunEvent] = []
    text = "".join(
        [d async for d in agent.stream_answer("the goal", result, on_event=events.append)]
    )
    assert text == "the answer"
    assert "".join(e.delta for e in events if isinstance(e, AnswerEvent)) == "the answer"
    prompt = llm.calls[-1].messages[-1].content
    assert llm.calls[-1].stream
    assert "Question: the goal" in prompt
    assert "Tool result (plan_step): found A" in prompt
    assert "Tool result (plan_step): result of C" in prompt
    assert result.synthesis_usage == Usage()  # the scripted stream reports none
    assert result.total_usage == result.usage


# -- stop --------------------------------------------------------------------------------


async def test_stop_cancels_running_steps_and_skips_pending_ones():
    started: list[int] = []
    never = asyncio.Event()

    async def lookup(x: int) -> str:
        started.append(x)
        await never.wait()
        return "never"

    script = DagScript(plans=[three_steps()], steps=lookups("A", "B"))
    queue = InterruptQueue()
    events: list[RunEvent] = []
    agent = DAGAgent(script.llm(), [make_tool("lookup", lookup)])
    run = asyncio.create_task(agent.run("goal", interrupt_queue=queue, on_event=events.append))
    await until(lambda: len(started) == 2)
    assert queue.stop("stopped by user")
    result = await asyncio.wait_for(run, GUARD)
    assert (result.status, result.error) == ("cancelled", "stopped by user")
    states = {s.step.id: (s.state, s.reason) for s in result.plan.steps}  # type: ignore[union-attr]
    assert states == {
        "a": ("cancelled", "stopped by user"),
        "b": ("cancelled", "stopped by user"),
        "c": ("skipped", "stopped by user"),
    }
    assert [s.status for s in result.steps] == ["cancelled", "cancelled"]
    assert "analyse" not in script.seen
    assert isinstance(events[-1], DoneEvent) and events[-1].status == "cancelled"
    assert not queue.running


async def test_stop_while_planning_ends_the_run_cancelled():
    planning = asyncio.Event()
    release = asyncio.Event()

    async def slow_plan(*args: object, **kwargs: object) -> object:
        planning.set()
        await release.wait()
        raise AssertionError("not reached")

    script = DagScript(plans=[three_steps()])
    llm = script.llm()
    llm.chat = slow_plan  # type: ignore[method-assign]
    queue = InterruptQueue()
    run = asyncio.create_task(DAGAgent(llm).run("goal", interrupt_queue=queue))
    await until(planning.is_set)
    queue.stop()
    result = await asyncio.wait_for(run, GUARD)
    assert result.status == "cancelled" and result.plan is not None and result.plan.rounds == ()


async def test_cancelling_from_outside_propagates_and_leaves_no_step_running():
    never = asyncio.Event()
    started: list[int] = []

    async def lookup(x: int) -> str:
        started.append(x)
        await never.wait()
        return "never"

    script = DagScript(plans=[three_steps()], steps=lookups("A", "B"))
    run = asyncio.create_task(DAGAgent(script.llm(), [make_tool("lookup", lookup)]).run("goal"))
    await until(lambda: len(started) == 2)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    leftovers = [t for t in asyncio.all_tasks() if t.get_name().startswith("plan-step-")]
    assert all(t.done() for t in leftovers)


# -- re-plans ------------------------------------------------------------------------------


async def test_a_low_verdict_replans_with_what_was_learned():
    script = DagScript(
        plans=[plan_of(("a", "A", [])), plan_of(("b", "B", []))],
        steps=lookups("A", "B"),
        verdicts=[LOW, HIGH],
    )
    llm = script.llm()
    events: list[RunEvent] = []
    result = await DAGAgent(llm, [make_tool("lookup")]).run("goal", on_event=events.append)
    plan = result.plan
    assert plan is not None
    assert [(r.round, r.trigger) for r in plan.rounds] == [(0, "initial"), (1, "low_confidence")]
    assert [r.verdict.confidence for r in plan.rounds] == [0.3, 0.9]  # type: ignore[union-attr]
    replan_prompt = [c for c in llm.calls if "Plan how to reach" in c.messages[0].content][1]
    assert "found A" in replan_prompt.messages[0].content
    assert "B is missing" in replan_prompt.messages[0].content
    phases = [(e.phase, e.round) for e in events if isinstance(e, PhaseEvent)]
    assert phases == [
        ("planning", 0),
        ("executing", 0),
        ("analysing", 0),
        ("replanning", 1),
        ("executing", 1),
        ("analysing", 1),
        ("done", 1),
    ]
    assert [s.plan_step for s in result.steps] == ["a", "b"]


async def test_replans_are_bounded():
    script = DagScript(plans=[plan_of(("a", "A", []))], verdicts=[LOW])
    agent = DAGAgent(script.llm(), settings=DAGSettings(max_replans=2))
    result = await agent.run("goal")
    assert result.status == "completed"
    assert script.seen.count("plan") == 3 and script.seen.count("analyse") == 3
    assert len(result.plan.rounds) == 3  # type: ignore[union-attr]

    script = DagScript(plans=[plan_of(("a", "A", []))], verdicts=[LOW])
    await DAGAgent(script.llm(), settings=DAGSettings(max_replans=0)).run("goal")
    assert script.seen.count("plan") == 1


async def test_no_verdict_means_no_replan():
    script = DagScript(plans=[plan_of(("a", "A", []))], verdicts=[{"nonsense": 1}])
    result = await DAGAgent(script.llm()).run("goal")
    assert script.seen.count("plan") == 1
    assert result.plan is not None and result.plan.verdict is None


async def test_a_failed_replan_keeps_what_was_found():
    script = DagScript(plans=[plan_of(("a", "A", [])), "garbage"], verdicts=[LOW])
    result = await DAGAgent(script.llm()).run("goal")
    assert result.status == "completed" and result.answer == "result of A"
    assert len(result.plan.rounds) == 1  # type: ignore[union-attr]


async def test_a_follow_up_message_replans_with_it():
    release = asyncio.Event()
    started: list[int] = []

    async def lookup(x: int) -> str:
        started.append(x)
        await release.wait()
        return f"value {x}"

    script = DagScript(
        plans=[
            plan_of(("a", "A", []), ("c", "C", ["a"])),
            plan_of(("d", "in Celsius please", [])),
        ],
        steps=lookups("A"),
    )
    llm = script.llm()
    queue = InterruptQueue()
    events: list[RunEvent] = []
    agent = DAGAgent(llm, [make_tool("lookup", lookup)])
    run = asyncio.create_task(agent.run("weather", interrupt_queue=queue, on_event=events.append))
    await until(lambda: bool(started))
    queue.put_nowait("and in Celsius please")
    release.set()
    result = await asyncio.wait_for(run, GUARD)
    plan = result.plan
    assert plan is not None
    assert [r.trigger for r in plan.rounds] == ["initial", "follow_up"]
    first = {s.step.id: s.state for s in plan.rounds[0].steps}
    assert first == {"a": "completed", "c": "skipped"}  # c never started: the plan changed
    assert plan.rounds[0].verdict is None  # no judging of the old goal
    assert "and in Celsius please" in plan.rounds[1].goal
    replan = [c for c in llm.calls if "Plan how to reach" in c.messages[0].content][1]
    assert "and in Celsius please" in replan.messages[0].content
    assert any(m.kind == "interrupt" for m in result.messages)
    assert ("replanning", "follow_up") in [
        (e.phase, e.detail) for e in events if isinstance(e, PhaseEvent)
    ]
    assert len(queue) == 0


async def test_a_follow_up_after_the_last_replan_is_left_for_the_next_turn():
    release = asyncio.Event()

    async def lookup(x: int) -> str:
        await release.wait()
        return "v"

    script = DagScript(plans=[plan_of(("a", "A", []))], steps=lookups("A"))
    queue = InterruptQueue()
    agent = DAGAgent(
        script.llm(), [make_tool("lookup", lookup)], settings=DAGSettings(max_replans=0)
    )
    run = asyncio.create_task(agent.run("goal", interrupt_queue=queue))
    await until(lambda: "step:A" in script.seen)
    queue.put_nowait("one more thing")
    release.set()
    result = await asyncio.wait_for(run, GUARD)
    assert len(result.plan.rounds) == 1  # type: ignore[union-attr]
    assert queue.drain() == ["one more thing"]


# -- auto mode -------------------------------------------------------------------------------


async def test_auto_mode_answers_a_short_question_with_react_and_no_extra_call():
    script = DagScript(plans=[three_steps()], react=["sunny"])
    llm = script.llm()
    events: list[RunEvent] = []
    agent = DAGAgent(llm, [make_tool("lookup")], mode="auto")
    result = await agent.run("What's the weather in Paris?", on_event=events.append)
    assert script.seen == ["react"]
    assert len(llm.calls) == 1
    assert result.plan is None and result.answer == "sunny"
    assert not any(isinstance(e, PhaseEvent | PlanStepEvent) for e in events)


async def test_auto_mode_plans_an_enumeration():
    script = DagScript(plans=[three_steps()])
    agent = DAGAgent(script.llm(), mode="auto")
    result = await agent.run("Weather in Paris, London and Tokyo")
    assert script.seen[0] == "plan" and result.plan is not None


async def test_auto_mode_asks_the_fast_model_when_the_rule_cannot_tell():
    question = (
        "I am preparing the quarterly review for the board and would like to know how "
        "revenue developed compared to our forecast, given everything that happened."
    )
    main = DagScript(react=["react answer"])
    fast = DagScript(mode="react")
    from bot.engine import ModelRegistry

    fast_llm = fast.llm(model="small")
    agent = DAGAgent(ModelRegistry(main.llm(), fast=fast_llm), mode="auto")
    events: list[RunEvent] = []
    result = await agent.run(question, on_event=events.append)
    assert fast.seen == ["mode"] and main.seen == ["react"]
    assert result.usage == Usage(20, 10, 30) + Usage(10, 5, 15)
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.usage == result.usage


async def test_stop_while_auto_mode_is_choosing_ends_the_run_cancelled():
    question = (
        "I am preparing the quarterly review for the board and would like to know how "
        "revenue developed compared to our forecast, given everything that happened."
    )
    choosing = asyncio.Event()
    never = asyncio.Event()
    script = DagScript(plans=[three_steps()], mode="dag")
    llm = script.llm()

    async def slow_choice(*args: object, **kwargs: object) -> object:
        choosing.set()
        await never.wait()
        raise AssertionError("not reached")

    llm.chat = slow_choice  # type: ignore[method-assign]
    queue = InterruptQueue()
    events: list[RunEvent] = []
    agent = DAGAgent(llm, [make_tool("lookup")], mode="auto")
    run = asyncio.create_task(agent.run(question, interrupt_queue=queue, on_event=events.append))
    await until(choosing.is_set)
    # The choice is a model call: a /stop now must reach the run, not fall between the
    # choice and the run that would follow it.
    assert queue.stop("stopped by /stop")
    result = await asyncio.wait_for(run, GUARD)
    assert (result.status, result.error) == ("cancelled", "stopped by /stop")
    assert result.steps == [] and result.plan is None and result.iterations == 0
    assert result.messages[-1].kind == "query" and result.messages[-1].content == question
    assert "plan" not in script.seen and not queue.running
    assert [type(e) for e in events] == [DoneEvent]
    assert isinstance(events[0], DoneEvent) and events[0].status == "cancelled"


async def test_cancelling_auto_mode_from_outside_while_choosing_propagates():
    question = (
        "I am preparing the quarterly review for the board and would like to know how "
        "revenue developed compared to our forecast, given everything that happened."
    )
    choosing = asyncio.Event()
    never = asyncio.Event()
    llm = DagScript(mode="dag").llm()

    async def slow_choice(*args: object, **kwargs: object) -> object:
        choosing.set()
        await never.wait()
        raise AssertionError("not reached")

    llm.chat = slow_choice  # type: ignore[method-assign]
    queue = InterruptQueue()
    run = asyncio.create_task(DAGAgent(llm, mode="auto").run(question, interrupt_queue=queue))
    await until(choosing.is_set)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert not queue.running
