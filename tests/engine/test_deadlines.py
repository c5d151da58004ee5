"""Tool timeouts served by one shared timer: the edge cases asyncio.timeout also handles."""

from __future__ import annotations

import asyncio

import pytest

from bot.engine import InterruptQueue, ReActAgent
from bot.engine.deadlines import ToolDeadlines
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response

from engine.support import make_tool


async def test_parallel_calls_time_out_each_at_its_own_deadline():
    async def sleeper(x: int) -> str:
        await asyncio.sleep(x / 100)
        return f"slept {x}"

    tool = make_tool("sleeper", sleeper, timeout=0.05)
    calls = [tool_call("sleeper", {"x": x}, id=f"c{x}") for x in (1, 500, 2, 600)]
    llm = ScriptedLLM([tool_calls_response(*calls), "done", "done"])
    result = await ReActAgent(llm, [tool]).run("go")
    assert [s.status for s in result.steps] == ["ok", "error", "ok", "error"]
    assert result.steps[1].observation == "Error: sleeper timed out after 0.05 s."


async def test_sequential_calls_rearm_the_shared_timer():
    async def sleeper(x: int) -> str:
        await asyncio.sleep(x / 100)
        return "ok"

    tools = [make_tool("slow", sleeper, timeout=0.03), make_tool("patient", sleeper, timeout=5)]
    llm = ScriptedLLM(
        [
            tool_calls_response(tool_call("patient", {"x": 1}, id="a")),
            tool_calls_response(tool_call("slow", {"x": 300}, id="b")),
            tool_calls_response(tool_call("patient", {"x": 5}, id="c")),
            "done",
            "done",
        ]
    )
    result = await ReActAgent(llm, tools).run("go")
    assert [s.status for s in result.steps] == ["ok", "error", "ok"]


async def test_a_tool_that_swallows_the_cancellation_leaves_no_stray_cancel():
    async def stubborn(x: int) -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return "finished anyway"
        return "never"

    async def later(x: int) -> str:
        await asyncio.sleep(0.01)  # would be cancelled by a leftover request
        return "later ok"

    tools = [make_tool("stubborn", stubborn, timeout=0.02), make_tool("later", later)]
    llm = ScriptedLLM(
        [
            tool_calls_response(tool_call("stubborn", {"x": 1}, id="a")),
            tool_calls_response(tool_call("later", {"x": 1}, id="b")),
            "done",
        ]
    )
    result = await ReActAgent(llm, tools).run("go")
    assert result.steps[0].observation == "finished anyway"
    assert result.steps[1].observation == "later ok"
    assert result.status == "completed"
    assert asyncio.current_task().cancelling() == 0


async def test_a_stop_during_a_timing_out_call_still_stops_the_run():
    queue = InterruptQueue()
    started = asyncio.Event()

    async def hang(x: int) -> str:
        started.set()
        await asyncio.sleep(10)
        return "never"

    llm = ScriptedLLM([tool_calls_response(tool_call("hang", {"x": 1}, id="a"))])
    agent = ReActAgent(llm, [make_tool("hang", hang, timeout=0.05)])
    run = asyncio.create_task(agent.run("go", interrupt_queue=queue))
    await started.wait()
    queue.stop()
    result = await run
    assert result.status == "cancelled"


async def test_an_outside_cancel_is_not_taken_for_a_timeout():
    deadlines = ToolDeadlines()
    outcome = []

    async def call() -> None:
        deadline = deadlines.start(60)
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            outcome.append(deadline.absorb_expiry())
            raise
        finally:
            deadline.close()

    task = asyncio.create_task(call())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert outcome == [False]
    deadlines.close()


async def test_deadlines_need_a_task():
    deadlines = ToolDeadlines()
    loop = asyncio.get_running_loop()
    with pytest.raises(RuntimeError):
        await loop.run_in_executor(None, deadlines.start, 1.0)
