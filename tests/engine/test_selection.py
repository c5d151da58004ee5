"""Tool selection: with many tools, one cheap call picks the few the run may use."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from bot.engine import (
    LLMResponse,
    LLMTransientError,
    Message,
    ReActAgent,
    Tool,
    ToolRegistry,
    Usage,
)
from bot.engine.selection import select_tools
from bot.engine.testing import RecordedCall, ScriptedLLM, tool_call, tool_calls_response

JSON_MODE = {"type": "json_object"}


class Toolbox:
    """N tools, each with a distinctive description and a schema property only it has."""

    def __init__(self, n: int) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        self.registry = ToolRegistry(self._make(f"t{i:02d}") for i in range(1, n + 1))

    def _make(self, name: str) -> Tool:
        async def handler(**arguments: Any) -> str:
            self.ran.append((name, arguments))
            return f"{name} result"

        return Tool(
            name=name,
            description=f"Tool {name} handles topic {name.upper()}.\nSecret second line {name}.",
            parameters={
                "type": "object",
                "properties": {f"uniqprop_{name}": {"type": "string", "description": "x"}},
            },
            handler=handler,
            side_effect="read",
        )

    @property
    def names(self) -> list[str]:
        return self.registry.names()


async def _noop(**arguments: Any) -> str:
    return "ok"


def offered(call: RecordedCall) -> list[str]:
    """The tool names a loop call offered natively."""
    return [t["function"]["name"] for t in call.tools or ()]


def select_answer(names: list[Any], usage: Usage | None = None) -> LLMResponse:
    return tool_calls_response(
        tool_call("select_tools", {"tools": names}), usage=usage or Usage(20, 5, 25)
    )


def is_selection_call(messages: list[Message]) -> bool:
    # Loop calls start with the system prompt and carry the pinned question.
    return not any(m.kind == "query" for m in messages)


def responder(selection_reply: Callable[[], Any], final: str = "all done") -> Callable[..., Any]:
    def reply(messages: list[Message]) -> Any:
        if is_selection_call(messages):
            return selection_reply()
        return final

    return reply


# -- native mode -------------------------------------------------------------------------


async def test_first_call_is_a_native_selection_over_a_compact_catalogue() -> None:
    box = Toolbox(14)
    llm = ScriptedLLM([select_answer(["t03", "t07", "ghost", "t01"]), "final"])
    result = await ReActAgent(llm, box.registry).run("Which topics need attention?")

    assert result.status == "completed"
    assert result.answer == "final"
    selection = llm.calls[0]
    prompt = "\n".join(m.content for m in selection.messages)
    assert "Which topics need attention?" in prompt
    for tool in box.registry:
        assert f"{tool.name}: Tool {tool.name} handles topic {tool.name.upper()}." in prompt
        assert f"Secret second line {tool.name}" not in prompt
        assert f"uniqprop_{tool.name}" not in prompt
    assert '"properties"' not in prompt
    # Answered natively, through one forced function with an array property "tools".
    assert selection.tools is not None
    assert len(selection.tools) == 1
    function = selection.tools[0]["function"]
    assert function["parameters"]["properties"]["tools"]["type"] == "array"
    assert selection.tool_choice == {"type": "function", "function": {"name": function["name"]}}
    # The loop offers only the chosen, known tools.
    assert offered(llm.calls[1]) == ["t01", "t03", "t07"]
    assert llm.calls[1].messages[0].role == "system"
    assert result.tools == ("t01", "t03", "t07")


async def test_more_than_six_names_are_cut_to_six() -> None:
    box = Toolbox(15)
    picked = ["t09", "t02", "t14", "t05", "t11", "t01", "t07", "t03", "t12"]
    llm = ScriptedLLM([select_answer(picked), "final"])
    await ReActAgent(llm, box.registry).run("q")
    chosen = offered(llm.calls[1])
    assert len(chosen) == 6
    assert set(chosen) == set(picked[:6])  # the model's first (most useful) six
    assert chosen == [n for n in box.names if n in chosen]  # in registry order


async def test_max_selected_tools_is_configurable() -> None:
    box = Toolbox(13)
    llm = ScriptedLLM([select_answer(["t01", "t02", "t03", "t04"]), "final"])
    await ReActAgent(llm, box.registry, max_selected_tools=2).run("q")
    assert offered(llm.calls[1]) == ["t01", "t02"]


async def test_the_selected_tools_run_normally() -> None:
    box = Toolbox(13)
    llm = ScriptedLLM(
        [
            select_answer(["t04", "t08"]),
            tool_calls_response(tool_call("t08", {"uniqprop_t08": "go"})),
            "final",
        ]
    )
    result = await ReActAgent(llm, box.registry).run("q")
    assert box.ran == [("t08", {"uniqprop_t08": "go"})]
    assert [s.status for s in result.steps] == ["ok"]
    assert offered(llm.calls[2]) == ["t04", "t08"]


async def test_a_call_outside_the_chosen_set_is_an_unknown_tool_error() -> None:
    box = Toolbox(13)
    llm = ScriptedLLM(
        [
            select_answer(["t01", "t02"]),
            tool_calls_response(tool_call("t05", {"uniqprop_t05": "x"}, id="c5")),
            "final",
        ]
    )
    result = await ReActAgent(llm, box.registry).run("q")
    assert box.ran == []  # t05 exists in the registry, but was not chosen: never runs
    (step,) = result.steps
    assert step.tool == "t05"
    assert step.status == "error"
    assert "unknown tool" in step.observation
    tool_messages = [m for m in llm.calls[2].messages if m.role == "tool"]
    assert len(tool_messages) == 1
    assert tool_messages[0].tool_call_id == "c5"
    assert "unknown tool" in tool_messages[0].content
    assert result.answer == "final"


async def test_selection_usage_counts_in_the_run_usage() -> None:
    box = Toolbox(13)
    llm = ScriptedLLM(
        [select_answer(["t01"], Usage(100, 10, 110)), LLMResponse("final", usage=Usage(1, 2, 3))]
    )
    result = await ReActAgent(llm, box.registry).run("q")
    assert result.usage == Usage(101, 12, 113)


@pytest.mark.parametrize(
    ("case", "selection_reply", "selection_calls"),
    [
        # A failed request is not an unparsed reply: one call, then the full set.
        ("llm-error", lambda: LLMTransientError("selection model down"), 1),
        # A reply naming only tools that do not exist parses: one call, the full set.
        (
            "only-unknown-names",
            lambda: tool_calls_response(
                tool_call("select_tools", {"tools": ["nope", "zilch"]}),
                content='{"tools": ["nope"]}',
            ),
            1,
        ),
        # Replies that do not parse walk the levels: native, JSON mode and its retry,
        # plain text and its retry.
        ("garbage", lambda: LLMResponse("I'd rather not say, sorry!"), 5),
        (
            "tools-not-a-list",
            lambda: tool_calls_response(
                tool_call("select_tools", {"tools": "t01"}), content='{"tools": "t01"}'
            ),
            5,
        ),
    ],
)
async def test_selection_failure_offers_the_full_set(
    case: str, selection_reply: Callable[[], Any], selection_calls: int
) -> None:
    box = Toolbox(14)
    llm = ScriptedLLM([responder(selection_reply)] * 12)
    result = await ReActAgent(llm, box.registry).run("q")
    assert result.status == "completed", case
    assert result.answer == "all done"
    loop_calls = [c for c in llm.calls if not is_selection_call(list(c.messages))]
    assert len(loop_calls) == 1
    assert len(llm.calls) - len(loop_calls) == selection_calls
    assert offered(loop_calls[0]) == box.names
    assert result.tools == tuple(box.names)
    assert is_selection_call(list(llm.calls[0].messages))


async def test_an_empty_selection_is_one_call_and_a_run_without_tools() -> None:
    box = Toolbox(14)
    llm = ScriptedLLM([select_answer([]), "Paris."])
    result = await ReActAgent(llm, box.registry).run("What is the capital of France?")
    assert result.status == "completed"
    assert result.answer == "Paris."
    selection, main = llm.calls
    assert is_selection_call(list(selection.messages))
    # "No tool needed": the main call carries no tool schemas at all.
    assert main.tools is None
    assert result.tools == ()


async def test_an_empty_selection_leaves_no_tool_to_run() -> None:
    box = Toolbox(14)
    llm = ScriptedLLM(
        [select_answer([]), tool_calls_response(tool_call("t01", {}, id="c1")), "final"]
    )
    result = await ReActAgent(llm, box.registry).run("q")
    assert box.ran == []
    assert result.steps[0].status == "error"
    assert "unknown tool" in result.steps[0].observation
    assert result.answer == "final"


async def test_an_empty_json_mode_selection_is_one_call_too() -> None:
    box = Toolbox(14)
    llm = ScriptedLLM(
        ['{"tools": []}', json.dumps({"type": "final_answer", "answer": "Paris."})],
        abilities={"tool_call": False},
    )
    result = await ReActAgent(llm, box.registry).run("What is the capital of France?")
    assert result.answer == "Paris."
    assert len(llm.calls) == 2
    system = llm.calls[1].messages[0].content
    assert "uniqprop_" not in system  # no tool is described to the model


async def test_selection_failure_still_lets_every_tool_run() -> None:
    box = Toolbox(13)
    script: list[Any] = [LLMTransientError("down")]  # one call: a failed request
    script += [tool_calls_response(tool_call("t13", {})), "final"]
    llm = ScriptedLLM(script)
    result = await ReActAgent(llm, box.registry).run("q")
    assert box.ran == [("t13", {})]
    assert result.answer == "final"


@pytest.mark.parametrize("n", [1, 6, 12])
async def test_no_selection_call_with_twelve_tools_or_fewer(n: int) -> None:
    box = Toolbox(n)
    llm = ScriptedLLM(["final"])
    result = await ReActAgent(llm, box.registry).run("q")
    assert result.answer == "final"
    assert len(llm.calls) == 1
    assert offered(llm.calls[0]) == box.names
    assert llm.calls[0].tool_choice is None


async def test_thirteen_tools_trigger_selection() -> None:
    box = Toolbox(13)
    llm = ScriptedLLM([select_answer(["t01"]), "final"])
    await ReActAgent(llm, box.registry).run("q")
    assert len(llm.calls) == 2
    assert is_selection_call(list(llm.calls[0].messages))


# -- JSON mode ---------------------------------------------------------------------------


async def test_json_mode_selection_and_system_prompt_lists_only_chosen_tools() -> None:
    box = Toolbox(14)
    llm = ScriptedLLM(
        [
            '{"tools": ["t02", "t04"]}',
            json.dumps({"type": "final_answer", "answer": "json final"}),
        ],
        abilities={"tool_call": False},
    )
    result = await ReActAgent(llm, box.registry).run("q")
    assert result.mode == "json"
    assert result.answer == "json final"
    selection, loop_call = llm.calls
    assert not selection.tools
    assert selection.response_format == JSON_MODE
    selection_prompt = "\n".join(m.content for m in selection.messages)
    assert "t13: Tool t13" in selection_prompt
    assert "uniqprop_" not in selection_prompt
    system = loop_call.messages[0]
    assert system.role == "system"
    for name in box.names:
        if name in ("t02", "t04"):
            assert f"uniqprop_{name}" in system.content
            assert f"Tool {name} handles" in system.content
        else:
            assert f"uniqprop_{name}" not in system.content
            assert f"Tool {name} handles" not in system.content


async def test_plain_text_selection_for_a_model_without_json_mode() -> None:
    box = Toolbox(13)
    llm = ScriptedLLM(
        [
            'I would pick these: {"tools": ["t09"]} thanks',
            json.dumps({"type": "final_answer", "answer": "plain final"}),
        ],
        abilities={"tool_call": False, "json_mode": False},
    )
    result = await ReActAgent(llm, box.registry).run("q")
    assert result.answer == "plain final"
    assert llm.calls[0].response_format is None
    assert not llm.calls[0].tools
    system = llm.calls[1].messages[0].content
    assert "uniqprop_t09" in system
    assert "uniqprop_t01" not in system
    assert result.tools == ("t09",)


async def test_json_mode_call_outside_the_chosen_set_is_unknown() -> None:
    box = Toolbox(13)
    llm = ScriptedLLM(
        [
            '{"tools": ["t02"]}',
            json.dumps({"type": "tool_call", "tool": "t03", "arguments": {}}),
            json.dumps({"type": "final_answer", "answer": "done"}),
        ],
        abilities={"tool_call": False},
    )
    result = await ReActAgent(llm, box.registry).run("q")
    assert box.ran == []
    assert result.steps[0].status == "error"
    assert "unknown tool" in result.steps[0].observation


# -- select_tools directly ---------------------------------------------------------------


async def test_select_tools_picks_known_names_and_reports_usage() -> None:
    box = Toolbox(20)
    llm = ScriptedLLM([select_answer(["t20", "t03", "t20", 7, None, "bogus"], Usage(9, 1, 10))])
    selection = await select_tools(llm, box.registry, "find invoices", max_tools=6)
    assert selection.selected is True
    assert selection.tools.names() == ["t03", "t20"]
    assert selection.usage == Usage(9, 1, 10)
    assert len(llm.calls) == 1
    assert "find invoices" in llm.calls[0].messages[-1].content


async def test_select_tools_respects_max_tools() -> None:
    box = Toolbox(20)
    llm = ScriptedLLM([select_answer(["t05", "t04", "t03", "t02"])])
    selection = await select_tools(llm, box.registry, "q", max_tools=3)
    assert selection.tools.names() == ["t03", "t04", "t05"]


async def test_select_tools_catalogue_lines_are_short() -> None:
    long = ToolRegistry(
        Tool(
            name=f"tool_{i}",
            description="An extremely verbose description that goes on and on " * 10,
            parameters={"type": "object", "properties": {}},
            handler=_noop,
        )
        for i in range(13)
    )
    llm = ScriptedLLM([select_answer(["tool_1"])])
    await select_tools(llm, long, "q", max_tools=6)
    prompt = llm.calls[0].messages[-1].content
    lines = [line for line in prompt.splitlines() if line.startswith("- tool_")]
    assert len(lines) == 13
    assert all(len(line) <= 80 for line in lines)


async def test_select_tools_failure_returns_the_full_registry() -> None:
    box = Toolbox(14)
    llm = ScriptedLLM([LLMTransientError("x")] * 3)
    selection = await select_tools(llm, box.registry, "q", max_tools=6)
    assert selection.selected is False
    assert selection.tools.names() == box.names
    assert len(llm.calls) == 1


async def test_select_tools_empty_list_selects_no_tool_in_one_call() -> None:
    box = Toolbox(20)
    llm = ScriptedLLM([select_answer([], Usage(9, 1, 10))])
    selection = await select_tools(llm, box.registry, "hello!", max_tools=6)
    assert selection.selected is True
    assert selection.tools.names() == []
    assert selection.usage == Usage(9, 1, 10)
    assert len(llm.calls) == 1


async def test_select_tools_unknown_names_keep_the_full_set_in_one_call() -> None:
    box = Toolbox(20)
    llm = ScriptedLLM([select_answer(["ghost", "t99"])])
    selection = await select_tools(llm, box.registry, "q", max_tools=6)
    assert selection.selected is False
    assert selection.tools.names() == box.names
    assert len(llm.calls) == 1


async def test_select_tools_garbage_returns_the_full_registry_with_usage() -> None:
    box = Toolbox(14)
    llm = ScriptedLLM([LLMResponse("no idea", usage=Usage(1, 1, 2))] * 5)
    selection = await select_tools(llm, box.registry, "q", max_tools=6)
    assert selection.selected is False
    assert selection.tools.names() == box.names
    assert selection.usage == Usage(5, 5, 10)


async def test_select_tools_never_raises_on_unexpected_errors() -> None:
    box = Toolbox(14)
    llm = ScriptedLLM([RuntimeError("provider bug")])
    selection = await select_tools(llm, box.registry, "q", max_tools=6)
    assert selection.selected is False
    assert selection.tools.names() == box.names
