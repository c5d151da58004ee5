"""JSON mode: chosen automatically, its wire convention, and bounded reformat retries."""

from __future__ import annotations

import json

import pytest

from bot.engine import LLMResponse, ReActAgent
from bot.engine.testing import ScriptedLLM

NO_NATIVE = {"tool_call": False}


def tool_call_json(tool: str, arguments: dict, **extra: object) -> str:
    return json.dumps({"type": "tool_call", "tool": tool, "arguments": arguments, **extra})


def final_json(answer: str) -> str:
    return json.dumps({"type": "final_answer", "answer": answer})


@pytest.mark.parametrize(
    ("abilities", "use_native", "expected"),
    [
        (None, True, "native"),
        (NO_NATIVE, True, "json"),
        (None, False, "json"),
        ({"tool_call": False, "json_mode": False}, True, "json"),
    ],
)
async def test_loop_mode_is_chosen_from_abilities(echo, abilities, use_native, expected):
    llm = ScriptedLLM(
        ["plain answer"] if expected == "native" else [final_json("ok")], abilities=abilities
    )
    agent = ReActAgent(llm, [echo], use_native_tools=use_native)
    assert agent.mode == expected
    result = await agent.run("hi")
    assert result.mode == expected
    assert result.status == "completed"


async def test_json_mode_wire_convention(echo):
    llm = ScriptedLLM(
        [tool_call_json("echo", {"x": 3}, reasoning="need x"), final_json("x is 3")],
        abilities=NO_NATIVE,
    )
    result = await ReActAgent(llm, [echo]).run("what is x?")

    assert result.answer == "x is 3"
    assert [(s.tool, dict(s.arguments), s.observation) for s in result.steps] == [
        ("echo", {"x": 3}, "echo 3")
    ]
    first = llm.calls[0]
    # No native tools on the wire; the tools and the reply format are in the system prompt.
    assert first.tools is None
    assert first.response_format == {"type": "json_object"}
    system = first.messages[0].content
    assert '"type": "tool_call"' in system and '"type": "final_answer"' in system
    assert "### echo" in system and '"x":{"type":"integer"}' in system
    # The observation comes back as a user message naming the tool.
    second = llm.calls[1].messages
    assert second[-2].role == "assistant" and json.loads(second[-2].content)["tool"] == "echo"
    assert second[-1].role == "user"
    assert second[-1].content == "Observation from echo:\necho 3"


async def test_json_mode_without_json_ability_sends_no_response_format(echo):
    llm = ScriptedLLM([final_json("ok")], abilities={"tool_call": False, "json_mode": False})
    await ReActAgent(llm, [echo]).run("hi")
    assert llm.calls[0].response_format is None


async def test_json_in_prose_and_fences_is_accepted(echo):
    llm = ScriptedLLM(
        [
            "Sure! Let me check.\n```json\n" + tool_call_json("echo", {"x": 1}) + "\n```",
            "Done: " + final_json("one"),
        ],
        abilities=NO_NATIVE,
    )
    result = await ReActAgent(llm, [echo]).run("hi")
    assert result.answer == "one"
    assert result.steps[0].observation == "echo 1"


async def test_reformat_is_requested_and_counts_toward_iterations(echo):
    llm = ScriptedLLM(["I think x is 3", final_json("x is 3")], abilities=NO_NATIVE)
    result = await ReActAgent(llm, [echo]).run("hi")
    assert result.answer == "x is 3"
    assert result.iterations == 2
    reformat = llm.calls[1].messages[-1]
    assert reformat.kind == "reformat" and reformat.role == "user"
    # The reformat prompt accepts either form.
    assert "tool_call" in reformat.content and "final_answer" in reformat.content


async def test_reformat_retries_are_bounded_and_prose_becomes_the_answer(echo):
    llm = ScriptedLLM(["not json", "still not", "The answer is 3."], abilities=NO_NATIVE)
    result = await ReActAgent(llm, [echo]).run("hi")
    assert len(llm.calls) == 3
    assert result.status == "completed"
    assert result.answer == "The answer is 3."


async def test_reformat_retries_respect_max_iterations(echo):
    llm = ScriptedLLM(["nope", "nope again"], abilities=NO_NATIVE)
    result = await ReActAgent(llm, [echo], max_iterations=2).run("hi")
    assert result.status == "max_iterations"
    assert result.iterations == 2


async def test_unusable_replies_end_the_run_cleanly(echo):
    llm = ScriptedLLM(["", "", ""], abilities=NO_NATIVE)
    result = await ReActAgent(llm, [echo]).run("hi")
    assert result.status == "error"
    assert result.answer


@pytest.mark.parametrize(
    "reply",
    [
        json.dumps({"type": "dance"}),
        json.dumps({"type": "tool_call", "tool": "echo", "arguments": "x=1"}),
        json.dumps({"type": "final_answer"}),
        "[1, 2, 3]",
    ],
)
async def test_wrong_shapes_ask_for_a_reformat(echo, reply):
    llm = ScriptedLLM([reply, final_json("fine")], abilities=NO_NATIVE)
    result = await ReActAgent(llm, [echo]).run("hi")
    assert result.answer == "fine"
    assert llm.calls[1].messages[-1].kind == "reformat"


async def test_unknown_tool_in_json_mode_is_an_observation(echo):
    llm = ScriptedLLM([tool_call_json("nope", {}), final_json("sorry")], abilities=NO_NATIVE)
    result = await ReActAgent(llm, [echo]).run("hi")
    assert "unknown tool 'nope'" in result.steps[0].observation
    assert result.answer == "sorry"


async def test_reasoning_field_reaches_hooks(echo):
    seen = []

    class Hook:
        async def pre_tool_use(self, call):
            seen.append(call.reason)
            from bot.engine import HookResult

            return HookResult()

    llm = ScriptedLLM(
        [tool_call_json("echo", {"x": 1}, reasoning="because"), final_json("ok")],
        abilities=NO_NATIVE,
    )
    await ReActAgent(llm, [echo], hooks=[Hook()]).run("hi")
    assert seen == ["because"]


async def test_final_answer_that_is_not_a_string_is_serialised(echo):
    reply = json.dumps({"type": "final_answer", "answer": {"total": 3}})
    llm = ScriptedLLM([reply], abilities=NO_NATIVE)
    result = await ReActAgent(llm, [echo]).run("hi")
    assert json.loads(result.answer) == {"total": 3}


async def test_reasoning_content_stands_in_for_empty_json_content(echo):
    llm = ScriptedLLM(
        [LLMResponse(content="", reasoning_content=final_json("from reasoning"))],
        abilities=NO_NATIVE,
    )
    result = await ReActAgent(llm, [echo]).run("hi")
    assert result.answer == "from reasoning"
    assert len(llm.calls) == 1
