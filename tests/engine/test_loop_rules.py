"""Self-reflection, cycle detection and the completion checklist, with native ordering."""

from __future__ import annotations

import pytest

from bot.engine import Message, ReActAgent, ToolCall
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response

from engine.support import make_tool


def turns(*batches: list[ToolCall], answers: tuple[str, ...] = ("done", "done")) -> ScriptedLLM:
    return ScriptedLLM([tool_calls_response(*batch) for batch in batches] + list(answers))


def distinct(n: int, start: int = 0) -> list[list[ToolCall]]:
    return [[tool_call("echo", {"x": i}, id=f"c{i}")] for i in range(start, start + n)]


def kinds_after_tools(messages: list[Message]) -> list[str | None]:
    return [m.kind for m in messages if m.role == "user" and m.kind not in ("query",)]


async def test_self_reflection_every_six_real_tool_calls(echo):
    llm = turns(*distinct(13), answers=("draft", "done"))
    result = await ReActAgent(llm, [echo]).run("count to thirteen")
    reflections = [m for m in result.messages if m.kind == "reflection"]
    assert len(reflections) == 2
    assert all(m.role == "user" for m in reflections)
    assert "[Self-check]" in reflections[0].content
    assert "count to thirteen" in reflections[0].content  # the goal is restated
    # The first reflection comes right after the 6th tool result.
    index = result.messages.index(reflections[0])
    assert result.messages[index - 1].role == "tool"
    assert result.messages[index - 1].tool_call_id == "c5"


async def test_reflection_waits_for_all_parallel_results(echo):
    batch1 = [tool_call("echo", {"x": i}, id=f"a{i}") for i in range(4)]
    batch2 = [tool_call("echo", {"x": i + 4}, id=f"b{i}") for i in range(4)]
    llm = turns(batch1, batch2)
    result = await ReActAgent(llm, [echo]).run("go")
    messages = result.messages
    second = next(i for i, m in enumerate(messages) if m.tool_calls and m.tool_calls[0].id == "b0")
    after = messages[second + 1 : second + 6]
    assert [m.role for m in after] == ["tool", "tool", "tool", "tool", "user"]
    assert [m.tool_call_id for m in after[:4]] == ["b0", "b1", "b2", "b3"]
    assert after[4].kind == "reflection"


async def test_cycle_warning_on_the_third_identical_call(echo):
    # The same arguments in a different key order are the same call.
    same = [
        [ToolCall("c1", "echo", {"x": 1, "y": 2}, "")],
        [ToolCall("c2", "echo", {"y": 2, "x": 1}, "")],
        [ToolCall("c3", "echo", {"x": 1, "y": 2}, "")],
    ]
    tool = make_tool("echo", parameters={"type": "object"})
    llm = turns(*same)
    result = await ReActAgent(llm, [tool]).run("go")
    warnings = [m for m in result.messages if m.kind == "cycle_warning"]
    assert len(warnings) == 1
    assert warnings[0].role == "user"
    assert "`echo` with identical arguments 3 times" in warnings[0].content
    index = result.messages.index(warnings[0])
    assert result.messages[index - 1].tool_call_id == "c3"


async def test_the_cycle_threshold_is_the_callers_to_set(echo, monkeypatch):
    # The engine reads no environment: the bot passes REACT_CYCLE_DETECTION_THRESHOLD in.
    monkeypatch.setenv("REACT_CYCLE_DETECTION_THRESHOLD", "9")
    same = [[tool_call("echo", {"x": 1}, id=f"c{i}")] for i in range(2)]
    result = await ReActAgent(turns(*same), [echo], cycle_threshold=2).run("go")
    warnings = [m for m in result.messages if m.kind == "cycle_warning"]
    assert len(warnings) == 1
    assert "identical arguments 2 times" in warnings[0].content


async def test_repeating_after_the_warning_stops_the_run(echo):
    ran = []

    async def handler(x: int) -> str:
        ran.append(x)
        return "same"

    tool = make_tool("echo", handler)
    same = [[tool_call("echo", {"x": 1}, id=f"c{i}")] for i in range(10)]
    llm = turns(*same)
    result = await ReActAgent(llm, [tool]).run("go")
    assert result.status == "cycle_stopped"
    # Warned at 3, tolerated once more, refused at the 5th: it never ran.
    assert len(ran) == 4
    assert len(llm.calls) == 5
    assert "repeating" in result.answer
    assert "identical arguments 5 times" in (result.error or "")


async def test_completion_checklist_once_after_three_tools(echo):
    llm = turns(*distinct(3), answers=("first draft", "final"))
    result = await ReActAgent(llm, [echo]).run("go")
    checklists = [m for m in result.messages if m.kind == "checklist"]
    assert len(checklists) == 1 and checklists[0].role == "user"
    assert result.messages[-2] is checklists[0]
    assert result.answer == "final"
    assert result.iterations == 5


async def test_no_checklist_below_the_minimum_or_when_disabled(echo):
    result = await ReActAgent(turns(*distinct(2), answers=("final",)), [echo]).run("go")
    assert not any(m.kind == "checklist" for m in result.messages)
    assert result.answer == "final"

    agent = ReActAgent(turns(*distinct(5), answers=("final",)), [echo], completion_check=False)
    result = await agent.run("go")
    assert not any(m.kind == "checklist" for m in result.messages)


async def test_the_checklist_minimum_is_the_callers_to_set(echo):
    agent = ReActAgent(
        turns(*distinct(1), answers=("draft", "final")), [echo], completion_check_min_tools=1
    )
    result = await agent.run("go")
    assert sum(m.kind == "checklist" for m in result.messages) == 1
    assert result.answer == "final"


async def test_the_knobs_default_to_three_and_refuse_nonsense(echo):
    agent = ReActAgent(ScriptedLLM(), [echo])
    assert agent.settings.cycle_threshold == 3
    assert agent.settings.completion_check_min_tools == 3
    with pytest.raises(ValueError, match="at least 1"):
        ReActAgent(ScriptedLLM(), [echo], cycle_threshold=0)


async def test_injected_messages_come_after_all_tool_results(echo):
    # One turn that triggers a cycle warning and the reflection at once.
    batches = [[tool_call("echo", {"x": 1}, id=f"r{i}")] for i in range(2)]
    batches.append([tool_call("echo", {"x": i}, id=f"p{i}") for i in range(1, 5)])
    result = await ReActAgent(turns(*batches), [echo]).run("go")
    messages = result.messages
    last = next(i for i, m in enumerate(messages) if m.tool_calls and m.tool_calls[0].id == "p1")
    after = messages[last + 1 :]
    assert [m.role for m in after[:4]] == ["tool"] * 4
    assert [m.kind for m in after[4:6]] == ["cycle_warning", "reflection"]
