"""PreToolUse / PostToolUse hooks: block, rewrite, observe, fail closed, wait."""

from __future__ import annotations

import asyncio

import pytest

from bot.engine import HookChain, HookResult, ReActAgent, ToolUse, current_run
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response

from engine.support import RecordingHook, make_tool


def one_call_then(answer: str = "done", *, x: int = 1, call_id: str = "c1", content: str = ""):
    return ScriptedLLM(
        [tool_calls_response(tool_call("echo", {"x": x}, id=call_id), content=content), answer]
    )


class Blocker:
    async def pre_tool_use(self, call: ToolUse) -> HookResult:
        return HookResult(allow=False, reason="writes are frozen by an admin")


async def test_a_blocking_hook_stops_the_tool_and_the_model_sees_why():
    ran = []

    async def handler(x: int) -> str:
        ran.append(x)
        return "ran"

    llm = one_call_then()
    result = await ReActAgent(llm, [make_tool("echo", handler)], hooks=[Blocker()]).run("go")
    assert ran == []
    step = result.steps[0]
    assert step.status == "blocked"
    assert "writes are frozen by an admin" in step.observation
    assert llm.calls[1].messages[-1].content == step.observation


async def test_rewritten_arguments_are_validated_and_used():
    received = []

    async def handler(x: int) -> str:
        received.append(x)
        return f"got {x}"

    class Doubler:
        async def pre_tool_use(self, call):
            return HookResult(arguments={"x": call.arguments["x"] * 2})

    log: list[str] = []
    after = RecordingHook("after", log)
    agent = ReActAgent(
        llm := one_call_then(x=5), [make_tool("echo", handler)], hooks=[Doubler(), after]
    )
    result = await agent.run("go")
    assert received == [10]
    assert after.calls[0].arguments == {"x": 10}  # later hooks see the rewrite
    assert dict(result.steps[0].arguments) == {"x": 10}
    assert llm.calls[1].messages[-1].content == "got 10"


async def test_rewriting_into_invalid_arguments_blocks():
    class Breaker:
        async def pre_tool_use(self, call):
            return HookResult(arguments={"x": "not a number"})

    result = await ReActAgent(one_call_then(), [make_tool("echo")], hooks=[Breaker()]).run("go")
    assert result.steps[0].status == "blocked"
    assert "invalid" in result.steps[0].observation


async def test_hooks_run_in_order_around_the_tool():
    log: list[str] = []

    async def handler(x: int) -> str:
        log.append("tool")
        return "ok"

    hooks = [RecordingHook("first", log), RecordingHook("second", log)]
    await ReActAgent(one_call_then(), [make_tool("echo", handler)], hooks=hooks).run("go")
    assert log == [
        "first:pre:echo",
        "second:pre:echo",
        "tool",
        "first:post:echo",
        "second:post:echo",
    ]


async def test_one_hook_chain_serves_agent_after_agent():
    log: list[str] = []

    async def handler(x: int) -> str:
        log.append(f"tool:{x}")
        return "ok"

    echo = make_tool("echo", handler)
    chain = HookChain([RecordingHook("first", log), RecordingHook("second", log)])
    for x in (1, 2):
        await ReActAgent(one_call_then(x=x), [echo], hooks=chain).run("go")
    gate = HookChain([Blocker()])
    for x in (3, 4):
        result = await ReActAgent(one_call_then(x=x), [echo], hooks=gate).run("go")
        assert result.steps[0].status == "blocked"
    each = ("first:pre:echo", "second:pre:echo", "tool:{}", "first:post:echo", "second:post:echo")
    assert log == [entry.format(x) for x in (1, 2) for entry in each]


async def test_a_block_stops_later_hooks():
    log: list[str] = []
    hooks = [Blocker(), RecordingHook("later", log)]
    await ReActAgent(one_call_then(), [make_tool("echo")], hooks=hooks).run("go")
    assert log == []


@pytest.mark.parametrize("failure", ["raise", "none", "wrong type"])
async def test_a_broken_pre_hook_fails_closed(failure, caplog):
    ran = []

    async def handler(x: int) -> str:
        ran.append(x)
        return "ran"

    class Broken:
        async def pre_tool_use(self, call):
            if failure == "raise":
                raise KeyError("policy table missing")
            return None if failure == "none" else {"allow": True}

    result = await ReActAgent(one_call_then(), [make_tool("echo", handler)], hooks=[Broken()]).run(
        "go"
    )
    assert ran == []
    assert result.steps[0].status == "blocked"
    assert "Broken" in result.steps[0].observation
    assert result.status == "completed"


