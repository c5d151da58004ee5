"""DAGExecutor through DAGAgent: parallel steps, the concurrency cap, failures that skip
dependants, hooks in every step, and the per-step time limit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from bot.engine import (
    DAGAgent,
    DAGSettings,
    HookResult,
    ModelRegistry,
    PlanStepEvent,
    RunEvent,
    StepEvent,
    ToolUse,
)
from bot.engine.testing import ScriptedLLM

from engine.dag_support import DagScript, StepPlay, plan_of
from engine.support import make_tool
from support.waiting import wait_until

GUARD = 5.0  # a deadlock guard only: nothing below asserts on time


async def until(condition: Callable[[], bool]) -> None:
    await wait_until(condition, GUARD, every=0)


def states(events: list[RunEvent]) -> list[tuple[str, str]]:
    return [(e.step_id, e.state) for e in events if isinstance(e, PlanStepEvent)]


def lookups(*tasks: str) -> dict[str, StepPlay]:
    return {t: StepPlay([("lookup", {"x": i})], f"found {t}") for i, t in enumerate(tasks)}


async def test_independent_steps_really_overlap():
    a_started, b_started = asyncio.Event(), asyncio.Event()

    async def lookup(x: int) -> str:
        mine, other = (a_started, b_started) if x == 0 else (b_started, a_started)
        mine.set()
        await other.wait()  # only returns if the other step runs at the same time
        return f"value {x}"

    script = DagScript(
        plans=[plan_of(("a", "A", []), ("b", "B", []), ("c", "C", ["a", "b"]))],
        steps=lookups("A", "B"),
    )
    agent = DAGAgent(script.llm(), [make_tool("lookup", lookup)])
    result = await asyncio.wait_for(agent.run("goal"), GUARD)
    assert result.status == "completed"
    assert [s.observation for s in result.steps] == ["value 0", "value 1"]
    assert {s.plan_step for s in result.steps} == {"a", "b"}
    assert "found A" in script.step_questions["C"] and "found B" in script.step_questions["C"]


async def test_the_concurrency_cap_holds():
    gate = asyncio.Event()
    active: list[int] = []
    started: list[int] = []
    peak = 0

    async def lookup(x: int) -> str:
        nonlocal peak
        started.append(x)
        active.append(x)
        peak = max(peak, len(active))
        await gate.wait()
        active.remove(x)
        return str(x)

    tasks = [f"T{i}" for i in range(6)]
    script = DagScript(plans=[plan_of(*((t, t, []) for t in tasks))], steps=lookups(*tasks))
    agent = DAGAgent(
        script.llm(), [make_tool("lookup", lookup)], settings=DAGSettings(max_concurrency=2)
    )
    run = asyncio.create_task(agent.run("goal"))
    await until(lambda: len(started) == 2)
    for _ in range(50):  # let the loop run: nothing else may start while two hold
        await asyncio.sleep(0)
    assert len(started) == 2
    gate.set()
    result = await asyncio.wait_for(run, GUARD)
    assert result.status == "completed"
    assert sorted(started) == list(range(6)) and peak == 2


async def test_a_failed_step_skips_its_dependants_and_only_them():
    plan = plan_of(
        ("a", "A", []), ("b", "B", ["a"]), ("c", "C", ["b"]), ("d", "D", []), ("e", "E", ["d"])
    )
    plan["steps"][0]["model_hint"] = "reasoning"  # step a runs on the broken model
    failing = ScriptedLLM([RuntimeError("model down")] * 5, model="broken")
    agent = DAGAgent(ModelRegistry(DagScript(plans=[plan]).llm(), reasoning=failing))
    events: list[RunEvent] = []
    result = await agent.run("goal", on_event=events.append)
    reports = {r.step.id: r for r in result.plan.steps}  # type: ignore[union-attr]
    assert reports["a"].state == "failed" and "model failed" in (reports["a"].reason or "")
    assert reports["b"].state == "skipped" and "depends on a" in (reports["b"].reason or "")
    assert reports["c"].state == "skipped" and "depends on b" in (reports["c"].reason or "")
    assert reports["d"].state == reports["e"].state == "completed"
    assert result.status == "completed"  # something was found: the answer says the rest
    assert ("b", "running") not in states(events)
    assert ("b", "skipped") in states(events)


async def test_every_step_failing_ends_the_run_with_an_error():
    plan = plan_of(("a", "A", []), ("b", "B", []))
    for step in plan["steps"]:
        step["model_hint"] = "fast"
    broken = ScriptedLLM([RuntimeError("down")] * 10, model="broken")
    agent = DAGAgent(ModelRegistry(DagScript(plans=[plan]).llm(), fast=broken))
    result = await agent.run("goal")
    assert result.status == "error"
    assert "no step of the plan completed" in (result.error or "")


async def test_each_step_gets_the_model_its_hint_names():
    plan = plan_of(("a", "A", []), ("b", "B", []), ("c", "C", []))
    for step, hint in zip(plan["steps"], ["fast", "reasoning", None], strict=True):
        step["model_hint"] = hint
    script = DagScript(plans=[plan])
    default, fast, reasoning = (script.llm(model=n) for n in ("main", "small", "big"))
    result = await DAGAgent(ModelRegistry(default, fast=fast, reasoning=reasoning)).run("goal")
    models = {r.step.id: r.model for r in result.plan.steps}  # type: ignore[union-attr]
    assert models == {"a": "small", "b": "big", "c": "main"}


class HoldFirstCall:
    """Holds the call with x == 0 until released, as an approval waits for a person."""

    def __init__(self) -> None:
        self.holding = asyncio.Event()
        self.release = asyncio.Event()
        self.seen: list[str] = []

    async def pre_tool_use(self, call: ToolUse) -> HookResult:
        self.seen.append(call.run.run_id)
        if call.arguments.get("x") == 0:
            self.holding.set()
            await self.release.wait()
        return HookResult()


async def test_a_step_held_by_a_hook_waits_alone():
    hook = HoldFirstCall()
    script = DagScript(
        plans=[plan_of(("a", "A", []), ("b", "B", []), ("c", "C", ["b"]))],
        steps=lookups("A", "B"),
    )
    agent = DAGAgent(script.llm(), [make_tool("lookup")], hooks=[hook])
    events: list[RunEvent] = []
    run = asyncio.create_task(agent.run("goal", on_event=events.append, run_id="r1"))
    await until(hook.holding.is_set)
    await until(lambda: ("c", "completed") in states(events))
    assert ("a", "completed") not in states(events)  # still held
    hook.release.set()
    result = await asyncio.wait_for(run, GUARD)
    assert result.status == "completed"
    assert sorted(hook.seen) == ["r1:0:a", "r1:0:b"]  # the hook saw every step's call


async def test_a_read_only_hook_blocks_a_write_in_a_step():
    written: list[Any] = []

    async def write(x: int) -> str:
        written.append(x)
        return "written"

    class ReadOnly:
        async def pre_tool_use(self, call: ToolUse) -> HookResult:
            if call.side_effect == "write":
                return HookResult(allow=False, reason="read-only mode")
            return HookResult()

    script = DagScript(
        plans=[plan_of(("a", "A", []), ("b", "B", []))],
        steps={"A": StepPlay([("write", {"x": 1})], "could not write"), **lookups("B")},
    )
    tools = [make_tool("write", write, side_effect="write"), make_tool("lookup")]
    result = await DAGAgent(script.llm(), tools, hooks=[ReadOnly()]).run("goal")
    assert written == []
    blocked = [s for s in result.steps if s.tool == "write"]
    assert [(s.status, s.error, s.plan_step) for s in blocked] == [
        ("blocked", "read-only mode", "a")
    ]


async def test_a_step_over_its_time_limit_fails_and_skips_its_dependants():
    never = asyncio.Event()

    async def lookup(x: int) -> str:
        await never.wait()
        return "never"

    script = DagScript(plans=[plan_of(("a", "A", []), ("b", "B", ["a"]))], steps=lookups("A"))
    agent = DAGAgent(
        script.llm(), [make_tool("lookup", lookup)], settings=DAGSettings(step_timeout=0.05)
    )
    result = await asyncio.wait_for(agent.run("goal"), GUARD)
    reports = {r.step.id: r for r in result.plan.steps}  # type: ignore[union-attr]
    assert reports["a"].state == "failed"
    assert reports["a"].reason == "timed out after 0.05 s"
    assert reports["b"].state == "skipped"
    assert [s.status for s in result.steps] == ["cancelled"]  # the call is still recorded


async def test_time_held_in_a_hook_does_not_count_against_the_step():
    hook = HoldFirstCall()
    script = DagScript(plans=[plan_of(("a", "A", []))], steps=lookups("A"))
    agent = DAGAgent(
        script.llm(),
        [make_tool("lookup")],
        hooks=[hook],
        settings=DAGSettings(step_timeout=0.05),
    )
    run = asyncio.create_task(agent.run("goal"))
    await until(hook.holding.is_set)
    await asyncio.sleep(0.2)  # well past the limit, all of it held by the hook
    hook.release.set()
    result = await asyncio.wait_for(run, GUARD)
    assert result.plan.steps[0].state == "completed"  # type: ignore[union-attr]


async def test_tool_events_of_steps_are_tagged_with_their_plan_step():
    script = DagScript(plans=[plan_of(("a", "A", []), ("b", "B", []))], steps=lookups("A", "B"))
    events: list[RunEvent] = []
    await DAGAgent(script.llm(), [make_tool("lookup")]).run("goal", on_event=events.append)
    tagged = [(e.plan_step, e.phase) for e in events if isinstance(e, StepEvent)]
    assert sorted(tagged) == [
        ("a", "finished"),
        ("a", "started"),
        ("b", "finished"),
        ("b", "started"),
    ]
    step_event = next(e for e in events if isinstance(e, StepEvent))
    assert step_event.to_dict()["plan_step"] in ("a", "b")
