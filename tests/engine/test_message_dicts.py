"""The engine's public functions take OpenAI-style message dicts as well as Messages, and
say clearly what is wrong with anything else."""

from __future__ import annotations

import pytest

from bot.engine import Message, ReActAgent, structured_llm_call
from bot.engine.messages import as_message, as_messages
from bot.engine.testing import ScriptedLLM, tool_call, tool_calls_response

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

OPENAI_HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "calculator", "arguments": '{"expression": "2+2"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "name": "calculator", "content": "4"},
    {"role": "assistant", "content": "4."},
]


async def test_structured_llm_call_takes_openai_dicts():
    llm = ScriptedLLM([tool_calls_response(tool_call("respond", {"n": 4}))])
    result = await structured_llm_call(
        llm, [{"role": "user", "content": "Give n."}], SCHEMA, function_name="respond"
    )
    assert result.value == {"n": 4}
    assert llm.calls[0].messages[-1] == Message("user", "Give n.")


async def test_an_agent_takes_a_history_of_dicts_with_tool_calls():
    llm = ScriptedLLM(["It is 4."], stream_script=["It is 4."])
    agent = ReActAgent(llm, [])
    result = await agent.run("And again?", history=OPENAI_HISTORY)
    assert result.status == "completed"
    sent = llm.calls[0].messages
    call = next(m for m in sent if m.tool_calls)
    assert call.tool_calls[0].name == "calculator"
    assert call.tool_calls[0].arguments == {"expression": "2+2"}
    assert any(m.role == "tool" and m.content == "4" for m in sent)
    assert any(m.content == "What is 2+2?" for m in sent)


def test_messages_pass_through_and_dicts_convert_field_by_field():
    message = Message.user("hi")
    assert as_message(message) is message
    tool = as_message(OPENAI_HISTORY[3])
    assert (tool.role, tool.tool_call_id, tool.name, tool.content) == (
        "tool",
        "call_1",
        "calculator",
        "4",
    )
    broken = as_message(
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{oops"}}],
        }
    )
    assert broken.tool_calls[0].parse_error  # the loop answers it with an error observation


@pytest.mark.parametrize(
    ("given", "error", "says"),
    [
        ([42], TypeError, "not int"),
        ("hello", TypeError, "a list of messages"),
        ({"role": "user", "content": "x"}, TypeError, "a list of messages"),
        ([{"role": "bot", "content": "x"}], ValueError, "role must be one of"),
        ([{"role": "user", "content": 7}], TypeError, "content must be text"),
        ([{"role": "assistant", "tool_calls": [{"id": "c"}]}], TypeError, "tool call must"),
    ],
)
def test_anything_else_is_a_clear_error(given, error, says):
    with pytest.raises(error, match=says):
        as_messages(given)


async def test_a_bad_history_fails_before_the_run_starts():
    llm = ScriptedLLM(["unused"])
    with pytest.raises(TypeError, match="not str"):
        await ReActAgent(llm, []).run("q", history=["just a string"])
    assert llm.calls == []
