"""stream_answer: the answer phase reads the full trace, streams, falls back, continues.

Synthesis writes every answer with ``synthesis="always"`` (and, with ``"auto"``, where
the run has no streamed final reply: JSON mode, plan mode, a run cut short); these
tests run it the first way.
"""

from __future__ import annotations

import json

import pytest

from bot.engine import LLMResponse, LLMTransientError, ReActAgent, Usage
from bot.engine.testing import BrokenStream, ScriptedLLM, tool_call, tool_calls_response

from engine.support import make_tool


async def collect(agent, query, result, **kwargs) -> list[str]:
    return [delta async for delta in agent.stream_answer(query, result, **kwargs)]


async def test_the_answer_streams_from_the_trace(echo):
    llm = ScriptedLLM(
        [tool_calls_response(tool_call("echo", {"x": 7}, id="c1")), "x is seven"],
        stream_script=[LLMResponse(content="**x** is 7.", usage=Usage(50, 5, 55))],
    )
    agent = ReActAgent(llm, [echo], synthesis="always")
    result = await agent.run("what is x?")
    deltas = await collect(agent, "what is x?", result)

    assert len(deltas) > 1
    assert "".join(deltas) == "**x** is 7."
    assert result.synthesis_usage == Usage(50, 5, 55)
    assert result.total_usage.total_tokens == result.usage.total_tokens + 55
    request = llm.calls[-1]
    assert request.stream and request.tools is None
    system, user = request.messages
    assert system.role == "system"
    assert "language of the question" in system.content
    assert "meta-commentary" in system.content
    assert user.content.startswith("Question: what is x?")
    assert 'Tool call: echo({"x": 7})' in user.content
    assert "Tool result (echo): echo 7" in user.content
    assert "Draft answer: x is seven" in user.content


async def test_tool_results_are_cut_to_2000_characters():
    async def big(x: int) -> str:
        return "a" * 1990 + "b" * 20 + "TAIL"

    llm = ScriptedLLM(
        [tool_calls_response(tool_call("big", {"x": 1})), "done"], stream_script=["ok"]
    )
    agent = ReActAgent(llm, [make_tool("big", big)], synthesis="always")
    result = await agent.run("go")
    await collect(agent, "go", result)
    trace = llm.calls[-1].messages[1].content
    assert "a" * 1990 + "b" * 10 + " … (cut)" in trace
    assert "TAIL" not in trace


async def test_json_mode_observations_are_in_the_trace(echo):
    llm = ScriptedLLM(
        [
            json.dumps(
                {"type": "tool_call", "tool": "echo", "arguments": {"x": 4}, "reasoning": "r"}
            ),
            json.dumps({"type": "final_answer", "answer": "four"}),
        ],
        stream_script=["Four."],
        abilities={"tool_call": False},
    )
    agent = ReActAgent(llm, [echo], synthesis="always")
    result = await agent.run("x?")
    await collect(agent, "x?", result)
    trace = llm.calls[-1].messages[1].content
    assert 'Tool call: echo({"x": 4})' in trace
    assert "Tool result (echo): echo 4" in trace
    assert "Draft answer: four" in trace
    assert '"type"' not in trace  # the raw JSON protocol is not shown


async def test_synthesis_reads_the_uncompacted_trace():
    async def bulky(x: int) -> str:
        return f"RESULT-{x} " + "data " * 400

    class SummarisingLLM(ScriptedLLM):
        async def chat(self, messages, **kwargs):
            if "You compress the working history" in messages[0].content:
                return LLMResponse(content="summary of early work")
            return await super().chat(messages, **kwargs)

    script = [tool_calls_response(tool_call("bulky", {"x": i}, id=f"c{i}")) for i in range(8)]
    script += ["draft", "final"]
    llm = SummarisingLLM(script, stream_script=["done"])
    agent = ReActAgent(llm, [make_tool("bulky", bulky)], synthesis="always", context_budget=2000)
    events = []
    result = await agent.run("go", on_event=events.append)
    assert result.compactions >= 1
    assert any(e.type == "compact" for e in events)
    # The model's working context lost the early results...
    later_context = "".join(m.content for m in llm.calls[-2].messages)
    assert "RESULT-0" not in later_context
    # ...but synthesis still sees every one of them.
    await collect(agent, "go", result)
    trace = llm.calls[-1].messages[1].content
    assert all(f"RESULT-{i}" in trace for i in range(8))


async def test_failed_synthesis_falls_back_to_the_run_answer(echo):
    llm = ScriptedLLM(["the run's answer"], stream_script=[LLMTransientError("503")])
    agent = ReActAgent(llm, [echo], synthesis="always")
    result = await agent.run("go")
    assert await collect(agent, "go", result) == ["the run's answer"]

    llm = ScriptedLLM(["the run's answer"], stream_script=[LLMTransientError("503")])
    agent = ReActAgent(llm, [echo], synthesis="always")
    result = await agent.run("go")
    with pytest.raises(LLMTransientError):
        await collect(agent, "go", result, fallback=False)


async def test_a_broken_stream_continues_without_repeating_text(echo):
    first = "The capital of France is Paris, a city"
    llm = ScriptedLLM(
        ["Paris"],
        stream_script=[BrokenStream(first, fail_after=5), " on the Seine."],
    )
    agent = ReActAgent(llm, [echo], synthesis="always")
    result = await agent.run("capital?")
    text = "".join(await collect(agent, "capital?", result))
    delivered = first[:20]  # 5 pieces of 4 characters
    assert text == delivered + " on the Seine."
    continuation = llm.calls[-1].messages
    assert continuation[-2].role == "assistant" and continuation[-2].content == delivered
    assert "Continue exactly where it stopped" in continuation[-1].content


async def test_a_model_without_streaming_answers_in_one_piece(echo):
    llm = ScriptedLLM(["run answer", "Whole answer."], abilities={"streaming": False})
    agent = ReActAgent(llm, [echo], synthesis="always")
    result = await agent.run("go")
    assert await collect(agent, "go", result) == ["Whole answer."]


async def test_answer_events_are_emitted(echo):
    llm = ScriptedLLM(["x"], stream_script=["Streamed answer text"])
    agent = ReActAgent(llm, [echo], synthesis="always")
    result = await agent.run("go")
    events = []
    deltas = await collect(agent, "go", result, on_event=events.append)
    assert [e.type for e in events] == ["answer"] * len(deltas)
    assert "".join(e.delta for e in events) == "Streamed answer text"


async def test_history_and_early_endings_are_explained(echo):
    from bot.engine import Message

    llm = ScriptedLLM(
        [tool_calls_response(tool_call("echo", {"x": i}, id=f"c{i}")) for i in range(3)],
        stream_script=["partial"],
    )
    agent = ReActAgent(llm, [echo], synthesis="always", max_iterations=2)
    history = [Message.user("my name is Ada"), Message.assistant("Hi Ada")]
    result = await agent.run("go", history=history)
    await collect(agent, "go", result)
    prompt = llm.calls[-1].messages[1].content
    assert "Earlier conversation:\nuser: my name is Ada\nassistant: Hi Ada" in prompt
    assert "the work ended early (max_iterations" in prompt
