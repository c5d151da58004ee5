"""User interrupts during a run, and stopping a run (/stop) with a consistent result."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from bot.engine import HookResult, InterruptQueue, LLMResponse, ReActAgent
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response

from engine.support import make_tool


async def test_interrupts_during_tools_merge_into_one_pinned_message():
    queue = InterruptQueue()

    async def chatty(x: int) -> str:
        queue.put_nowait("also check Berlin")
        queue.put_nowait("and Rome")
        return "weather: sunny"

    llm = ScriptedLLM([tool_calls_response(tool_call("weather", {"x": 1}, id="c1")), "done"])
    result = await ReActAgent(llm, [make_tool("weather", chatty)]).run(
        "Paris?", interrupt_queue=queue
    )
    second_call = llm.calls[1].messages
    assert [m.role for m in second_call[-3:]] == ["assistant", "tool", "user"]
    interrupt = second_call[-1]
    assert interrupt.pinned and interrupt.kind == "interrupt"
    assert interrupt.content.startswith("[USER INTERRUPT]")
    assert "also check Berlin" in interrupt.content and "and Rome" in interrupt.content
    assert sum(m.kind == "interrupt" for m in result.messages) == 1
    assert len(queue) == 0


async def test_native_mode_drains_only_after_the_tool_results(echo):
    queue = InterruptQueue()

    def reply_with_call(messages):
        queue.put_nowait("hurry up")  # arrives while the model is answering
        return tool_calls_response(tool_call("echo", {"x": 1}, id="c1"))

    llm = ScriptedLLM([reply_with_call, "done"])
    result = await ReActAgent(llm, [echo]).run("go", interrupt_queue=queue)
    kinds = [(m.role, m.kind) for m in result.messages]
    assert kinds[2:5] == [
        ("assistant", "assistant"),
        ("tool", "observation"),
        ("user", "interrupt"),
    ]


async def test_a_pending_final_answer_is_dropped_when_interrupts_arrived(echo):
    queue = InterruptQueue()

    def stale_answer(messages):
        queue.put_nowait("actually, in Celsius please")
        return LLMResponse(content="It is 70F.")

    llm = ScriptedLLM([stale_answer, "It is 21C."])
    result = await ReActAgent(llm, [echo]).run("temperature?", interrupt_queue=queue)
    assert result.answer == "It is 21C."
    assert all("70F" not in m.content for m in result.messages)
    assert llm.calls[1].messages[-1].kind == "interrupt"
    assert result.iterations == 2


async def test_json_mode_drains_after_each_assistant_message(echo):
    queue = InterruptQueue()

    def garbled(messages):
        queue.put_nowait("use x=2")
        return LLMResponse(content="uh")

    final = json.dumps({"type": "final_answer", "answer": "ok"})
    llm = ScriptedLLM([garbled, final], abilities={"tool_call": False})
    await ReActAgent(llm, [echo]).run("go", interrupt_queue=queue)
    sent = llm.calls[1].messages
    assert [m.kind for m in sent[-3:]] == ["assistant", "reformat", "interrupt"]


async def test_put_nowait_from_another_thread(echo):
    queue = InterruptQueue()
    thread = threading.Thread(target=queue.put_nowait, args=("from a thread",))
    thread.start()
    thread.join()
    assert queue.drain() == ["from a thread"]
    queue.put_nowait("   ")
    assert not queue.pending()


async def test_stop_cancels_a_running_tool_and_leaves_a_consistent_result():
    queue = InterruptQueue()
    started = asyncio.Event()
    cancelled = []

    async def forever(x: int) -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(x)
            raise
        return "never"

    async def fast(x: int) -> str:
        return "fast result"

    tools = [make_tool("forever", forever), make_tool("fast", fast)]
    calls = [tool_call("fast", {"x": 1}, id="c1"), tool_call("forever", {"x": 2}, id="c2")]
    llm = ScriptedLLM([tool_calls_response(*calls)])
    events = []
    agent = ReActAgent(llm, tools)
    run = asyncio.create_task(agent.run("go", interrupt_queue=queue, on_event=events.append))
    await started.wait()
    assert queue.stop("stopped by /stop") is True
    result = await run

    assert result.status == "cancelled"
    assert cancelled == [2]
    assert [(s.call_id, s.status) for s in result.steps] == [("c1", "ok"), ("c2", "cancelled")]
    # Every requested call has its result, in order, right after the assistant message.
    tail = result.messages[-3:]
    assert tail[0].tool_calls and [m.tool_call_id for m in tail[1:]] == ["c1", "c2"]
    assert tail[1].content == "fast result"
    assert "cancelled" in tail[2].content
    assert "stopped" in result.answer.lower()
    assert events[-1].type == "done" and events[-1].status == "cancelled"
    assert not queue.running


@pytest.mark.parametrize("synthesis", ["auto", "always"])  # a streamed call, a plain one
async def test_stop_during_a_model_call(synthesis):
    queue = InterruptQueue()
    thinking = asyncio.Event()

    class SlowLLM(ScriptedLLM):
        async def chat(self, messages, **kwargs):
            thinking.set()
            await asyncio.sleep(60)
            raise AssertionError("unreachable")

        async def stream_chat(self, messages, **kwargs):
            thinking.set()
            await asyncio.sleep(60)
            raise AssertionError("unreachable")
            yield  # an async generator, as a provider's stream is

    agent = ReActAgent(SlowLLM(), [make_tool("echo")], synthesis=synthesis)
    run = asyncio.create_task(agent.run("go", interrupt_queue=queue))
    await thinking.wait()
    queue.stop()
    result = await run
    assert result.status == "cancelled"
    assert result.iterations == 1
    assert result.messages[-1].kind == "query"


async def test_stop_during_an_approval_wait_cancels_the_wait():
    queue = InterruptQueue()
    waiting = asyncio.Event()
    outcome = []

    class Approval:
        async def pre_tool_use(self, call):
            waiting.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                outcome.append("approval cancelled")
                raise
            return HookResult()

    llm = ScriptedLLM([tool_calls_response(tool_call("echo", {"x": 1}, id="c1"))])
    agent = ReActAgent(llm, [make_tool("echo")], hooks=[Approval()])
    run = asyncio.create_task(agent.run("go", interrupt_queue=queue))
    await waiting.wait()
    queue.stop()
    result = await run
    assert outcome == ["approval cancelled"]
    assert result.steps[0].status == "cancelled"


async def test_cancelling_the_task_from_outside_still_propagates(echo):
    started = asyncio.Event()

    async def forever(x: int) -> str:
        started.set()
        await asyncio.sleep(60)
        return "never"

    llm = ScriptedLLM([tool_calls_response(tool_call("forever", {"x": 1}))])
    run = asyncio.create_task(
        ReActAgent(llm, [make_tool("forever", forever)]).run("go", interrupt_queue=InterruptQueue())
    )
    await started.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


async def test_stop_without_a_run_does_nothing():
    queue = InterruptQueue()
    assert queue.stop() is False
    assert not queue.running


async def test_the_queue_is_reusable_after_a_stopped_run(echo):
    queue = InterruptQueue()
    started = asyncio.Event()

    async def forever(x: int) -> str:
        started.set()
        await asyncio.sleep(60)
        return "never"

    llm = ScriptedLLM([tool_calls_response(tool_call("forever", {"x": 1}))])
    run = asyncio.create_task(
        ReActAgent(llm, [make_tool("forever", forever)]).run("go", interrupt_queue=queue)
    )
    await started.wait()
    queue.stop()
    assert (await run).status == "cancelled"

    result = await ReActAgent(ScriptedLLM(["fresh"]), [echo]).run("again", interrupt_queue=queue)
    assert result.status == "completed" and result.answer == "fresh"


async def test_reused_call_ids_across_turns_do_not_confuse_a_stop():
    queue = InterruptQueue()
    started = asyncio.Event()

    async def tool(x: int) -> str:
        if x == 2:
            started.set()
            await asyncio.sleep(60)
        return f"result {x}"

    # A server that numbers calls per turn sends "call_0" every time.
    llm = ScriptedLLM(
        [
            tool_calls_response(tool_call("t", {"x": 1}, id="call_0")),
            tool_calls_response(tool_call("t", {"x": 2}, id="call_0")),
        ]
    )
    run = asyncio.create_task(
        ReActAgent(llm, [make_tool("t", tool)]).run("go", interrupt_queue=queue)
    )
    await started.wait()
    queue.stop()
    result = await run
    assert [(s.observation, s.status) for s in result.steps][-1][1] == "cancelled"
    assert result.messages[-1].content.startswith("[cancelled")


async def test_a_stop_during_tool_selection_still_records_the_question():
    queue = InterruptQueue()
    selecting = asyncio.Event()

    class SlowSelector(ScriptedLLM):
        async def chat(self, messages, **kwargs):
            selecting.set()
            await asyncio.sleep(60)
            raise AssertionError("unreachable")

    tools = [make_tool(f"t{i}") for i in range(13)]
    run = asyncio.create_task(
        ReActAgent(SlowSelector(), tools).run("which?", interrupt_queue=queue)
    )
    await selecting.wait()
    queue.stop()
    result = await run
    assert result.status == "cancelled"
    assert [(m.kind, m.content) for m in result.messages] == [("query", "which?")]
