"""The native function-calling loop: order, parallel calls, errors, limits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bot.engine import (
    Artifact,
    LLMContextOverflow,
    LLMResponse,
    LLMTransientError,
    Message,
    ReActAgent,
    ToolCall,
    ToolError,
    ToolRegistry,
    Usage,
)
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response

from engine.support import make_tool


def calls_response(*calls: ToolCall, content: str = "") -> LLMResponse:
    return tool_calls_response(*calls, content=content, usage=Usage(100, 10, 110))


async def test_tool_then_final_answer(echo):
    llm = ScriptedLLM(
        [calls_response(tool_call("echo", {"x": 7}, id="c1")), LLMResponse(content="It is 7.")]
    )
    result = await ReActAgent(llm, [echo]).run("what is x?")

    assert result.status == "completed"
    assert result.answer == "It is 7."
    assert result.iterations == 2
    assert result.mode == "native"
    assert [(s.tool, dict(s.arguments), s.observation, s.ok) for s in result.steps] == [
        ("echo", {"x": 7}, "echo 7", True)
    ]
    assert result.steps[0].duration >= 0
    assert result.usage.prompt_tokens == 100 and result.usage.total_tokens == 110
    assert result.elapsed > 0
    roles = [(m.role, m.kind) for m in result.messages]
    assert roles == [
        ("system", "system"),
        ("user", "query"),
        ("assistant", "assistant"),
        ("tool", "observation"),
        ("assistant", "assistant"),
    ]
    assert result.messages[3].tool_call_id == "c1"
    # Native mode sends the tool schemas and no response_format.
    first = llm.calls[0]
    assert first.tools == ToolRegistry([echo]).openai_schema()
    assert first.response_format is None


async def test_history_comes_before_the_question(echo):
    llm = ScriptedLLM(["Hello again."])
    history = [Message.user("hi"), Message.assistant("hello")]
    result = await ReActAgent(llm, [echo]).run("and now?", history=history)
    sent = llm.calls[0].messages
    assert [m.content for m in sent[1:]] == ["hi", "hello", "and now?"]
    assert [m.kind for m in sent[1:3]] == ["history", "history"]
    assert sent[-1].pinned
    assert result.answer == "Hello again."


async def test_parallel_calls_keep_call_order_and_run_concurrently():
    running = 0
    peak = 0
    release = asyncio.Event()

    async def slow(x: int) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 3:
            release.set()
        await release.wait()
        # Finish in reverse order of the calls.
        await asyncio.sleep(0.001 * (3 - x))
        running -= 1
        return f"slow {x}"

    tool = make_tool("slow", slow)
    calls = [tool_call("slow", {"x": i}, id=f"c{i}") for i in range(3)]
    llm = ScriptedLLM([calls_response(*calls), "done", "done"])  # + checklist
    result = await ReActAgent(llm, [tool]).run("go")

    assert peak == 3
    messages = result.messages
    assistant_index = next(i for i, m in enumerate(messages) if m.tool_calls)
    following = messages[assistant_index + 1 : assistant_index + 4]
    assert [(m.role, m.tool_call_id, m.content) for m in following] == [
        ("tool", "c0", "slow 0"),
        ("tool", "c1", "slow 1"),
        ("tool", "c2", "slow 2"),
    ]
    assert [s.call_id for s in result.steps] == ["c0", "c1", "c2"]


async def test_one_failing_parallel_call_does_not_sink_the_others():
    async def maybe(x: int) -> str:
        if x == 1:
            raise RuntimeError("backend exploded")
        return f"fine {x}"

    tool = make_tool("maybe", maybe)
    calls = [tool_call("maybe", {"x": i}, id=f"c{i}") for i in range(3)]
    llm = ScriptedLLM([calls_response(*calls), "done", "done"])  # + checklist
    result = await ReActAgent(llm, [tool]).run("go")

    assert [s.status for s in result.steps] == ["ok", "error", "ok"]
    assert "RuntimeError" in result.steps[1].observation
    assert "backend exploded" in result.steps[1].observation
    assert result.status == "completed"


async def test_parallel_calls_respect_the_concurrency_cap():
    running = 0
    peak = 0

    async def busy(x: int) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.005)
        running -= 1
        return "ok"

    tool = make_tool("busy", busy)
    calls = [tool_call("busy", {"x": i}, id=f"c{i}") for i in range(6)]
    llm = ScriptedLLM([calls_response(*calls), "done", "done"])  # + checklist
    result = await ReActAgent(llm, [tool], max_parallel_tools=2).run("go")
    assert peak == 2
    assert len(result.steps) == 6 and all(s.ok for s in result.steps)


async def test_unknown_tool_is_an_error_observation(echo):
    llm = ScriptedLLM([calls_response(tool_call("nope", {}, id="c1")), "sorry"])
    result = await ReActAgent(llm, [echo]).run("go")
    step = result.steps[0]
    assert step.status == "error"
    assert "unknown tool 'nope'" in step.observation
    assert "echo" in step.observation  # the model is told what exists
    assert llm.calls[1].messages[-1].content == step.observation
    assert result.status == "completed"


async def test_tool_exception_and_tool_error_become_observations():
    async def broken(x: int) -> str:
        raise ValueError("bad things")

    async def refuses(x: int) -> str:
        raise ToolError("HTTP 404 from backend: no such record")

    tools = [make_tool("broken", broken), make_tool("refuses", refuses)]
    llm = ScriptedLLM(
        [
            calls_response(
                tool_call("broken", {"x": 1}, id="a"), tool_call("refuses", {"x": 1}, id="b")
            ),
            "done",
        ]
    )
    result = await ReActAgent(llm, tools).run("go")
    assert result.steps[0].observation.startswith("Error: broken failed: ValueError: bad things")
    assert result.steps[1].observation == "Error: HTTP 404 from backend: no such record"
    assert all(s.status == "error" for s in result.steps)


async def test_tool_timeout_per_tool_and_default():
    async def hang(x: int) -> str:
        await asyncio.sleep(30)
        return "never"

    quick = make_tool("quick_timeout", hang, timeout=0.05)
    default = make_tool("default_timeout", hang)
    llm = ScriptedLLM(
        [
            calls_response(
                tool_call("quick_timeout", {"x": 1}, id="a"),
                tool_call("default_timeout", {"x": 1}, id="b"),
            ),
            "done",
        ]
    )
    result = await ReActAgent(llm, [quick, default], tool_timeout=0.1).run("go")
    assert result.steps[0].observation == "Error: quick_timeout timed out after 0.05 s."
    assert result.steps[1].observation == "Error: default_timeout timed out after 0.1 s."
    assert result.status == "completed"


async def test_a_timeout_error_raised_by_the_tool_is_not_mistaken_for_ours():
    async def own_timeout(x: int) -> str:
        raise TimeoutError("upstream took too long")

    llm = ScriptedLLM([calls_response(tool_call("t", {"x": 1})), "done"])
    result = await ReActAgent(llm, [make_tool("t", own_timeout)]).run("go")
    assert "TimeoutError" in result.steps[0].observation
    assert "timed out after" not in result.steps[0].observation


async def test_invalid_arguments_never_reach_the_handler():
    ran = []

    async def handler(x: int) -> str:
        ran.append(x)
        return "ran"

    tool = make_tool("strict", handler)
    bad_type = ToolCall("a", "strict", {"x": "seven"}, '{"x": "seven"}')
    not_json = ToolCall("b", "strict", {}, "{x: 7", parse_error="Expecting property name")
    llm = ScriptedLLM([calls_response(bad_type, not_json), "done"])
    result = await ReActAgent(llm, [tool]).run("go")
    assert ran == []
    assert "invalid arguments for strict" in result.steps[0].observation
    assert "not a JSON object" in result.steps[1].observation
    assert [s.status for s in result.steps] == ["error", "error"]


async def test_max_iterations_ends_with_a_summary_not_an_exception(echo):
    script = [calls_response(tool_call("echo", {"x": i}, id=f"c{i}")) for i in range(10)]
    llm = ScriptedLLM(script)
    result = await ReActAgent(llm, [echo], max_iterations=3).run("loop forever")
    assert result.status == "max_iterations"
    assert result.iterations == 3
    assert len(llm.calls) == 3
    assert "step limit" in result.answer
    assert "echo 2" in result.answer


@pytest.mark.parametrize(
    "failure", [LLMTransientError("HTTP 503 after 4 attempts"), RuntimeError("provider bug")]
)
async def test_a_failing_model_gives_an_error_result(echo, failure):
    llm = ScriptedLLM([calls_response(tool_call("echo", {"x": 1})), failure])
    result = await ReActAgent(llm, [echo]).run("go")
    assert result.status == "error"
    assert type(failure).__name__ in (result.error or "")
    assert "could not finish" in result.answer
    assert "echo 1" in result.answer  # what was found is not lost


async def test_reasoning_content_is_the_fallback_answer(echo):
    llm = ScriptedLLM([LLMResponse(content="", reasoning_content="The answer is 42.")])
    result = await ReActAgent(llm, [echo]).run("go")
    assert result.answer == "The answer is 42."


async def test_reasoning_content_is_kept_on_tool_turns(echo):
    llm = ScriptedLLM(
        [
            LLMResponse(tool_calls=(tool_call("echo", {"x": 1}),), reasoning_content="think"),
            "done",
        ]
    )
    result = await ReActAgent(llm, [echo]).run("go")
    assert result.messages[2].reasoning_content == "think"


async def test_empty_replies_are_nudged_then_fail_cleanly(echo):
    llm = ScriptedLLM(["", "", "", ""])
    result = await ReActAgent(llm, [echo]).run("go")
    assert result.status == "error"
    assert "empty" in (result.error or "")
    assert result.iterations == 3

    llm = ScriptedLLM(["", "Here you go."])
    result = await ReActAgent(llm, [echo]).run("go")
    assert result.answer == "Here you go."
    assert llm.calls[1].messages[-1].kind == "reformat"


async def test_artifacts_are_summarised_in_the_observation():
    report = Artifact("report.md", "# Quarterly\n" + "x" * 5000)

    async def make_report(x: int) -> Any:
        return report

    async def make_page(x: int) -> str:
        return "<!DOCTYPE html><html><body>" + "y" * 3000 + "</body></html>"

    tools = [make_tool("report", make_report), make_tool("page", make_page)]
    llm = ScriptedLLM(
        [calls_response(tool_call("report", {"x": 1}), tool_call("page", {"x": 1})), "done"]
    )
    result = await ReActAgent(llm, tools).run("go")
    first, second = result.steps
    assert first.observation.startswith("[Artifact generated: report.md]")
    assert first.artifacts == (report,)
    assert second.observation.startswith("[Artifact generated: page.html]")
    assert second.artifacts[0].media_type == "text/html"
    assert "yyyy" not in second.observation


async def test_huge_observations_are_capped():
    async def flood(x: int) -> str:
        return "z" * 50_000

    llm = ScriptedLLM([calls_response(tool_call("flood", {"x": 1})), "done"])
    result = await ReActAgent(llm, [make_tool("flood", flood)], max_observation_chars=1000).run(
        "go"
    )
    assert len(result.steps[0].observation) < 1100
    assert "cut at 1000 characters" in result.steps[0].observation


async def test_context_overflow_from_the_model_compacts_and_retries(echo):
    script = [calls_response(tool_call("echo", {"x": i}, id=f"c{i}")) for i in range(4)]
    script += [LLMContextOverflow("maximum context length exceeded"), "summary", "draft", "done"]
    llm = ScriptedLLM(script)
    events = []
    result = await ReActAgent(llm, [echo]).run("go", on_event=events.append)
    assert result.answer == "done"
    assert result.compactions == 1
    assert any(e.type == "compact" for e in events)
    last_messages = llm.calls[-1].messages
    assert any(m.kind == "summary" for m in last_messages)


async def test_non_string_tool_results_are_rendered_as_json():
    async def data(x: int) -> Any:
        return {"rows": [1, 2], "name": "数据"}

    llm = ScriptedLLM([calls_response(tool_call("data", {"x": 1})), "done"])
    result = await ReActAgent(llm, [make_tool("data", data)]).run("go")
    assert result.steps[0].observation == '{"rows": [1, 2], "name": "数据"}'


async def test_duplicate_call_ids_in_one_turn_get_unique_ids(echo):
    calls = [ToolCall("call_0", "echo", {"x": i}, f'{{"x": {i}}}') for i in range(2)]
    llm = ScriptedLLM([calls_response(*calls), "done"])
    result = await ReActAgent(llm, [echo]).run("go")
    assistant = result.messages[2]
    ids = [c.id for c in assistant.tool_calls]
    assert len(set(ids)) == 2
    assert [m.tool_call_id for m in result.messages[3:5]] == ids
    assert [m.content for m in result.messages[3:5]] == ["echo 0", "echo 1"]


async def test_a_summary_call_that_raises_anything_still_compacts(echo):
    class FlakySummariser(ScriptedLLM):
        async def chat(self, messages, **kwargs):
            if "You compress the working history" in messages[0].content:
                raise RuntimeError("provider bug")
            return await super().chat(messages, **kwargs)

    async def bulky(x: int) -> str:
        return "data " * 600

    script = [calls_response(tool_call("bulky", {"x": i}, id=f"c{i}")) for i in range(6)]
    llm = FlakySummariser([*script, "draft", "done"])
    result = await ReActAgent(llm, [make_tool("bulky", bulky)], context_budget=2000).run("go")
    assert result.status == "completed"
    assert result.compactions >= 1
