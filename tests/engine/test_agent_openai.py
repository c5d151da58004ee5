"""The whole engine over HTTP: ReActAgent + OpenAICompatibleLLM against the fake server."""

from __future__ import annotations

import json

from bot.engine import OpenAICompatibleLLM, ReActAgent, structured_llm_call, tool_from_function
from bot.engine.messages import Message
from bot.engine.selection import SELECTION_MAX_TOKENS

from engine.support import make_tool

USAGE = {"prompt_tokens": 120, "completion_tokens": 12, "total_tokens": 132}


def provider(server, **abilities) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM(
        base_url=server.base_url,
        api_key="sk-test-not-a-secret",
        model="fake-model",
        abilities=abilities or None,
        backoff_base=0.001,
        backoff_max=0.01,
    )


async def test_native_run_streams_its_final_reply_as_the_answer_over_http(fake_openai):
    fake_openai.push_tool_calls(
        [("call_a", "weather", {"x": 1}), ("call_b", "weather", {"x": 2})], usage=USAGE
    )
    fake_openai.push_text("Paris and Rome are **sunny** today.", usage=USAGE)

    async def weather(x: int) -> str:
        return f"city {x}: sunny"

    llm = provider(fake_openai)
    agent = ReActAgent(llm, [make_tool("weather", weather)])
    events = []
    result = await agent.run("Weather in Paris and Rome?", on_event=events.append)
    deltas = [e.delta for e in events if e.type == "answer"]
    answer = [d async for d in agent.stream_answer("Weather in Paris and Rome?", result)]
    await llm.aclose()

    assert result.status == "completed"
    assert [s.observation for s in result.steps] == ["city 1: sunny", "city 2: sunny"]
    assert result.usage.total_tokens == 264
    # The final reply went out as it streamed in, in pieces, and it is the answer.
    assert "".join(deltas) == "Paris and Rome are **sunny** today."
    assert len(deltas) > 1
    assert result.answer_streamed
    assert "".join(answer) == result.answer == "Paris and Rome are **sunny** today."
    assert [e.type for e in events].count("step") == 4
    assert "answer_withdrawn" not in [e.type for e in events]

    # Two requests, both streamed with the tools: no synthesis call.
    first, second = (r.body for r in fake_openai.requests)
    assert first["stream"] is True and second["stream"] is True
    assert first["model"] == "fake-model"
    assert [t["function"]["name"] for t in first["tools"]] == ["weather"]
    # The second request replays the assistant tool calls and both results in order.
    wire = second["messages"]
    assert wire[-3]["role"] == "assistant"
    assert [c["id"] for c in wire[-3]["tool_calls"]] == ["call_a", "call_b"]
    assert [(m["role"], m["tool_call_id"], m["content"]) for m in wire[-2:]] == [
        ("tool", "call_a", "city 1: sunny"),
        ("tool", "call_b", "city 2: sunny"),
    ]
    assert [t["function"]["name"] for t in second["tools"]] == ["weather"]


async def test_synthesis_always_is_the_reference_design_over_http(fake_openai):
    fake_openai.push_tool_calls(
        [("call_a", "weather", {"x": 1}), ("call_b", "weather", {"x": 2})], usage=USAGE
    )
    fake_openai.push_text("Both are sunny.", usage=USAGE)
    fake_openai.push_text("Paris and Rome are **sunny** today.", usage=USAGE)

    async def weather(x: int) -> str:
        return f"city {x}: sunny"

    llm = provider(fake_openai)
    agent = ReActAgent(llm, [make_tool("weather", weather)], synthesis="always")
    events = []
    result = await agent.run("Weather in Paris and Rome?", on_event=events.append)
    deltas = [d async for d in agent.stream_answer("Weather in Paris and Rome?", result)]
    await llm.aclose()

    assert result.status == "completed"
    assert result.usage.total_tokens == 264
    assert not result.answer_streamed
    assert "answer" not in [e.type for e in events]  # the loop's draft is not shown
    assert "".join(deltas) == "Paris and Rome are **sunny** today."
    assert len(deltas) > 1

    first, second, synthesis = (r.body for r in fake_openai.requests)
    assert "stream" not in first and "stream" not in second
    assert synthesis["stream"] is True
    assert "tools" not in synthesis


