"""Selection inside the first call (``tool_menu``): a plain question is one call, a choice
gives the run only what it names, and whatever the model sends as its choice, the run never
gets a tool outside the set nor more than it may take."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bot.engine import AnswerEvent, Message, ReActAgent, RunEvent, Tool, ToolRegistry
from bot.engine.messages import ToolCall
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response
from bot.engine.tool_menu import ToolMenu


def registry(n: int, ran: list[str] | None = None) -> ToolRegistry:
    def make(name: str) -> Tool:
        async def handler(**arguments: Any) -> str:
            if ran is not None:
                ran.append(name)
            return f"{name} result"

        return Tool(
            name=name,
            description=f"Tool {name} handles topic {name.upper()}.\nSecond line {name}.",
            parameters={"type": "object", "properties": {f"only_{name}": {"type": "string"}}},
            handler=handler,
            side_effect="read",
        )

    return ToolRegistry(make(f"t{i:02d}") for i in range(1, n + 1))


def offered(call: Any) -> list[str]:
    return [t["function"]["name"] for t in call.tools or ()]


async def test_a_plain_question_is_one_streamed_call_with_the_menu() -> None:
    llm = ScriptedLLM(["Paris."])
    events: list[RunEvent] = []
    agent = ReActAgent(llm, registry(14), tool_menu=True)
    result = await agent.run("What is the capital of France?", on_event=events.append)

    (call,) = llm.calls
    assert call.stream and offered(call) == ["select_tools"] and call.tool_choice is None
    system = call.messages[0].content
    assert "- t14: Tool t14 handles topic T14." in system and "Second line" not in system
    assert "only_t14" not in system  # names and one line, no schemas
    assert result.answer == "Paris." and result.answer_streamed
    assert "".join(e.delta for e in events if isinstance(e, AnswerEvent)) == "Paris."
    assert result.iterations == 1


async def test_a_choice_gives_the_run_only_those_tools_and_is_not_kept() -> None:
    ran: list[str] = []
    llm = ScriptedLLM(
        [
            tool_calls_response(tool_call("select_tools", {"tools": ["t03", "ghost"]})),
            tool_calls_response(tool_call("t03", {}), tool_call("t05", {})),
            "done",
        ]
    )
    result = await ReActAgent(llm, registry(14, ran), tool_menu=True).run("q")

    menu, first, _ = llm.calls
    assert offered(menu) == ["select_tools"] and offered(first) == ["t03"]
    # The menu and the choice are not in what the loop sends next.
    assert "t14" not in first.messages[0].content
    assert not any(m.tool_calls for m in first.messages)
    # t05 was on the menu but not chosen: an unknown tool to the run, never run.
    assert ran == ["t03"]
    assert result.answer == "done" and result.tools == ("t03",)
    assert result.iterations == 2  # the choice is not a step


async def test_text_before_a_choice_is_taken_back() -> None:
    llm = ScriptedLLM(
        [
            tool_calls_response(
                tool_call("select_tools", {"tools": ["t02"]}), content="Let me check."
            ),
            "the answer",
        ]
    )
    events: list[RunEvent] = []
    result = await ReActAgent(llm, registry(14), tool_menu=True).run("q", on_event=events.append)
    shown = ""
    for event in events:
        if isinstance(event, AnswerEvent):
            shown += event.delta
        elif event.type == "answer_withdrawn":
            assert shown.endswith(event.text)  # type: ignore[union-attr]
            shown = shown[: len(shown) - len(event.text)]  # type: ignore[union-attr]
    assert shown == "the answer" == result.answer


async def test_the_reference_design_keeps_its_separate_selection() -> None:
    llm = ScriptedLLM([tool_calls_response(tool_call("select_tools", {"tools": []})), "Paris."])
    await ReActAgent(llm, registry(14)).run("q")
    selection, answer = llm.calls
    assert selection.tool_choice is not None and not selection.stream
    assert answer.tools is None


names = st.one_of(st.sampled_from([f"t{i:02d}" for i in range(1, 16)]), st.text(max_size=8))
arguments = st.one_of(
    st.fixed_dictionaries({"tools": st.lists(names, max_size=10)}),
    st.dictionaries(st.text(max_size=6), st.one_of(st.none(), st.integers(), st.text())),
    st.fixed_dictionaries({"tools": st.one_of(st.text(), st.integers(), st.none())}),
)
calls = st.lists(
    st.builds(
        ToolCall,
        id=st.just("c"),
        name=st.one_of(st.just("select_tools"), st.sampled_from(["t01", "x", ""])),
        arguments=arguments,
        parse_error=st.one_of(st.none(), st.just("not JSON")),
    ),
    min_size=1,
    max_size=3,
)


@given(calls)
def test_whatever_the_choice_the_run_gets_a_subset_it_may_take(choice: list[ToolCall]) -> None:
    full = registry(14)
    menu = ToolMenu(full, max_tools=6)
    chosen = menu.chosen(choice)
    assert set(chosen.names()) <= set(full.names())
    assert chosen is full or len(chosen) <= 6
    note = menu.messages([Message.system("base"), Message.user("q")])
    assert note[0].content.startswith("base\n\n") and note[1].content == "q"
