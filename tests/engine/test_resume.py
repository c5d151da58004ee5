"""A run held in a tool call's pre-hook, checkpointed, given up, and resumed elsewhere.

The first agent's run waits in a hook (as an approval waits for a person): the hook takes
``call.checkpoint()`` and the run is cancelled, as a process that stops. The checkpoint
goes through JSON (as through a database) to a NEW agent with a fresh model, scripted
with the rest of the conversation only, which ``resume()``s it to the end.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from bot.engine import (
    AnswerEvent,
    DAGAgent,
    DoneEvent,
    HookResult,
    InterruptQueue,
    Message,
    ReActAgent,
    RunCheckpoint,
    RunEvent,
    StepEvent,
    ToolUse,
)
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response

from engine.dag_support import DagScript, StepPlay, plan_of
from engine.support import make_tool

GUARD = 5.0  # a deadlock guard only: nothing below asserts on time


class Held:
    """Holds every call to ``tool`` forever, taking a checkpoint once ``before`` is set."""

    def __init__(self, tool: str = "send", before: asyncio.Event | None = None) -> None:
        self.tool = tool
        self.before = before
        self.checkpoint: RunCheckpoint | None = None
        self.holding = asyncio.Event()

    async def pre_tool_use(self, call: ToolUse) -> HookResult:
        if call.name == self.tool:
            if self.before is not None:
                await self.before.wait()
            assert call.checkpoint is not None
            self.checkpoint = call.checkpoint()
            self.holding.set()
            await asyncio.Event().wait()  # nobody decides in this process
        return HookResult()


class Approved:
    """The decision, found on resume: allows every call and records what it saw."""

    def __init__(self) -> None:
        self.seen: list[ToolUse] = []

    async def pre_tool_use(self, call: ToolUse) -> HookResult:
        self.seen.append(call)
        return HookResult()


class Counted:
    """Tools that count how often each ran."""

    def __init__(self, *names: str) -> None:
        self.ran: dict[str, int] = dict.fromkeys(names, 0)
        self.tools = [make_tool(name, self._handler(name)) for name in names]

    def _handler(self, name: str) -> Callable[..., Any]:
        async def handler(x: int) -> str:
            self.ran[name] += 1
            return f"{name} {x}"

        return handler


async def held_run(agent: ReActAgent, hook: Held, query: str = "send it") -> RunCheckpoint:
    """Run ``agent`` until ``hook`` holds a call, cancel it, and give back the checkpoint
    as another process reads it (through JSON)."""
    run = asyncio.create_task(agent.run(query, run_id="run-1"))
    await asyncio.wait_for(hook.holding.wait(), GUARD)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert hook.checkpoint is not None
    stored = json.dumps(hook.checkpoint.to_json())
    checkpoint = RunCheckpoint.from_json(json.loads(stored))
    assert checkpoint == hook.checkpoint
    return checkpoint


def steps_of(events: Sequence[RunEvent]) -> list[tuple[str, str]]:
    return [(e.phase, e.call_id) for e in events if isinstance(e, StepEvent)]


async def test_a_held_call_runs_once_on_resume_and_the_model_goes_on_from_there() -> None:
    first = Counted("lookup", "send")
    hook = Held()
    script = [
        tool_calls_response(tool_call("lookup", {"x": 1}, id="c1")),
        tool_calls_response(tool_call("send", {"x": 2}, id="c2"), content="Sending now."),
    ]
    checkpoint = await held_run(ReActAgent(ScriptedLLM(script), first.tools, hooks=[hook]), hook)
    assert first.ran == {"lookup": 1, "send": 0}
    assert [c.id for c in checkpoint.pending_calls] == ["c2"]
    assert (checkpoint.run_id, checkpoint.iterations, checkpoint.settled) == ("run-1", 2, ())
    assert checkpoint.reason == "Sending now."

    second = Counted("lookup", "send")
    approved = Approved()
    llm = ScriptedLLM(["It is sent."])
    events: list[RunEvent] = []
    agent = ReActAgent(llm, second.tools, hooks=[approved])
    result = await asyncio.wait_for(agent.resume(checkpoint, on_event=events.append), GUARD)

    assert second.ran == {"lookup": 0, "send": 1}  # exactly once, and nothing else again
    assert [(c.name, c.reason, c.run.run_id) for c in approved.seen] == [
        ("send", "Sending now.", "run-1")
    ]
    # One request: the earlier conversation and the tool's result, not a fresh start.
    (request,) = llm.calls
    held_turn = checkpoint.context[-1]
    assert list(request.messages) == [
        *checkpoint.context,
        Message.tool(held_turn.tool_calls[0], "send 2"),
    ]
    assert [m.content for m in request.messages if m.role == "tool"] == ["lookup 1", "send 2"]
    assert (result.status, result.answer, result.run_id) == ("completed", "It is sent.", "run-1")
    assert result.iterations == 3  # going on from the checkpoint's 2
    assert [(s.index, s.call_id, s.observation) for s in result.steps] == [
        (0, "c1", "lookup 1"),
        (1, "c2", "send 2"),
    ]
    assert [m.role for m in result.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert result.usage.total_tokens == checkpoint.usage.total_tokens + 15
    assert steps_of(events) == [("started", "c2"), ("finished", "c2")]
    assert result.answer_streamed  # native, streaming: the answer went out as it came
    assert "".join(e.delta for e in events if isinstance(e, AnswerEvent)) == "It is sent."
    assert isinstance(events[-1], DoneEvent) and events[-1].status == "completed"


async def test_a_parallel_call_that_finished_before_the_snapshot_is_not_run_again() -> None:
    lookup_done = asyncio.Event()
    first_ran: list[str] = []

    async def lookup(x: int) -> str:
        first_ran.append("lookup")
        lookup_done.set()
        return f"lookup {x}"

    hook = Held(before=lookup_done)
    script = [
        tool_calls_response(
            tool_call("lookup", {"x": 1}, id="a"), tool_call("send", {"x": 2}, id="b")
        )
    ]
    tools = [make_tool("lookup", lookup), make_tool("send")]
    checkpoint = await held_run(ReActAgent(ScriptedLLM(script), tools, hooks=[hook]), hook)
    assert [c.id for c in checkpoint.pending_calls] == ["a", "b"]
    assert [(s.call_id, s.observation) for s in checkpoint.settled] == [("a", "lookup 1")]

    second = Counted("lookup", "send")
    llm = ScriptedLLM(["Both done."])
    events: list[RunEvent] = []
    agent = ReActAgent(llm, second.tools, hooks=[Approved()])
    result = await asyncio.wait_for(agent.resume(checkpoint, on_event=events.append), GUARD)

    assert first_ran == ["lookup"] and second.ran == {"lookup": 0, "send": 1}
    assert [(s.index, s.call_id) for s in result.steps] == [(0, "a"), (1, "b")]
    assert result.steps[0] == checkpoint.settled[0]  # the step as it was, reused
    assert [m.content for m in llm.calls[0].messages[-3:]] == ["", "lookup 1", "send 2"]
    assert steps_of(events) == [("started", "b"), ("finished", "b")]
    assert result.answer == "Both done."


async def test_a_tool_the_new_agent_lacks_gets_the_unknown_tool_observation() -> None:
    hook = Held()
    script = [tool_calls_response(tool_call("send", {"x": 2}, id="c1"))]
    tools = Counted("lookup", "send").tools
    checkpoint = await held_run(ReActAgent(ScriptedLLM(script), tools, hooks=[hook]), hook)
    assert checkpoint.tools == ("lookup", "send")

    second = Counted("lookup")  # send is gone in this process
    llm = ScriptedLLM(["I could not send it."])
    result = await ReActAgent(llm, second.tools).resume(checkpoint)
    (step,) = result.steps
    assert (step.status, step.error) == ("error", "unknown tool 'send'")
    assert step.observation == "Error: unknown tool 'send'. Available tools: lookup."
    assert llm.calls[0].messages[-1].content == step.observation
    assert result.tools == ("lookup",)
    assert result.answer == "I could not send it."


async def test_json_mode_resumes_in_json_mode() -> None:
    hook = Held()
    send = '{"type": "tool_call", "tool": "send", "arguments": {"x": 2}, "reasoning": "asked to"}'
    tools = Counted("send").tools
    agent = ReActAgent(ScriptedLLM([send]), tools, hooks=[hook], use_native_tools=False)
    assert agent.mode == "json"
    checkpoint = await held_run(agent, hook)
    assert (checkpoint.mode, checkpoint.streams, checkpoint.reason) == ("json", False, "asked to")

    second = Counted("send")
    llm = ScriptedLLM(['{"type": "final_answer", "answer": "Sent."}'])
    # A native agent: the run goes on in the mode it was made in.
    result = await ReActAgent(llm, second.tools).resume(checkpoint)
    assert second.ran == {"send": 1}
    assert (result.mode, result.answer, result.status) == ("json", "Sent.", "completed")
    assert llm.calls[0].tools is None  # no native tool schemas in JSON mode
    last = llm.calls[0].messages[-1]
    assert (last.role, last.kind, last.content) == (
        "user",
        "observation",
        "Observation from send:\nsend 2",
    )


async def test_a_run_that_did_not_stream_does_not_stream_when_resumed() -> None:
    hook = Held()
    script = [tool_calls_response(tool_call("send", {"x": 2}, id="c1"))]
    agent = ReActAgent(ScriptedLLM(script), Counted("send").tools, hooks=[hook], synthesis="always")
    checkpoint = await held_run(agent, hook)
    assert not checkpoint.streams

    llm = ScriptedLLM(["Sent."])
    events: list[RunEvent] = []
    result = await ReActAgent(llm, Counted("send").tools).resume(checkpoint, on_event=events.append)
    assert not llm.calls[0].stream and not result.answer_streamed
    assert not any(isinstance(e, AnswerEvent) for e in events)
    assert result.answer == "Sent."


async def test_max_iterations_bounds_the_whole_run() -> None:
    hook = Held()
    script = [tool_calls_response(tool_call("send", {"x": 2}, id="c1"))]
    agent = ReActAgent(ScriptedLLM(script), Counted("send").tools, hooks=[hook], max_iterations=2)
    checkpoint = await held_run(agent, hook)
    assert checkpoint.iterations == 1

    llm = ScriptedLLM([tool_calls_response(tool_call("send", {"x": 3}, id="c2")), "never asked"])
    result = await ReActAgent(llm, Counted("send").tools, max_iterations=2).resume(checkpoint)
    assert (result.status, result.iterations, len(llm.calls)) == ("max_iterations", 2, 1)
    assert [s.call_id for s in result.steps] == ["c1", "c2"]


async def test_a_resumed_run_can_wait_again_be_checkpointed_again_and_be_stopped() -> None:
    hook = Held()
    script = [tool_calls_response(tool_call("send", {"x": 2}, id="c1"))]
    checkpoint = await held_run(
        ReActAgent(ScriptedLLM(script), Counted("send").tools, hooks=[hook]), hook
    )

    again = Held()
    queue = InterruptQueue()
    agent = ReActAgent(ScriptedLLM([]), Counted("send").tools, hooks=[again])
    resumed = asyncio.create_task(agent.resume(checkpoint, interrupt_queue=queue))
    await asyncio.wait_for(again.holding.wait(), GUARD)
    assert again.checkpoint == checkpoint  # the same run, waiting at the same place
    queue.stop("stopped by user")
    result = await asyncio.wait_for(resumed, GUARD)
    assert (result.status, result.run_id) == ("cancelled", "run-1")
    assert result.messages[-1].role == "tool"
    assert result.messages[-1].content == "[cancelled: stopped by user]"


async def test_a_model_failure_on_resume_is_a_result_not_an_exception() -> None:
    hook = Held()
    script = [tool_calls_response(tool_call("send", {"x": 2}, id="c1"))]
    checkpoint = await held_run(
        ReActAgent(ScriptedLLM(script), Counted("send").tools, hooks=[hook]), hook
    )
    result = await ReActAgent(ScriptedLLM([]), Counted("send").tools).resume(checkpoint)
    assert result.status == "error" and "the model failed" in (result.error or "")
    assert [s.observation for s in result.steps] == ["send 2"]


async def test_resume_takes_only_a_checkpoint() -> None:
    with pytest.raises(TypeError, match=r"RunCheckpoint\.from_json"):
        await ReActAgent(ScriptedLLM([])).resume({"version": 1})  # type: ignore[arg-type]


async def test_plan_mode_steps_give_their_hooks_no_checkpoint() -> None:
    seen: list[object] = []

    class Looks:
        async def pre_tool_use(self, call: ToolUse) -> HookResult:
            seen.append(call.checkpoint)
            return HookResult()

    script = DagScript(
        plans=[plan_of(("a", "A", []), ("b", "B", []))],
        steps={t: StepPlay([("lookup", {"x": 1})], f"found {t}") for t in ("A", "B")},
    )
    result = await DAGAgent(script.llm(), [make_tool("lookup")], hooks=[Looks()]).run("goal")
    assert result.status == "completed"
    assert seen == [None, None]


async def test_only_pre_hooks_get_a_checkpoint() -> None:
    seen: list[tuple[str, bool]] = []

    class Both:
        async def pre_tool_use(self, call: ToolUse) -> HookResult:
            seen.append(("pre", call.checkpoint is not None))
            return HookResult()

        async def post_tool_use(self, call: ToolUse, observation: str) -> HookResult:
            seen.append(("post", call.checkpoint is not None))
            return HookResult()

    llm = ScriptedLLM([tool_calls_response(tool_call("send", {"x": 1}, id="c1")), "done"])
    await ReActAgent(llm, Counted("send").tools, hooks=[Both()]).run("go")
    assert seen == [("pre", True), ("post", False)]