async def test_json_mode_over_http(fake_openai):
    fake_openai.push_text(
        json.dumps({"type": "tool_call", "tool": "weather", "arguments": {"x": 3}})
    )
    fake_openai.push_text(json.dumps({"type": "final_answer", "answer": "sunny"}))
    llm = provider(fake_openai, tool_call=False)
    result = await ReActAgent(llm, [make_tool("weather")]).run("weather?")
    await llm.aclose()
    assert result.mode == "json"
    assert result.answer == "sunny"
    first = fake_openai.requests[0].body
    assert "tools" not in first
    assert first["response_format"] == {"type": "json_object"}


async def test_tool_selection_over_http(fake_openai):
    tools = [make_tool(f"tool_{i}", description=f"Does thing number {i}.") for i in range(15)]
    fake_openai.push_tool_calls([("sel", "select_tools", {"tools": ["tool_3", "tool_9"]})])
    fake_openai.push_text("nothing needed")
    llm = provider(fake_openai)
    await ReActAgent(llm, tools).run("do thing 3 and 9")
    await llm.aclose()
    selection, loop = (r.body for r in fake_openai.requests)
    function = selection["tools"][0]["function"]
    assert function["name"] == "select_tools"
    assert function["parameters"]["properties"]["tools"]["type"] == "array"
    assert selection["tool_choice"] == {"type": "function", "function": {"name": "select_tools"}}
    assert [t["function"]["name"] for t in loop["tools"]] == ["tool_3", "tool_9"]


async def test_retries_are_invisible_to_the_run(fake_openai):
    fake_openai.push_error(429, times=2)
    fake_openai.push_error(503)
    fake_openai.push_text("fine after all")
    llm = provider(fake_openai)
    result = await ReActAgent(llm, [make_tool("weather")]).run("hi")
    await llm.aclose()
    assert result.answer == "fine after all"
    assert len(fake_openai.requests) == 4


async def test_a_model_that_keeps_failing_ends_the_run_cleanly(fake_openai):
    fake_openai.push_error(500, times=10)
    llm = provider(fake_openai)
    result = await ReActAgent(llm, [make_tool("weather")]).run("hi")
    await llm.aclose()
    assert result.status == "error"
    assert "LLMTransientError" in (result.error or "")
    assert "sk-test-not-a-secret" not in (result.error or "")


async def test_structured_call_over_http(fake_openai):
    fake_openai.push_tool_calls([("c", "extract", {"city": "Paris"})])
    llm = provider(fake_openai)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    result = await structured_llm_call(
        llm, [Message.user("I live in Paris")], schema, function_name="extract"
    )
    await llm.aclose()
    assert (result.value, result.level) == ({"city": "Paris"}, "native")


async def test_a_text_level_selection_reply_is_bounded_the_native_one_is_not(fake_openai):
    """A small model held to a JSON grammar can write whitespace for minutes: selection's
    JSON-mode and plain-text replies are capped; the native call (whose reasoning models
    take only their own limit) is not."""
    tools = [tool_from_function(_lookup, name=f"lookup_{i}", side_effect="read") for i in range(13)]
    fake_openai.push_text('{"tools": ["lookup_1"]}')  # JSON mode: the selection
    fake_openai.push_text("done")
    llm = provider(fake_openai, tool_call=False, json_mode=True)
    await ReActAgent(llm, tools).run("look one up")
    selection = fake_openai.requests[0].body
    assert selection["response_format"] == {"type": "json_object"}
    assert selection["max_tokens"] == SELECTION_MAX_TOKENS

    fake_openai.requests.clear()
    fake_openai.push_tool_calls([("s", "select_tools", {"tools": []})])
    fake_openai.push_text("done")
    await ReActAgent(provider(fake_openai), tools, synthesis="always").run("look one up")
    native = fake_openai.requests[0].body
    assert native["tool_choice"]["function"]["name"] == "select_tools"
    assert "max_tokens" not in native


async def _lookup(key: str) -> str:
    """Look a key up."""
    return key