async def test_post_hook_rewrites_the_observation():
    class Redactor:
        async def post_tool_use(self, call, observation):
            return HookResult(observation=observation.replace("1", "[redacted]"))

    llm = one_call_then()
    result = await ReActAgent(llm, [make_tool("echo")], hooks=[Redactor()]).run("go")
    assert result.steps[0].observation == "echo [redacted]"
    assert llm.calls[1].messages[-1].content == "echo [redacted]"


@pytest.mark.parametrize("failure", ["raise", "deny"])
async def test_a_failing_post_hook_withholds_the_observation(failure):
    class Broken:
        async def post_tool_use(self, call, observation):
            if failure == "raise":
                raise RuntimeError("audit store down")
            return HookResult(allow=False, reason="contains secrets")

    llm = one_call_then()
    result = await ReActAgent(llm, [make_tool("echo")], hooks=[Broken()]).run("go")
    observation = result.steps[0].observation
    assert observation.startswith("[observation withheld")
    assert "echo 1" not in llm.calls[1].messages[-1].content


async def test_post_hooks_see_tool_failures():
    seen = []

    async def broken(x: int) -> str:
        raise RuntimeError("boom")

    class Audit:
        async def post_tool_use(self, call, observation):
            seen.append((call.name, call.error, observation))
            return HookResult()

    await ReActAgent(one_call_then(), [make_tool("echo", broken)], hooks=[Audit()]).run("go")
    assert seen[0][0] == "echo"
    assert "RuntimeError" in seen[0][1]
    assert seen[0][2].startswith("Error:")


async def test_the_hook_sees_the_call_and_the_run_context():
    log: list[str] = []
    hook = RecordingHook("h", log)
    llm = one_call_then(x=4, call_id="call-9", content="I will echo 4 because you asked")
    agent = ReActAgent(llm, [make_tool("echo", side_effect="write")], hooks=[hook])
    result = await agent.run("please echo", deps={"chat": "oc_1"}, run_id="run-42")
    call = hook.calls[0]
    assert (call.name, dict(call.arguments), call.call_id) == ("echo", {"x": 4}, "call-9")
    assert call.side_effect == "write"
    assert call.tool.name == "echo"
    assert call.iteration == 1
    assert call.reason == "I will echo 4 because you asked"
    assert (call.run.run_id, call.run.query, call.run.deps) == (
        "run-42",
        "please echo",
        {"chat": "oc_1"},
    )
    assert result.run_id == "run-42"


async def test_a_hook_may_wait_long_without_blocking_the_event_loop():
    decision = asyncio.Event()
    waiting = asyncio.Event()

    class Approval:
        async def pre_tool_use(self, call):
            waiting.set()
            await decision.wait()
            return HookResult()

    run = asyncio.create_task(
        ReActAgent(one_call_then(), [make_tool("echo")], hooks=[Approval()]).run("go")
    )
    await waiting.wait()
    # The loop is free while the hook waits: other work proceeds.
    ticks = 0
    for _ in range(5):
        await asyncio.sleep(0)
        ticks += 1
    assert ticks == 5 and not run.done()
    decision.set()
    result = await run
    assert result.steps[0].ok


async def test_every_parallel_call_goes_through_the_hooks():
    log: list[str] = []
    hook = RecordingHook("h", log)
    calls = [tool_call("echo", {"x": i}, id=f"c{i}") for i in range(3)]
    llm = ScriptedLLM([tool_calls_response(*calls), "done", "done"])
    await ReActAgent(llm, [make_tool("echo")], hooks=[hook]).run("go")
    assert sorted(c.call_id for c in hook.calls) == ["c0", "c1", "c2"]


def test_an_object_with_no_hook_method_is_rejected():
    with pytest.raises(TypeError, match="neither pre_tool_use nor post_tool_use"):
        ReActAgent(ScriptedLLM(), [make_tool("echo")], hooks=[object()])


async def test_a_tool_reads_the_run_it_serves_and_nothing_leaks_after():
    seen = []

    async def handler(x: int) -> str:
        seen.append(current_run())
        return "here"

    agent = ReActAgent(one_call_then(), [make_tool("echo", handler)])
    result = await agent.run("where am I?", deps={"chat_id": "oc_1"}, run_id="run-7")
    assert result.status == "completed"
    assert [(run.run_id, run.deps) for run in seen] == [("run-7", {"chat_id": "oc_1"})]
    assert current_run() is None
